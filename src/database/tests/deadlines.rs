//! Deadlines and failures: waits bounded by the worker's own deadline,
//! servers that are loading, timeouts past the clock.
use super::*;

/// A worker that needs the slot map while another one reads it (from a
/// seed that accepts and never answers) waits for it until its own
/// deadline only, then fails with a clear error.
#[test]
fn a_worker_waits_for_another_ones_discovery_until_its_own_deadline() {
    let seed = silent_server();
    let config = DbConfig::from_args(&DbArgs {
        location: &seed,
        role: "cluster",
        connection_timeout: 50,
        ..DbArgs::default()
    })
    .expect("valid config");
    // Asks the seed once already, for 500 ms, as `vcl_init` does: a
    // failure there does not hold back the first command's discovery.
    let db = Database::new("c", config).expect("database");
    assert_eq!(db.stats().get(Counter::ClusterDiscoveriesFailed), 1);
    let get = |ms: u64| timed_get(&db, ms);
    std::thread::scope(|scope| {
        // Reads the map for 500 ms (a discovery step's cap) at least.
        let slow = scope.spawn(|| get(2000));
        std::thread::sleep(Duration::from_millis(100));
        // Its deadline: (50 + 50) ms.
        let (result, took) = get(50);
        assert!(
            matches!(result, Err(Error::DiscoveryWait { .. })),
            "{result:?}"
        );
        assert!(took < Duration::from_millis(300), "waited {took:?}");
        let (result, took) = slow.join().unwrap();
        assert!(matches!(result, Err(Error::NoSlotMap { .. })), "{result:?}");
        assert!(took >= Duration::from_millis(400), "{took:?}");
    });
    // The one at load failed, so counts as failed only; this one in both.
    assert_eq!(db.stats().get(Counter::ClusterDiscoveriesTotal), 1);
    assert_eq!(db.stats().get(Counter::ClusterDiscoveriesFailed), 2);
    // Within the second after it: at once, with its error, no discovery.
    let (result, took) = get(2000);
    let err = result.unwrap_err().to_string();
    assert!(err.contains("CLUSTER SHARDS: timeout"), "{err}");
    assert!(took < Duration::from_millis(100), "{took:?}");
    assert_eq!(db.stats().get(Counter::ClusterDiscoveriesTotal), 1);
}

/// `LOADING` (the server is loading its data and ran nothing): within the
/// retry count, the next candidate serves the command; without retries,
/// the error is the reply.
#[test]
fn a_loading_server_is_passed_over_within_the_retry_count() {
    let source = RedisProcess::start(&[]);
    source.cli(&["DEBUG", "POPULATE", "2000", "k"]);
    assert_eq!(source.cli(&["SAVE"]), "OK");
    let dir = source.socket.parent().unwrap().display().to_string();
    // Its dump: 2000 keys at 2 ms each, answering LOADING meanwhile.
    let loading = RedisProcess::start(&[
        "--dir",
        &dir,
        "--key-load-delay",
        "2000",
        "--loading-process-events-interval-bytes",
        "1024",
    ]);
    assert!(loading.cli(&["GET", "k:1"]).starts_with("LOADING"));
    // Reads go to the replica first: the loading server.
    let db = database(&loading, |args| args.role = "slave");
    db.add_server(
        &source.location().parse().unwrap(),
        Role::Master,
        &mut |_| {},
    )
    .unwrap();
    let get = |retries| {
        let mut command = Command::new(b"GET");
        command.push(b"k:1");
        command.retries = Some(retries);
        db.execute(
            &mut command,
            false,
            &mut TaskConnection::default(),
            &mut |_| {},
        )
    };
    match get(0).unwrap() {
        Reply::Error(text) => assert!(text.starts_with("LOADING"), "{text}"),
        reply => panic!("{reply:?}"),
    }
    assert_eq!(db.stats().get(Counter::CommandsRetried), 0);
    assert_eq!(get(1).unwrap(), Reply::String(b"value:1".to_vec()));
    assert_eq!(db.stats().get(Counter::CommandsRetried), 1);
    assert_eq!(db.stats().get(Counter::CommandsError), 1);
    assert!(
        loading.cli(&["GET", "k:1"]).starts_with("LOADING"),
        "still loading: the test saw what it meant to"
    );
}

