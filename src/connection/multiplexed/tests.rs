//! The multiplexer against a real redis-server: every worker gets its own
//! reply, deadlines leave the stream in step, failures reach everyone.
use std::sync::atomic::Ordering;
use std::sync::Barrier;
use std::time::Duration;

use super::fence::Fences;
use super::state::State;
use super::*;
use crate::config::Protocol;
use crate::connection::{ConnectError, Connector, Failure};
use crate::protocol::Command;
use crate::stats::Stats;
use crate::testing::{Opener, RedisProcess};

fn connector(redis: &RedisProcess) -> Connector {
    let location = redis.location().parse().expect("location");
    Connector::new(&location, None, None, Protocol::Default, None, None)
}

fn packed(args: &[&str]) -> Vec<u8> {
    let mut command = Command::new(args[0].as_bytes());
    for arg in &args[1..] {
        command.push(arg.as_bytes());
    }
    command.packed().to_vec()
}

fn run(
    mux: &Multiplexed,
    connector: &Connector,
    args: &[&str],
    deadline: Option<Instant>,
) -> Result<Reply, RequestError<ConnectError>> {
    let stats = Stats::default();
    let timeout = deadline.map(|deadline| deadline.saturating_duration_since(Instant::now()));
    mux.request(&packed(args), timeout, None, &opener(connector), &stats)
        .map(|(reply, _)| reply)
}

/// Opens connections with `connector` (on the multiplexer's opening
/// thread: hence owned).
fn opener(
    connector: &Connector,
) -> Arc<impl ManageConnection<Error = ConnectError> + Send + Sync + 'static> {
    let connector = connector.clone();
    let stats = Stats::default();
    Arc::new(Opener(move || connector.connect(&stats)))
}

/// Redis's clients on its socket, `redis-cli` itself excluded.
fn clients(redis: &RedisProcess) -> usize {
    let list = redis.cli(&["CLIENT", "LIST"]);
    list.lines()
        .filter(|line| !line.contains("cmd=client"))
        .count()
}

#[test]
fn concurrent_workers_each_get_their_own_reply_on_one_connection() {
    let redis = RedisProcess::start(&[]);
    let connector = connector(&redis);
    let mux = Multiplexed::default();
    let threads = 16;
    let per_thread = 300;
    let start = Barrier::new(threads);
    std::thread::scope(|scope| {
        for t in 0..threads {
            let (mux, connector, start) = (&mux, &connector, &start);
            scope.spawn(move || {
                start.wait();
                for i in 0..per_thread {
                    let key = format!("k{t}-{i}");
                    let value = format!("v{t}-{i}-{}", "x".repeat(i % 50));
                    let set = run(mux, connector, &["SET", &key, &value], None).unwrap();
                    assert_eq!(set, Reply::Status("OK".into()));
                    let got = run(mux, connector, &["GET", &key], None).unwrap();
                    assert_eq!(got, Reply::String(value.into_bytes()), "{key}");
                }
            });
        }
    });
    assert_eq!(clients(&redis), 1, "one connection for all workers");
    assert_eq!(mux.in_flight(), 0);
    assert!(mux.is_open());
}

/// A request written ahead of others, whose short deadline passes, is
/// abandoned alone: its reply is read and dropped when it comes, and the
/// requests behind it, with longer deadlines, get theirs on the same
/// connection (it once closed the connection and failed them all).
#[test]
fn a_request_past_its_deadline_is_abandoned_alone_and_those_behind_it_get_their_replies() {
    let redis = RedisProcess::start(&[]);
    let connector = connector(&redis);
    let mux = Multiplexed::default();
    run(&mux, &connector, &["SET", "k", "v"], None).unwrap();
    std::thread::scope(|scope| {
        // The connection is busy for 200 ms, while the slow request and
        // then a GET queue: both are written in one batch when it frees.
        let busy = scope.spawn(|| {
            let deadline = Instant::now() + Duration::from_secs(5);
            run(&mux, &connector, &["DEBUG", "SLEEP", "0.2"], Some(deadline))
        });
        std::thread::sleep(Duration::from_millis(50));
        let slow = scope.spawn(|| {
            let deadline = Instant::now() + Duration::from_millis(300);
            run(&mux, &connector, &["DEBUG", "SLEEP", "0.5"], Some(deadline))
        });
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(mux.in_flight(), 2, "busy is written, slow queued behind it");
        let deadline = Instant::now() + Duration::from_secs(5);
        let get = run(&mux, &connector, &["GET", "k"], Some(deadline));
        assert_eq!(get.unwrap(), Reply::String(b"v".to_vec()));
        assert_eq!(busy.join().unwrap().unwrap(), Reply::Status("OK".into()));
        let slow = slow.join().unwrap();
        // Its timeout closed nothing, and says nothing of the server: the
        // busy request's reply came after it was written.
        assert!(
            matches!(slow, Err(RequestError::Late(Failure::Timeout))),
            "{slow:?}"
        );
    });
    let ping = run(&mux, &connector, &["PING"], None).unwrap();
    assert_eq!(ping, Reply::Status("PONG".into()));
    assert_eq!(clients(&redis), 1, "one connection all along");
}

