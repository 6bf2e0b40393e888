//! Connections against real servers: Pub/Sub slices, and every wait
//! ending by its deadline (TLS records trickled, a TLS handshake trickled,
//! a UNIX connect to a full accept queue).
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use super::connector::resolve;
use super::stream::STOP_SLICE;
use super::*;
use crate::config::{Location, Protocol};
use crate::protocol::{Command, Reply};
use crate::stats::Stats;

fn packed(args: &[&[u8]]) -> Vec<u8> {
    let mut command = Command::new(args[0]);
    for arg in &args[1..] {
        command.push(arg);
    }
    command.packed().to_vec()
}

/// The Sentinel thread's use of a connection: subscribe, wait for
/// messages in short slices (a slice with nothing is no failure), and
/// get each message whole, RESP2 array or RESP3 push alike.
#[test]
fn subscribed_connection_receives_messages_between_timeouts() {
    let redis = crate::testing::RedisProcess::start(&[]);
    for protocol in [Protocol::Default, Protocol::Resp3] {
        let location: Location = redis.location().parse().unwrap();
        let connector = Connector::new(&location, None, None, protocol, None, None);
        let mut conn = connector.connect(&Stats::default()).unwrap();
        let wait = Some(Duration::from_secs(2));
        conn.send(&packed(&[b"PSUBSCRIBE", b"+sw*"]), wait).unwrap();
        let ack = conn.receive(Duration::from_secs(2)).unwrap();
        assert!(
            matches!(&ack, Reply::Array(items) if items.len() == 3),
            "{ack:?}"
        );
        let started = Instant::now();
        assert!(matches!(
            conn.receive(Duration::from_millis(50)),
            Err(Failure::Timeout)
        ));
        assert!(started.elapsed() < Duration::from_secs(1));
        assert!(!conn.is_broken());
        assert_eq!(redis.cli(&["PUBLISH", "+switch", "main a b"]), "1");
        let message = conn.receive(Duration::from_secs(2)).unwrap();
        let Reply::Array(items) = message else {
            panic!("not a message: {message:?}");
        };
        assert_eq!(items.len(), 4);
        assert_eq!(items[0], Reply::String(b"pmessage".to_vec()));
        assert_eq!(items[3], Reply::String(b"main a b".to_vec()));
    }
}

// ---- every wait ends by its deadline ------------------------------------

use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use crate::connection::multiplexed::Multiplexed;
use crate::connection::RequestError;
use crate::testing::{tls_redis, v1_tls_redis, Opener, RedisProcess};
use crate::tls::testing::{material, text, Material, V1_SERVER_CN};
use crate::tls::{Tls, TlsArgs};

/// A busy 2-core machine may add this much to any bound.
const SLACK: Duration = Duration::from_secs(1);

fn tls_connector(files: &Material, addr: &str, connect_timeout: Duration) -> Connector {
    let tls = Tls::load(&TlsArgs {
        enabled: true,
        cafile: text(&files.ca),
        capath: "",
        certfile: "",
        keyfile: "",
        sni: "localhost",
        verify_name: false,
    })
    .expect("TLS material");
    let location = addr.parse().expect("location");
    Connector::new(
        &location,
        None,
        None,
        Protocol::Default,
        Some(connect_timeout),
        Some(tls),
    )
}

/// A TCP proxy in front of `upstream`: bytes to the server pass as they
/// come; bytes to the client too, until `trickle` is set: then one byte
/// every 200 ms. Each connection's threads stop after 10 s.
struct TrickleProxy {
    addr: String,
    trickle: Arc<AtomicBool>,
}