/// `.timeout(999999999999999)` with `.retries(10000000)` from VCL: the
/// bound of the whole execute is past what the clock can hold. No panic:
/// no bound, and the command runs (each mode: the multiplexer computes
/// its own deadline from the timeout).
#[test]
fn a_timeout_and_retries_past_the_clock_mean_no_bound_not_a_panic() {
    let redis = RedisProcess::start(&[]);
    for (shared, pipelining) in [(false, false), (true, false), (true, true)] {
        let db = database(&redis, |args| {
            args.shared_connections = shared;
            args.pipelining = pipelining;
            args.connection_timeout = 500;
            args.command_timeout = 500;
        });
        assert_eq!(
            db.deadline(Some(Duration::from_millis(999_999_999_999_999)), 10_000_000),
            None
        );
        assert!(db
            .deadline(Some(Duration::from_millis(500)), 10_000_000)
            .is_some());
        let mut ping = Command::new(b"PING");
        ping.timeout = Some(Duration::from_millis(999_999_999_999_999));
        ping.retries = Some(10_000_000);
        let reply = db.execute(&mut ping, true, &mut TaskConnection::default(), &mut |_| {});
        assert_eq!(
            reply.unwrap(),
            Reply::Status("PONG".into()),
            "{shared} {pipelining}"
        );
        let mut ping = Command::new(b"PING");
        ping.timeout = Some(Duration::from_millis(i64::MAX as u64));
        ping.retries = Some(u32::MAX);
        let reply = db.execute(&mut ping, true, &mut TaskConnection::default(), &mut |_| {});
        assert_eq!(
            reply.unwrap(),
            Reply::Status("PONG".into()),
            "{shared} {pipelining}"
        );
    }
}

/// A new connection's handshake (`HELLO 3` here) waits for a server that
/// accepted as long as the command's timeout, not `connection_timeout`
/// (as hiredis: the C VMOD sets the command timeout on the socket before
/// it); and a server that accepted and stayed silent is not put into the
/// reconnect spacing: the next command waits for it again instead of
/// failing at once. With no command timeout, `connection_timeout` bounds
/// the handshake: never for ever.
#[test]
fn a_handshake_waits_the_command_timeout_and_a_silent_server_is_not_spaced() {
    let silent = silent_server();
    for shared in [false, true] {
        let db = |command_timeout| {
            let args = DbArgs {
                location: &silent,
                role: "master",
                protocol: "RESP3",
                connection_timeout: 50,
                command_timeout,
                shared_connections: shared,
                ..DbArgs::default()
            };
            Database::new("db", DbConfig::from_args(&args).unwrap()).unwrap()
        };
        let timed = |db: &Database| {
            let started = Instant::now();
            let err = run(db, &["PING"]).unwrap_err();
            (started.elapsed(), err)
        };
        let waits = db(400);
        for attempt in 0..2 {
            let (waited, err) = timed(&waits);
            assert!(matches!(err, Error::Connect(_)), "{attempt}: {err}");
            assert!(
                err.to_string().contains("handshake failed: timeout"),
                "{err}"
            );
            assert!(
                waited >= Duration::from_millis(400),
                "{attempt}: {waited:?}"
            );
            assert!(
                waited < Duration::from_millis(1400),
                "{attempt}: {waited:?}"
            );
        }
        let (waited, err) = timed(&db(0));
        assert!(
            err.to_string().contains("handshake failed: timeout"),
            "{err}"
        );
        assert!(
            waited < Duration::from_millis(1000),
            "no command timeout: {waited:?}"
        );
    }
}