/// Each fence's token is new: a command that read an earlier one (`SLOWLOG
/// GET`) cannot give back the next, on this multiplexer or another.
#[test]
fn every_fence_has_a_token_of_its_own() {
    let (mut a, mut b) = (Fences::default(), Fences::default());
    let mut seen = std::collections::HashSet::new();
    for _ in 0..1000 {
        assert!(seen.insert(a.next().0), "a token came back");
        assert!(seen.insert(b.next().0), "a token came back");
    }
    let fence = a.next();
    let mut packed = Vec::new();
    fence.pack_into(&mut packed);
    let token = std::str::from_utf8(&fence.0).unwrap();
    assert!(token.starts_with("vmod-redis-fence-"), "{token}");
    assert_eq!(packed, self::packed(&["PING", token]));
    let reply = format!("${}\r\n{token}\r\n", token.len());
    assert!(fence.answered_by(reply.as_bytes()));
    assert!(!a.next().answered_by(reply.as_bytes()));
    assert!(!fence.answered_by(&reply.as_bytes()[1..]));
}

/// Redis gives no reply to `REPLCONF ACK` from a normal client. Sent
/// among workers that SET and GET their own keys on one connection, it
/// once moved every later reply to the request after it: a worker got
/// another's value. Whatever gets through, no worker ever gets a reply
/// that is not its own; the requests caught with it fail, and are retried.
#[test]
fn a_command_that_never_replies_hands_no_worker_another_ones_reply() {
    let redis = RedisProcess::start(&[]);
    let connector = connector(&redis);
    let mux = Multiplexed::default();
    let threads = 8;
    let per_thread = 150;
    let start = Barrier::new(threads + 1);
    let misdelivered = std::sync::atomic::AtomicUsize::new(0);
    let failed = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|scope| {
        let (mux, connector, start) = (&mux, &connector, &start);
        let replconf = scope.spawn(move || {
            start.wait();
            let mut replied = Vec::new();
            for _ in 0..20 {
                let deadline = Instant::now() + Duration::from_millis(150);
                if let Ok(reply) = run(mux, connector, &["REPLCONF", "ACK", "0"], Some(deadline)) {
                    replied.push(reply);
                }
            }
            replied
        });
        for t in 0..threads {
            let (misdelivered, failed) = (&misdelivered, &failed);
            scope.spawn(move || {
                start.wait();
                for i in 0..per_thread {
                    let key = format!("k{t}-{i}");
                    let value = format!("v{t}-{i}");
                    // Retried as `execute` would, until it went through.
                    let mut attempts = 0;
                    loop {
                        attempts += 1;
                        assert!(attempts < 100, "{key}: never went through");
                        let deadline = Some(Instant::now() + Duration::from_secs(2));
                        let set = run(mux, connector, &["SET", &key, &value], deadline);
                        let got = set.and_then(|set| {
                            if set != Reply::Status("OK".into()) {
                                misdelivered.fetch_add(1, Ordering::Relaxed);
                            }
                            run(mux, connector, &["GET", &key], deadline)
                        });
                        match got {
                            Ok(got) => {
                                if got != Reply::String(value.clone().into_bytes()) {
                                    eprintln!("{key}: got {got:?}");
                                    misdelivered.fetch_add(1, Ordering::Relaxed);
                                }
                                break;
                            }
                            Err(_) => {
                                failed.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }
                }
            });
        }
        let replied = replconf.join().unwrap();
        assert_eq!(replied, Vec::<Reply>::new(), "REPLCONF got others' replies");
    });
    assert_eq!(
        misdelivered.load(Ordering::Relaxed),
        0,
        "replies reached the wrong worker"
    );
    // The REPLCONFs did meet other requests on the connection.
    assert!(
        failed.load(Ordering::Relaxed) > 0,
        "no request was caught with a REPLCONF"
    );
    let ping = run(&mux, &connector, &["PING"], None).unwrap();
    assert_eq!(ping, Reply::Status("PONG".into()));
}

/// A command that gives two replies (here: a RESP2 `SUBSCRIBE` of two
/// channels, which the command model keeps off this connection) is caught
/// by the fence of its batch: nothing of it reaches the next request.
#[test]
fn a_command_that_replies_twice_is_caught_by_its_fence() {
    let redis = RedisProcess::start(&[]);
    let connector = connector(&redis);
    let mux = Multiplexed::default();
    run(&mux, &connector, &["SET", "k", "v"], None).unwrap();
    let deadline = Some(Instant::now() + Duration::from_secs(2));
    let subscribe = run(&mux, &connector, &["SUBSCRIBE", "a", "b"], deadline);
    assert!(
        matches!(subscribe, Err(RequestError::Failed(Failure::Protocol(_)))),
        "{subscribe:?}"
    );
    let get = run(&mux, &connector, &["GET", "k"], deadline).unwrap();
    assert_eq!(get, Reply::String(b"v".to_vec()));
}

#[test]
fn a_lone_timeout_closes_the_connection_that_still_owes_a_reply() {
    let redis = RedisProcess::start(&[]);
    let connector = connector(&redis);
    let mux = Multiplexed::default();
    let deadline = Instant::now() + Duration::from_millis(100);
    let slow = run(&mux, &connector, &["DEBUG", "SLEEP", "0.3"], Some(deadline));
    assert!(
        matches!(slow, Err(RequestError::Failed(Failure::Timeout))),
        "{slow:?}"
    );
    assert!(!mux.is_open(), "nobody waits: the connection is closed");
    let ping = run(&mux, &connector, &["PING"], None).unwrap();
    assert_eq!(ping, Reply::Status("PONG".into()));
}

#[test]
fn a_broken_connection_fails_every_request_on_it_then_reconnects() {
    let redis = RedisProcess::start(&[]);
    let connector = connector(&redis);
    let mux = Multiplexed::default();
    run(&mux, &connector, &["PING"], None).unwrap();
    let waiters = 4;
    let start = Barrier::new(waiters + 2);
    std::thread::scope(|scope| {
        // The server sleeps while four BLPOPs queue: they are written in
        // one batch when its reply comes, and all block the connection.
        let (mux_, connector_, start_) = (&mux, &connector, &start);
        let sleeper = scope.spawn(move || {
            start_.wait();
            run(mux_, connector_, &["DEBUG", "SLEEP", "0.5"], None)
        });
        let handles: Vec<_> = (0..waiters)
            .map(|_| {
                let (mux, connector, start) = (&mux, &connector, &start);
                scope.spawn(move || {
                    start.wait();
                    std::thread::sleep(Duration::from_millis(100));
                    let deadline = Instant::now() + Duration::from_secs(5);
                    run(mux, connector, &["BLPOP", "nothing", "0"], Some(deadline))
                })
            })
            .collect();
        start.wait();
        assert_eq!(sleeper.join().unwrap().unwrap(), Reply::Status("OK".into()));
        // All four are in flight, then the server drops the connection.
        let until = Instant::now() + Duration::from_secs(3);
        while !redis.cli(&["CLIENT", "LIST"]).contains("cmd=blpop") || mux.in_flight() < waiters {
            assert!(Instant::now() < until, "requests not written");
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(Duration::from_millis(50));
        redis.cli(&["CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"]);
        let mut counted = 0;
        for handle in handles {
            let result = handle.join().unwrap();
            counted += usize::from(matches!(result, Err(RequestError::Failed(_))));
            assert!(
                matches!(
                    result,
                    Err(RequestError::Failed(Failure::HungUp(_))
                        | RequestError::Collateral(Failure::HungUp(_)))
                ),
                "{result:?}"
            );
        }
        assert_eq!(counted, 1, "one dropped connection, counted once");
    });
    assert!(!mux.is_open());
    let ping = run(&mux, &connector, &["PING"], None).unwrap();
    assert_eq!(ping, Reply::Status("PONG".into()));
}

#[test]
fn a_failed_connect_fails_the_request_and_the_next_one_connects_again() {
    let redis = RedisProcess::start(&[]);
    let connector = connector(&redis);
    let mux = Multiplexed::default();
    let stats = Stats::default();
    let refusing = Arc::new(Opener(|| {
        Err(ConnectError {
            server: "test".into(),
            detail: "refused".into(),
            failure: crate::connection::OpenFailure::Refused,
        })
    }));
    let refused = mux
        .request(&packed(&["PING"]), None, None, &refusing, &stats)
        .map(|(reply, _)| reply);
    assert!(
        matches!(refused, Err(RequestError::Connect(_))),
        "{refused:?}"
    );
    let ping = mux
        .request(&packed(&["PING"]), None, None, &opener(&connector), &stats)
        .map(|(reply, _)| reply);
    assert_eq!(ping.unwrap(), Reply::Status("PONG".into()));
}

/// A Varnish worker has `thread_pool_stack` (80 KiB by default), of which
/// Varnish and the VCL take part. Connecting over TLS from a pipelined
/// request (the worker drives the connect) and reading a reply that spans
/// several TLS records must fit in much less, even in a debug build
/// (which needs 37-41 KiB here; a release build far less): building the
/// TLS session on the worker overflowed it once.
#[test]
fn a_pipelined_tls_connect_fits_in_a_small_worker_stack() {
    use crate::tls::testing::text;
    use crate::tls::{Tls, TlsArgs};

    let (redis, port, files) = crate::testing::tls_redis("mux-stack");
    let tls = Tls::load(&TlsArgs {
        enabled: true,
        cafile: text(&files.ca),
        capath: "",
        certfile: "",
        keyfile: "",
        sni: "",
        verify_name: false,
    })
    .expect("TLS material");
    let location = format!("127.0.0.1:{port}").parse().expect("location");
    let connector = Connector::new(&location, None, None, Protocol::Default, None, Some(tls));
    let mux = Multiplexed::default();
    let value = "0123456789abcdef".repeat(1024);
    let reply = std::thread::scope(|scope| {
        std::thread::Builder::new()
            .stack_size(44 * 1024)
            .spawn_scoped(scope, || {
                let deadline = Some(Instant::now() + Duration::from_secs(10));
                run(&mux, &connector, &["SET", "big", &value], deadline)?;
                run(&mux, &connector, &["GET", "big"], deadline)
            })
            .expect("a worker thread")
            .join()
            .expect("the worker did not panic")
    });
    assert_eq!(reply.ok(), Some(Reply::String(value.into_bytes())));
    drop(redis);
}

/// The fence is a `PING`: a user whose ACL refuses it is told so, and
/// gets no reply that the fence could not vouch for.
#[test]
fn a_user_without_ping_is_told_that_pipelining_needs_it() {
    let redis = RedisProcess::start(&[]);
    redis.cli(&[
        "ACL", "SETUSER", "limited", "on", ">pw", "+get", "+set", "~*",
    ]);
    let location = redis.location().parse().expect("location");
    let connector = Connector::new(
        &location,
        Some("limited"),
        Some("pw"),
        Protocol::Default,
        None,
        None,
    );
    let mux = Multiplexed::default();
    let deadline = Some(Instant::now() + Duration::from_secs(2));
    let get = run(&mux, &connector, &["GET", "k"], deadline);
    let Err(RequestError::Failed(Failure::Protocol(err))) = get else {
        panic!("{get:?}");
    };
    assert!(err.to_string().contains("refused PING"), "{err}");
}

/// A fence that came back makes its requests' replies takeable under the
/// state lock; only their wake-up waits until the driver unlocks. A worker
/// whose deadline passes in between (it checks under the lock, as
/// `exchange` does) still finds its reply: no timeout for a reply read
/// before its deadline (which would mark the server sick and retry the
/// command elsewhere).
#[test]
fn a_reply_released_by_its_fence_is_taken_before_the_wake_up() {
    use super::fence::FenceReply;
    use super::state::Read;
    let stats = Stats::default();
    let mut state = State::default();
    // Live when its batch is taken (a request already past its deadline
    // is not written at all), past its deadline by the time it checks.
    let worker = Waiter::new(Some(Instant::now() + Duration::from_millis(20)));
    let driver = Waiter::new(None);
    let ping = packed(&["PING"]);
    state.unsent.extend_from_slice(&ping);
    state.unsent_waiters.push((worker.clone(), ping.len()));
    let (batch, _) = state.take_batch(&stats);
    assert!(!batch.is_empty());
    let mut released = Vec::new();
    let pong = Reply::Status("PONG".into());
    assert!(!state
        .route(Read::Reply(pong), &driver, &mut released)
        .unwrap());
    assert!(!state
        .route(Read::Fence(FenceReply::Itself), &driver, &mut released)
        .unwrap());
    assert_eq!(released.len(), 1, "the fence released the worker's request");
    assert!(
        state.in_flight.is_empty(),
        "nothing is owed on the connection"
    );
    // The driver has dropped the lock, not yet called wake(). The worker,
    // at its deadline, locks the state and checks, as exchange() does:
    std::thread::sleep(Duration::from_millis(30));
    assert!(worker.due());
    let seen = worker.take();
    let drives = worker.drives();
    worker.abandon();
    // The driver wakes it now: too late.
    for waiter in released.drain(..) {
        waiter.release();
    }
    assert!(
        seen.is_some() || drives,
        "the worker saw no reply and no driving: it returned a timeout \
         although its reply was routed before its deadline"
    );
}

/// A request whose deadline passed while it was queued, its worker not
/// yet awake to abandon it, is not written: the batch made of it alone
/// once got a write deadline in the past, the write failed before any
/// byte went out, and the requests written before it (here a `DEBUG
/// SLEEP` with seconds left) failed with it, to be retried (an `INCR`
/// that had run then ran twice).
#[test]
fn a_request_queued_past_its_deadline_is_not_written_and_fails_no_one() {
    let redis = RedisProcess::start(&[]);
    let connector = connector(&redis);
    let mux = Multiplexed::default();
    std::thread::scope(|scope| {
        let busy = scope.spawn(|| {
            let deadline = Instant::now() + Duration::from_secs(5);
            run(&mux, &connector, &["DEBUG", "SLEEP", "0.3"], Some(deadline))
        });
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(mux.in_flight(), 1, "the DEBUG SLEEP is written");
        // Queued behind it, already past its deadline; its worker (this
        // thread) does not wake to abandon it.
        let dead = Waiter::new(Some(Instant::now() - Duration::from_millis(1)));
        let incr = packed(&["INCR", "n"]);
        {
            let mut state = mux.state.lock();
            state.unsent.extend_from_slice(&incr);
            state.unsent_waiters.push((dead.clone(), incr.len()));
        }
        let busy = busy.join().unwrap();
        assert_eq!(busy.unwrap(), Reply::Status("OK".into()));
        assert!(dead.abandoned(), "the dead request left the queue");
        assert!(dead.take().is_none(), "and got nothing");
    });
    assert_eq!(redis.cli(&["GET", "n"]), "", "the INCR never ran");
    let ping = run(&mux, &connector, &["PING"], None).unwrap();
    assert_eq!(ping, Reply::Status("PONG".into()));
    assert_eq!(clients(&redis), 1, "one connection all along");
}

/// The batch's write is bounded by the last deadline of the requests on
/// the connection, not by this batch's alone: a write cut short fails
/// every request written.
#[test]
fn a_batch_is_written_within_the_last_deadline_of_the_requests_on_the_connection() {
    let stats = Stats::default();
    let mut state = State::default();
    let ping = packed(&["PING"]);
    let later = Instant::now() + Duration::from_secs(5);
    let soon = Instant::now() + Duration::from_millis(500);
    let written = Waiter::new(Some(later));
    state.unsent.extend_from_slice(&ping);
    state.unsent_waiters.push((written.clone(), ping.len()));
    assert_eq!(state.take_batch(&stats).1, Some(later));
    let next = Waiter::new(Some(soon));
    state.unsent.extend_from_slice(&ping);
    state.unsent_waiters.push((next, ping.len()));
    assert_eq!(state.take_batch(&stats).1, Some(later), "the written one's");
    // Nothing owed any more (a closed connection): the next batch's own.
    state.forget_in_flight();
    let last = Waiter::new(Some(soon));
    state.unsent.extend_from_slice(&ping);
    state.unsent_waiters.push((last, ping.len()));
    assert_eq!(state.take_batch(&stats).1, Some(soon), "a forgotten one's");
    let forever = Waiter::new(None);
    state.unsent.extend_from_slice(&ping);
    state.unsent_waiters.push((forever, ping.len()));
    assert_eq!(state.take_batch(&stats).1, None, "one has no deadline");
}