impl TrickleProxy {
    fn start(upstream: String) -> TrickleProxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("proxy port");
        let addr = listener.local_addr().unwrap().to_string();
        let trickle = Arc::new(AtomicBool::new(false));
        let trickling = trickle.clone();
        std::thread::spawn(move || {
            for client in listener.incoming().take(4) {
                let Ok(client) = client else { return };
                let server = std::net::TcpStream::connect(&upstream).expect("upstream");
                let until = Instant::now() + Duration::from_secs(10);
                let (mut c_in, mut s_out) =
                    (client.try_clone().unwrap(), server.try_clone().unwrap());
                std::thread::spawn(move || {
                    c_in.set_read_timeout(Some(Duration::from_millis(50)))
                        .unwrap();
                    let mut buf = [0u8; 4096];
                    while Instant::now() < until {
                        match c_in.read(&mut buf) {
                            Ok(0) => break,
                            Ok(n) => {
                                if s_out.write_all(&buf[..n]).is_err() {
                                    break;
                                }
                            }
                            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                            Err(_) => break,
                        }
                    }
                    let _ = s_out.shutdown(std::net::Shutdown::Both);
                });
                let trickling = trickling.clone();
                let (mut s_in, mut c_out) = (server, client);
                std::thread::spawn(move || {
                    s_in.set_read_timeout(Some(Duration::from_millis(50)))
                        .unwrap();
                    let mut buf = [0u8; 4096];
                    'copy: while Instant::now() < until {
                        match s_in.read(&mut buf) {
                            Ok(0) => break,
                            Ok(n) => {
                                for byte in &buf[..n] {
                                    if c_out.write_all(std::slice::from_ref(byte)).is_err()
                                        || Instant::now() >= until
                                    {
                                        break 'copy;
                                    }
                                    if trickling.load(Ordering::Relaxed) {
                                        std::thread::sleep(Duration::from_millis(200));
                                    }
                                }
                            }
                            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                            Err(_) => break,
                        }
                    }
                    let _ = c_out.shutdown(std::net::Shutdown::Both);
                });
            }
        });
        TrickleProxy { addr, trickle }
    }
}

/// rustls reads until a whole TLS record has arrived: a reply trickled
/// one byte every 200 ms held a GET for minutes with a 300 ms timeout
/// (each socket read was bounded, their sum was not). Private / shared
/// connections and a pipelined one alike.
#[test]
fn a_tls_reply_trickled_a_byte_at_a_time_ends_at_the_command_timeout() {
    let (redis, port, files) = tls_redis("trickle-reply");
    let value = "x".repeat(4096);
    redis.cli(&["SET", "big", &value]);
    let proxy = TrickleProxy::start(format!("127.0.0.1:{port}"));
    let connector = tls_connector(&files, &proxy.addr, Duration::from_secs(5));
    let stats = Stats::default();
    let mut conn = connector.connect(&stats).expect("TLS connect");
    let piped = parking_lot::Mutex::new(Some(connector.connect(&stats).expect("TLS connect")));
    let get = packed(&[b"GET", b"big"]);
    assert_eq!(
        conn.request(&get, Some(Duration::from_secs(5))).unwrap(),
        Reply::String(value.into_bytes())
    );
    proxy.trickle.store(true, Ordering::Relaxed);
    let timeout = Duration::from_millis(300);
    let started = Instant::now();
    let result = conn.request(&get, Some(timeout));
    let waited = started.elapsed();
    assert!(matches!(result, Err(Failure::Timeout)), "{result:?}");
    assert!(waited < timeout + SLACK, "{waited:?}");

    let mux = Multiplexed::default();
    let started = Instant::now();
    let once = Arc::new(Opener(move || {
        piped.lock().take().ok_or(ConnectError {
            server: "test".into(),
            detail: "connected once only".into(),
            failure: OpenFailure::Unreachable,
        })
    }));
    let result = mux
        .request(&get, Some(timeout), None, &once, &stats)
        .map(|(reply, _)| reply);
    let waited = started.elapsed();
    assert!(
        matches!(result, Err(RequestError::Failed(Failure::Timeout))),
        "{result:?}"
    );
    assert!(waited < timeout + SLACK, "{waited:?}");
}