/// A connection opened for the pipelined requests is theirs, though a
/// request queued behind the opening timed out meanwhile: that timeout
/// (never written, `RequestError::Late`) says nothing of the server. It
/// once marked the server failed, which "outdated" the connection just
/// opened, thrown away (`dropped.sick`).
#[test]
fn a_connection_opened_for_pipelined_requests_is_kept_when_a_queued_one_times_out() {
    let redis = RedisProcess::start(&[]);
    let db = database(&redis, |args| {
        args.pipelining = true;
        args.protocol = "RESP3";
        args.command_timeout = 3000;
    });
    let get = |ms: u64| timed_get(&db, ms);
    std::thread::scope(|scope| {
        let sleeper = scope.spawn(|| redis.cli(&["DEBUG", "SLEEP", "0.5"]));
        std::thread::sleep(Duration::from_millis(100));
        // Drives; the opening connects, then waits for HELLO's reply.
        let long = scope.spawn(|| get(3000));
        std::thread::sleep(Duration::from_millis(100));
        // Queued behind the opening, never written: times out.
        let (short, _) = get(20);
        assert!(short.is_err(), "{short:?}");
        let (long, took) = long.join().unwrap();
        sleeper.join().unwrap();
        eprintln!(
            "long: {long:?} in {took:?}; connections.total {} dropped.sick {}",
            db.stats().get(Counter::ConnectionsTotal),
            db.stats().get(Counter::DroppedSick)
        );
        assert!(long.is_ok());
        assert_eq!(
            db.stats().get(Counter::DroppedSick),
            0,
            "the connection just opened for the long GET was thrown away"
        );
    });
}

/// A TCP proxy to `redis` that delays each chunk of the server's replies
/// by `delay` (a server 50 ms away, or loaded).
fn delaying_proxy(redis: &RedisProcess, delay: Duration) -> String {
    proxy_to(redis, false, delay)
}

/// The same, repeated: a server whose replies take 50 ms (far, or
/// loaded) while short requests keep timing out in the queue. Every
/// connection opened was once thrown away, and a 2000 ms request failed
/// although each opening got its replies well within it (75 connections
/// in 2 s); private mode serves it in ~100 ms.
#[test]
fn short_timeouts_in_the_queue_do_not_starve_a_long_pipelined_request() {
    let redis = RedisProcess::start(&[]);
    let proxy = delaying_proxy(&redis, Duration::from_millis(50));
    let mut failures = Vec::new();
    for pipelining in [false, true] {
        let config = DbConfig::from_args(&DbArgs {
            location: &proxy,
            role: "master",
            pipelining,
            shared_connections: pipelining,
            protocol: "RESP3",
            command_timeout: 3000,
            ..DbArgs::default()
        })
        .expect("valid config");
        let db = Database::new("db", config).expect("database");
        let get = |ms: u64| timed_get(&db, ms);
        let stop = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|scope| {
            let (stop, get) = (&stop, &get);
            scope.spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let _ = get(10);
                    std::thread::sleep(Duration::from_millis(5));
                }
            });
            std::thread::sleep(Duration::from_millis(30));
            let (long, took) = get(2000);
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            eprintln!(
                "pipelining={pipelining}: long GET {long:?} in {took:?}; connections.total {} dropped.sick {}",
                db.stats().get(Counter::ConnectionsTotal),
                db.stats().get(Counter::DroppedSick)
            );
            if long.is_err() {
                failures.push(format!("pipelining={pipelining}: {long:?} in {took:?}"));
            }
        });
    }
    assert!(failures.is_empty(), "{failures:?}");
}

/// An opening whose drivers all left stays in the state; its failure,
/// which nobody waited for, is not handed much later to the first request
/// that comes (it failed without a connect of its own, the server fine
/// by then): that request opens its own.
#[test]
fn an_opening_failure_nobody_waited_for_fails_no_later_request() {
    // The opening's handshake times out at 300 ms; nobody is left.
    after_a_silent_opening_a_later_request_is_served(300, 1000);
}