/// A server that answers the ClientHello with a record header claiming
/// 16 KiB, then sends one byte every 300 ms, held a connect for more than
/// 30 s against a connection_timeout of 500 ms.
#[test]
fn a_tls_handshake_trickled_ends_at_the_connection_timeout() {
    let files = material("trickle-handshake");
    let listener = TcpListener::bind("127.0.0.1:0").expect("port");
    let addr = listener.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        let Ok((mut client, _)) = listener.accept() else {
            return;
        };
        let mut hello = [0u8; 1024];
        client
            .set_read_timeout(Some(Duration::from_secs(2)))
            .unwrap();
        let _ = client.read(&mut hello);
        // A handshake record of 16 KiB, never finished.
        if client.write_all(&[0x16, 0x03, 0x03, 0x40, 0x00]).is_err() {
            return;
        }
        let until = Instant::now() + Duration::from_secs(10);
        while Instant::now() < until && client.write_all(&[0x02]).is_ok() {
            std::thread::sleep(Duration::from_millis(300));
        }
    });
    let timeout = Duration::from_millis(500);
    let connector = tls_connector(&files, &addr, timeout);
    let started = Instant::now();
    let result = connector.connect(&Stats::default());
    let waited = started.elapsed();
    let err = result.err().expect("no TLS session from a trickle");
    assert!(err.to_string().contains("TLS handshake: timeout"), "{err}");
    assert!(waited < timeout + SLACK, "{waited:?}");
}

/// X.509 v1 certificates (Redis's utils/gen-test-certs.sh) both ways: the
/// server's chain verified by OpenSSL, its handshake signature by its
/// public key, in TLS 1.2 and 1.3; the client's certificate taken by the
/// server. Its name is its CN only: taken as hiredis takes it, by IP or
/// another name, said once per server; refused with `tls_verify_name`.
#[test]
fn v1_certificates_work_both_ways_in_tls_1_2_and_1_3() {
    for protocol in ["TLSv1.2", "TLSv1.3"] {
        let (_redis, port, files) =
            v1_tls_redis(&format!("v1-{protocol}"), &["--tls-protocols", protocol]);
        let addr = format!("127.0.0.1:{port}");
        let tls = |sni: &str, verify_name: bool| {
            Tls::load(&TlsArgs {
                enabled: true,
                cafile: text(&files.v1_ca),
                certfile: text(&files.v1_client_cert),
                keyfile: text(&files.v1_client_key),
                sni,
                verify_name,
                ..TlsArgs::default()
            })
            .expect("v1 TLS material")
        };
        let connector = |tls: &Tls| {
            let location = addr.parse().expect("location");
            let timeout = Some(Duration::from_secs(5));
            Connector::new(
                &location,
                None,
                None,
                Protocol::Default,
                timeout,
                Some(tls.clone()),
            )
        };
        let stats = Stats::default();
        let ping = |conn: &mut Connection| {
            let pong = conn.request(&packed(&[b"PING"]), Some(Duration::from_secs(5)));
            assert!(
                matches!(&pong, Ok(Reply::Status(s)) if s == "PONG"),
                "{protocol}: {pong:?}"
            );
        };
        for verify_name in [false, true] {
            let named = tls(V1_SERVER_CN, verify_name);
            let said = Arc::new(parking_lot::Mutex::new(Vec::new()));
            let into = said.clone();
            named.report_name_mismatches_to(crate::logger::Log::to(move |_, text| {
                into.lock().push(text.to_owned())
            }));
            let mut conn = connector(&named)
                .connect(&stats)
                .unwrap_or_else(|e| panic!("{protocol}: {e}"));
            ping(&mut conn);
            assert!(said.lock().is_empty(), "{protocol}: {:?}", said.lock());
        }
        // The host (an IP address: never checked against a CN), then a
        // name that is not the CN.
        for sni in ["", "localhost"] {
            let name = if sni.is_empty() { "127.0.0.1" } else { sni };
            let taken = tls(sni, false);
            let said = Arc::new(parking_lot::Mutex::new(Vec::new()));
            let into = said.clone();
            taken.report_name_mismatches_to(crate::logger::Log::to(move |_, text| {
                into.lock().push(text.to_owned())
            }));
            // Three connections (full handshakes or resumed): said once.
            for _ in 0..3 {
                let mut conn = connector(&taken)
                    .connect(&stats)
                    .unwrap_or_else(|e| panic!("{protocol} {sni:?}: {e}"));
                ping(&mut conn);
            }
            assert_eq!(
                *said.lock(),
                vec![format!(
                    "TLS: the certificate of {addr} is not valid for name \"{name}\" \
                     (it names CN={V1_SERVER_CN}); connected as hiredis does, its chain verified; \
                     tls_verify_name=true refuses such a server"
                )],
                "{protocol}"
            );
            let err = connector(&tls(sni, true))
                .connect(&stats)
                .err()
                .expect("refused");
            assert!(
                err.to_string()
                    .contains(&format!("certificate not valid for name \"{name}\"")),
                "{protocol}: {err}"
            );
        }
    }
}