/// connection_timeout=0 and command_timeout=0, every command with its own
/// .timeout(): the opening is bounded by the timeout of the command that
/// needs it. It had no bound, and one silent connection held the
/// multiplexer for good.
#[test]
fn with_no_db_timeouts_an_opening_is_bounded_by_the_command_timeout() {
    after_a_silent_opening_a_later_request_is_served(0, 0);
}

/// A 50 ms GET drives the opening of a connection that is never answered
/// (`silent_first_proxy`), on a pipelined database with these timeouts;
/// 2 s later a 1000 ms GET is served, on a connection of its own.
fn after_a_silent_opening_a_later_request_is_served(command_timeout: i64, connection_timeout: i64) {
    let redis = RedisProcess::start(&[]);
    let location = silent_first_proxy(&redis);
    let config = DbConfig::from_args(&DbArgs {
        location: &location,
        role: "master",
        pipelining: true,
        protocol: "RESP3",
        command_timeout,
        connection_timeout,
        ..DbArgs::default()
    })
    .expect("valid config");
    let db = Database::new("db", config).expect("database");
    let get = |ms: u64| timed_get(&db, ms).0;
    let first = get(50);
    eprintln!("first (50 ms, the silent connection): {first:?}");
    std::thread::sleep(Duration::from_secs(2));
    let later = get(1000);
    eprintln!(
        "2 s later, the server answering: {later:?}; connections.total {}",
        db.stats().get(Counter::ConnectionsTotal)
    );
    assert!(later.is_ok(), "{later:?}");
}

/// A TCP proxy to `redis` whose first connection is accepted and never
/// answered (a server that stalls in the handshake), the next ones passed
/// through. Its location.
fn silent_first_proxy(redis: &RedisProcess) -> String {
    proxy_to(redis, true, Duration::ZERO)
}

/// A TCP proxy to `redis`'s socket, each chunk of the server's replies
/// passed on `reply_delay` late; with `first_silent`, its first connection
/// is accepted and never answered. Its location.
fn proxy_to(redis: &RedisProcess, first_silent: bool, reply_delay: Duration) -> String {
    use std::io::{Read, Write};
    use std::net::TcpListener;
    use std::os::unix::net::UnixStream;
    /// Copies `from` to `to`, each chunk `delay` late, until either ends.
    fn pipe(mut from: impl Read, mut to: impl Write, delay: Duration, close: impl FnOnce()) {
        let mut buf = [0u8; 65536];
        while let Ok(n) = from.read(&mut buf) {
            if n == 0 {
                break;
            }
            std::thread::sleep(delay);
            if to.write_all(&buf[..n]).is_err() {
                break;
            }
        }
        close();
    }
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let location = listener.local_addr().unwrap().to_string();
    let socket = redis.socket.clone();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for (n, client) in listener.incoming().flatten().enumerate() {
            if first_silent && n == 0 {
                held.push(client);
                continue;
            }
            let Ok(server) = UnixStream::connect(&socket) else {
                continue;
            };
            let (c_read, s_write) = (client.try_clone().unwrap(), server.try_clone().unwrap());
            let s_close = server.try_clone().unwrap();
            std::thread::spawn(move || {
                pipe(c_read, s_write, Duration::ZERO, move || {
                    let _ = s_close.shutdown(std::net::Shutdown::Both);
                })
            });
            let c_close = client.try_clone().unwrap();
            std::thread::spawn(move || {
                pipe(server, client, reply_delay, move || {
                    let _ = c_close.shutdown(std::net::Shutdown::Both);
                })
            });
        }
    });
    location
}

/// `GET k` on `db` with a per-call timeout of `ms`, and how long it took.
fn timed_get(db: &Database, ms: u64) -> (Result<Reply>, Duration) {
    let mut command = Command::new(b"GET");
    command.push(b"k");
    command.timeout = Some(Duration::from_millis(ms));
    let started = Instant::now();
    let result = db.execute(
        &mut command,
        true,
        &mut TaskConnection::default(),
        &mut |_| {},
    );
    (result, started.elapsed())
}