/// A UNIX-socket connect blocks while the server's accept queue is full
/// (a server that does not accept: here, one in `DEBUG SLEEP`).
#[test]
fn a_unix_connect_to_a_full_accept_queue_ends_at_the_connection_timeout() {
    let redis = RedisProcess::start(&["--tcp-backlog", "1"]);
    let location: Location = redis.location().parse().unwrap();
    let queued = AtomicUsize::new(0);
    std::thread::scope(|scope| {
        scope.spawn(|| redis.cli(&["DEBUG", "SLEEP", "3"]));
        std::thread::sleep(Duration::from_millis(300));
        // Fill the queue: the connects past its size wait for the server.
        scope.spawn(|| {
            let mut held = Vec::new();
            for _ in 0..3 {
                if let Ok(stream) = UnixStream::connect(redis.location()) {
                    held.push(stream);
                    queued.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
        let until = Instant::now() + Duration::from_secs(2);
        while queued.load(Ordering::Relaxed) < 2 {
            assert!(Instant::now() < until, "the queue did not fill");
            std::thread::sleep(Duration::from_millis(10));
        }
        std::thread::sleep(Duration::from_millis(100));
        let timeout = Duration::from_millis(300);
        let connector = Connector::new(
            &location,
            None,
            None,
            Protocol::Default,
            Some(timeout),
            None,
        );
        let started = Instant::now();
        let result = connector.connect(&Stats::default());
        let waited = started.elapsed();
        let err = result.err().expect("the server is asleep");
        assert!(err.to_string().contains("timeout"), "{err}");
        assert!(waited < timeout + SLACK, "{waited:?}");
        // A longer timeout outlasts the sleep: the connect retried until
        // the queue had room, and the socket is blocking again.
        let patient = Connector::new(
            &location,
            None,
            None,
            Protocol::Default,
            Some(Duration::from_secs(8)),
            None,
        );
        let mut conn = patient
            .connect(&Stats::default())
            .expect("the server woke up");
        let ping = conn.request(&packed(&[b"PING"]), Some(Duration::from_secs(5)));
        assert_eq!(ping.unwrap(), Reply::Status("PONG".into()));
    });
}

/// A lookup that takes `sleep`, counting its runs in `runs`.
fn slow_lookup(
    runs: &'static AtomicUsize,
    sleep: Duration,
) -> impl FnOnce(&str) -> io::Result<Vec<SocketAddr>> + Send + 'static {
    move |_| {
        runs.fetch_add(1, Ordering::SeqCst);
        std::thread::sleep(sleep);
        Ok(vec!["127.0.0.9:0".parse().unwrap()])
    }
}

/// A name lookup (`getaddrinfo` takes no timeout) is waited for until the
/// bound, and no longer.
#[test]
fn a_blocking_lookup_is_waited_for_until_the_bound() {
    static RUNS: AtomicUsize = AtomicUsize::new(0);
    let timeout = Duration::from_millis(100);
    let started = Instant::now();
    let result = lookup::lookup_with(
        "bound.test",
        Limit::within(Some(timeout)),
        slow_lookup(&RUNS, Duration::from_secs(3)),
    );
    let waited = started.elapsed();
    assert_eq!(result.map_err(|e| e.kind()), Err(io::ErrorKind::TimedOut));
    assert!(waited < timeout + SLACK, "{waited:?}");
    let quick = lookup::lookup_with(
        "quick.test",
        Limit::within(Some(Duration::from_secs(5))),
        |_| Err(io::Error::new(io::ErrorKind::NotFound, "no such name")),
    );
    assert_eq!(quick.unwrap_err().to_string(), "no such name");
    // An IP address is no lookup; a name is (this one resolves locally).
    let addrs = resolve("127.0.0.1", 6379, Limit::within(Some(timeout))).unwrap();
    assert_eq!(addrs, vec!["127.0.0.1:6379".parse().unwrap()]);
    let addrs = resolve(
        "localhost",
        6379,
        Limit::within(Some(Duration::from_secs(5))),
    )
    .unwrap();
    assert!(!addrs.is_empty());
    assert!(addrs.iter().all(|addr| addr.port() == 6379), "{addrs:?}");
}

/// Workers looking up one name at once start one lookup (one thread):
/// those that come while it runs wait for it, each within its own
/// deadline, and a dead DNS server costs one thread, not one per attempt.
#[test]
fn concurrent_lookups_of_one_name_start_one_thread() {
    static RUNS: AtomicUsize = AtomicUsize::new(0);
    let lookup_time = Duration::from_millis(600);
    let (ok, timed_out) = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..8)
            .map(|i| {
                scope.spawn(move || {
                    // Half give up before the lookup ends, half outlast it.
                    let timeout = Duration::from_millis(if i % 2 == 0 { 200 } else { 3000 });
                    let started = Instant::now();
                    let result = lookup::lookup_with(
                        "one.test",
                        Limit::within(Some(timeout)),
                        slow_lookup(&RUNS, lookup_time),
                    );
                    assert!(started.elapsed() < timeout + SLACK);
                    result.map_err(|e| e.kind())
                })
            })
            .collect();
        let results: Vec<_> = workers.into_iter().map(|w| w.join().unwrap()).collect();
        let ok = results.iter().filter(|r| r.is_ok()).count();
        let timed_out = results
            .iter()
            .filter(|r| **r == Err(io::ErrorKind::TimedOut))
            .count();
        (ok, timed_out)
    });
    assert_eq!(RUNS.load(Ordering::SeqCst), 1, "lookups started");
    assert_eq!((ok, timed_out), (4, 4));
    // Once it has ended, the next lookup of the name starts afresh (no cache).
    let again = lookup::lookup_with(
        "one.test",
        Limit::within(Some(Duration::from_secs(3))),
        slow_lookup(&RUNS, Duration::ZERO),
    );
    assert_eq!(again.unwrap(), vec!["127.0.0.9:0".parse().unwrap()]);
    assert_eq!(RUNS.load(Ordering::SeqCst), 2);
}

/// Every TCP connection (to a server or a Sentinel: both are opened by a
/// `Connector`) has keepalive on, with hiredis's timings, as the C VMOD's.
#[test]
fn tcp_connections_have_keepalive_as_hiredis_sets_it() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let location = listener.local_addr().unwrap().to_string().parse().unwrap();
    let connector = Connector::new(&location, None, None, Protocol::Default, None, None);
    let conn = connector.connect(&Stats::default()).expect("connect");
    let Stream::Tcp(tcp) = &conn.stream else {
        panic!("a TCP stream");
    };
    let socket = socket2::SockRef::from(tcp);
    assert!(socket.keepalive().unwrap());
    assert_eq!(
        socket.tcp_keepalive_time().unwrap(),
        Duration::from_secs(15)
    );
    assert_eq!(
        socket.tcp_keepalive_interval().unwrap(),
        Duration::from_secs(5)
    );
    assert_eq!(socket.tcp_keepalive_retries().unwrap(), 3);
}

/// A limit with a stop flag: its waits are sliced and resumed, so an
/// exchange longer than a slice (a connect, `DEBUG SLEEP 0.5`) ends as
/// without one, over TCP and TLS.
#[test]
fn sliced_waits_resume_until_the_reply() {
    let unset = AtomicBool::new(false);
    let limit = || Limit::within(Some(Duration::from_secs(5))).or_stop(&unset);
    let sleep = packed(&[b"DEBUG", b"SLEEP", b"0.5"]);
    let redis = RedisProcess::start(&[]);
    let location: Location = redis.location().parse().unwrap();
    let plain = Connector::new(&location, None, None, Protocol::Resp3, None, None);
    let (_tls_redis, tls_port, files) = tls_redis("sliced");
    let tls = tls_connector(
        &files,
        &format!("127.0.0.1:{tls_port}"),
        Duration::from_secs(5),
    );
    for connector in [plain, tls] {
        let mut conn = connector
            .connect_by(&Stats::default(), limit())
            .expect("connect");
        let started = Instant::now();
        let reply = conn.request_by(&sleep, limit()).expect("reply");
        assert_eq!(reply, Reply::Status("OK".into()));
        assert!(started.elapsed() >= Duration::from_millis(500));
    }
}

/// A TLS handshake trickled a byte at a time, a TCP connect to a full
/// accept queue: each ends within a slice of the stop flag being set,
/// long before its limit.
#[test]
fn a_stop_flag_ends_a_connect_or_a_handshake_within_a_slice() {
    // The handshake trickler: a record header, then a byte every 300 ms.
    let files = material("stopped-handshake");
    let listener = TcpListener::bind("127.0.0.1:0").expect("port");
    let trickler = listener.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        let Ok((mut client, _)) = listener.accept() else {
            return;
        };
        let mut hello = [0u8; 1024];
        let _ = client.read(&mut hello);
        let _ = client.write_all(&[0x16, 0x03, 0x03, 0x40, 0x00]);
        let until = Instant::now() + Duration::from_secs(10);
        while Instant::now() < until && client.write_all(&[0x02]).is_ok() {
            std::thread::sleep(Duration::from_millis(300));
        }
    });
    // A listener that never accepts, its queue (backlog 0) filled: a new
    // connect's SYN is dropped, and the connect waits.
    let full = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    full.bind(&"127.0.0.1:0".parse::<SocketAddr>().unwrap().into())
        .unwrap();
    full.listen(0).unwrap();
    let full_addr = full.local_addr().unwrap().as_socket().unwrap();
    let mut queued = Vec::new();
    while let Ok(conn) =
        std::net::TcpStream::connect_timeout(&full_addr, Duration::from_millis(300))
    {
        queued.push(conn);
        assert!(queued.len() < 64, "the accept queue never filled");
    }
    let long = Duration::from_secs(10);
    let tcp_location: Location = full_addr.to_string().parse().unwrap();
    let connectors = [
        tls_connector(&files, &trickler, long),
        Connector::new(&tcp_location, None, None, Protocol::Default, None, None),
    ];
    for connector in connectors {
        let stop = AtomicBool::new(false);
        let started = Instant::now();
        let result = std::thread::scope(|scope| {
            scope.spawn(|| {
                std::thread::sleep(Duration::from_millis(300));
                stop.store(true, Ordering::Relaxed);
            });
            connector.connect_by(&Stats::default(), Limit::within(Some(long)).or_stop(&stop))
        });
        let waited = started.elapsed();
        assert!(result.is_err(), "{connector:?}: connected");
        assert!(
            waited < Duration::from_millis(300) + STOP_SLICE + SLACK,
            "{connector:?}: {waited:?}"
        );
    }
}

// ---- the stages of an opening ------------------------------------------

/// A listener that never accepts: the kernel completes the TCP handshake
/// (the accept queue), then nothing answers, as with a frozen server.
fn silent_listener() -> (TcpListener, String) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("port");
    let addr = listener.local_addr().unwrap().to_string();
    (listener, addr)
}

/// The handshake on a connected socket (HELLO, TLS) waits for a silent
/// server as long as its own bound (the command timeout), not the
/// connect's (connection_timeout), as in hiredis; and the failure says
/// the server was reached and silent.
#[test]
fn a_silent_handshake_ends_at_its_own_bound_and_says_so() {
    let (_listener, addr) = silent_listener();
    let location: Location = addr.parse().unwrap();
    let hello = Connector::new(&location, None, None, Protocol::Resp3, None, None);
    let files = material("silent-handshake");
    let tls = tls_connector(&files, &addr, Duration::from_millis(50));
    let (connect, handshake) = (Duration::from_millis(50), Duration::from_millis(600));
    for (what, connector) in [("HELLO", &hello), ("TLS", &tls)] {
        let started = Instant::now();
        let result =
            connector.connect_staged(&Stats::default(), Some(connect), Some(handshake), None);
        let waited = started.elapsed();
        let err = result.err().expect("no connection from a silent server");
        assert_eq!(err.failure, OpenFailure::Silent, "{what}: {err}");
        assert!(err.to_string().contains("timeout"), "{what}: {err}");
        assert!(waited >= handshake, "{what}: {waited:?}");
        assert!(waited < handshake + SLACK, "{what}: {waited:?}");
    }
    // A deadline ends it sooner.
    let started = Instant::now();
    let by = Some(Instant::now() + Duration::from_millis(200));
    let err = (hello.connect_staged(&Stats::default(), Some(connect), Some(handshake), by))
        .err()
        .expect("no connection from a silent server");
    assert_eq!(err.failure, OpenFailure::Silent);
    assert!(started.elapsed() < Duration::from_millis(200) + SLACK);
}

/// What tells a dead server (nothing listens, it closes, it refuses the
/// password) from a silent one.
#[test]
fn a_failed_opening_says_how_far_it_got() {
    let bound = Some(Duration::from_secs(2));
    let open = |addr: &str, password: Option<&str>| {
        let location: Location = addr.parse().unwrap();
        let connector = Connector::new(&location, None, password, Protocol::Resp3, None, None);
        let result = connector.connect_staged(&Stats::default(), bound, bound, None);
        result.err().expect("no connection").failure
    };
    let closed = {
        let (listener, addr) = silent_listener();
        drop(listener);
        addr
    };
    assert_eq!(open(&closed, None), OpenFailure::Unreachable);
    let hangs_up = TcpListener::bind("127.0.0.1:0").unwrap();
    let hangs_up_addr = hangs_up.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        for client in hangs_up.incoming().take(1) {
            drop(client);
        }
    });
    assert_eq!(open(&hangs_up_addr, None), OpenFailure::Refused);
    let redis = RedisProcess::start(&["--requirepass", "right"]);
    assert_eq!(open(&redis.location(), Some("wrong")), OpenFailure::Refused);
    let (_listener, silent) = silent_listener();
    let started = Instant::now();
    let location: Location = silent.parse().unwrap();
    let connector = Connector::new(&location, None, None, Protocol::Resp3, None, None);
    let short = Some(Duration::from_millis(100));
    let err = connector
        .connect_staged(&Stats::default(), bound, short, None)
        .err()
        .expect("no connection");
    assert_eq!(err.failure, OpenFailure::Silent);
    assert!(started.elapsed() < SLACK);
}
