//! Unit tests of the database object against real redis-server processes.
use super::*;
use crate::config::{DbArgs, Secret};
use crate::error::Error;
use crate::protocol::Reply;
use crate::protocol::{Command, MAX_COMMAND_BYTES};
use crate::session;
use crate::testing::RedisProcess;

/// Longer than a connection must be idle to be checked before use.
const IDLE_CHECK_WAIT: Duration = Duration::from_millis(600);

fn database(redis: &RedisProcess, edit: impl FnOnce(&mut DbArgs)) -> Database {
    let location = redis.location();
    let mut args = DbArgs {
        location: &location,
        role: "master",
        ..DbArgs::default()
    };
    edit(&mut args);
    Database::new("db", DbConfig::from_args(&args).expect("valid config")).expect("database")
}

/// A server that accepts connections and never answers (frozen: a long
/// script, `DEBUG SLEEP`, a stalled proxy).
pub(super) fn silent_server() -> String {
    use std::io::Read;
    use std::net::TcpListener;

    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let location = silent.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for mut conn in silent.incoming().flatten() {
            let mut buf = [0u8; 256];
            let _ = conn.set_read_timeout(Some(Duration::from_millis(10)));
            let _ = conn.read(&mut buf);
            held.push(conn);
        }
    });
    location
}

fn run(db: &Database, args: &[&str]) -> Result<Reply> {
    run_in(db, &mut TaskConnection::default(), args)
}

/// `args` as a command of the task that holds `task`.
fn run_in(db: &Database, task: &mut TaskConnection, args: &[&str]) -> Result<Reply> {
    let mut command = Command::new(args[0].as_bytes());
    for arg in &args[1..] {
        command.push(arg.as_bytes());
    }
    db.execute(&mut command, true, task, &mut |_| {})
}

#[test]
fn private_connection_is_reused_by_the_thread() {
    let redis = RedisProcess::start(&[]);
    let db = database(&redis, |args| args.shared_connections = false);
    assert_eq!(
        run(&db, &["SET", "k", "v"]).unwrap(),
        Reply::Status("OK".into())
    );
    assert_eq!(
        run(&db, &["GET", "k"]).unwrap(),
        Reply::String(b"v".to_vec())
    );
    assert_eq!(db.stats().get(Counter::ConnectionsTotal), 1);
    assert_eq!(db.stats().get(Counter::CommandsTotal), 2);
    // Another thread opens its own connection.
    std::thread::scope(|scope| {
        scope.spawn(|| run(&db, &["PING"]).unwrap());
    });
    assert_eq!(db.stats().get(Counter::ConnectionsTotal), 2);
    assert_eq!(db.close_idle(), 2);
}

/// A thread may keep two idle connections to one server (a task's kept
/// one given back after another task's): a command drops every one that
/// is no longer usable, not only the first it looks at.
#[test]
fn every_stale_private_connection_of_a_thread_is_dropped_before_use() {
    let redis = RedisProcess::start(&[]);
    let db = database(&redis, |args| args.shared_connections = false);
    let mut transaction = TaskConnection::default();
    run_in(&db, &mut transaction, &["MULTI"]).unwrap();
    run(&db, &["PING"]).unwrap();
    run_in(&db, &mut transaction, &["EXEC"]).unwrap();
    assert_eq!(db.stats().get(Counter::ConnectionsTotal), 2);
    // Both connections now predate a failure of the server.
    std::thread::sleep(Duration::from_millis(2));
    db.topology().servers[0].health.mark_failed();
    run(&db, &["PING"]).unwrap();
    assert_eq!(db.stats().get(Counter::DroppedSick), 2);
    assert_eq!(db.stats().get(Counter::ConnectionsTotal), 3);
    assert_eq!(db.close_idle(), 1, "only the new connection is kept");
}

#[test]
fn too_large_a_command_fails_without_touching_the_connection() {
    let redis = RedisProcess::start(&[]);
    let db = database(&redis, |_| {});
    let mut command = Command::new(b"SET");
    command.push(b"big");
    command.push(&vec![b'x'; MAX_COMMAND_BYTES]);
    let err = db
        .execute(
            &mut command,
            true,
            &mut TaskConnection::default(),
            &mut |_| {},
        )
        .unwrap_err();
    assert!(
        err.to_string().starts_with("command of 16777")
            && err
                .to_string()
                .ends_with("larger than the 16777216 bytes limit"),
        "{err}"
    );
    assert_eq!(db.stats().get(Counter::CommandsFailed), 1);
    assert_eq!(
        db.stats().get(Counter::ConnectionsTotal),
        0,
        "nothing was sent"
    );
    assert_eq!(redis.cli(&["EXISTS", "big"]), "0");
    assert_eq!(run(&db, &["PING"]).unwrap(), Reply::Status("PONG".into()));
}

#[test]
fn error_reply_is_a_reply_and_counted() {
    let redis = RedisProcess::start(&[]);
    let db = database(&redis, |_| {});
    let reply = run(&db, &["NOSUCHCOMMAND"]).unwrap();
    assert!(matches!(&reply, Reply::Error(text) if text.starts_with("ERR unknown command")));
    assert_eq!(db.stats().get(Counter::CommandsError), 1);
    assert_eq!(db.stats().get(Counter::CommandsFailed), 0);
}

#[test]
fn eval_goes_out_as_evalsha_and_falls_back_once() {
    let redis = RedisProcess::start(&[]);
    let db = database(&redis, |_| {});
    let script = "return ARGV[1]";
    for _ in 0..3 {
        let reply = run(&db, &["EVAL", script, "0", "hello"]).unwrap();
        assert_eq!(reply, Reply::String(b"hello".to_vec()));
    }
    assert_eq!(db.stats().get(Counter::CommandsNoscript), 1);
    redis.cli(&["SCRIPT", "FLUSH"]);
    run(&db, &["EVAL", script, "0", "again"]).unwrap();
    assert_eq!(db.stats().get(Counter::CommandsNoscript), 2);
}

#[test]
fn retry_reconnects_after_the_server_closed_the_connection() {
    let redis = RedisProcess::start(&[]);
    for shared in [false, true] {
        let db = database(&redis, |args| {
            args.shared_connections = shared;
            args.max_command_retries = 1;
        });
        run(&db, &["PING"]).unwrap();
        redis.cli(&["CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"]);
        assert_eq!(run(&db, &["PING"]).unwrap(), Reply::Status("PONG".into()));
        let stats = db.stats();
        assert_eq!(stats.get(Counter::CommandsRetried), 1, "shared={shared}");
        assert_eq!(stats.get(Counter::CommandsFailed), 1, "shared={shared}");
        assert_eq!(stats.get(Counter::CommandsTotal), 2, "shared={shared}");
        assert_eq!(stats.get(Counter::ConnectionsTotal), 2, "shared={shared}");
    }
}

#[test]
fn without_retries_a_dead_connection_fails_once_then_recovers() {
    let redis = RedisProcess::start(&[]);
    for shared in [false, true] {
        let db = database(&redis, |args| args.shared_connections = shared);
        run(&db, &["PING"]).unwrap();
        redis.cli(&["CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"]);
        assert!(run(&db, &["PING"]).is_err(), "shared={shared}");
        assert_eq!(db.stats().get(Counter::CommandsFailed), 1);
        assert_eq!(run(&db, &["PING"]).unwrap(), Reply::Status("PONG".into()));
        assert_eq!(db.stats().get(Counter::ConnectionsTotal), 2);
        if shared {
            // The broken connection left its slot; the next worker
            // filled it: one connection open, idle.
            assert_eq!(db.pool_state(0), (1, 1));
        }
    }
}

#[test]
fn a_shared_pool_opens_only_the_connections_workers_need_at_once() {
    let redis = RedisProcess::start(&[]);
    let db = database(&redis, |args| {
        args.shared_connections = true;
        args.max_connections = 100;
    });
    for _ in 0..20 {
        run(&db, &["PING"]).unwrap();
    }
    assert_eq!(db.stats().get(Counter::ConnectionsTotal), 1);
    assert_eq!(db.pool_state(0), (1, 1));
    // Two commands in flight at once (the first one's sleep holds the
    // server): a second connection, then both reused.
    let ready = std::sync::Barrier::new(2);
    std::thread::scope(|scope| {
        for _ in 0..2 {
            scope.spawn(|| {
                ready.wait();
                run(&db, &["DEBUG", "SLEEP", "0.2"]).unwrap();
            });
        }
    });
    assert_eq!(db.stats().get(Counter::ConnectionsTotal), 2);
    for _ in 0..20 {
        run(&db, &["PING"]).unwrap();
    }
    assert_eq!(db.stats().get(Counter::ConnectionsTotal), 2);
    assert_eq!(db.pool_state(0), (2, 2));
    // Redis agrees (its list has redis-cli's own connection too).
    assert_eq!(redis.cli(&["CLIENT", "LIST"]).lines().count(), 3);
}

#[test]
fn a_failure_makes_older_connections_of_other_threads_stale() {
    let redis = RedisProcess::start(&[]);
    let db = database(&redis, |args| args.shared_connections = false);
    let (ready, go) = (std::sync::Barrier::new(2), std::sync::Barrier::new(2));
    std::thread::scope(|scope| {
        // A second worker holds an idle connection across the restart.
        scope.spawn(|| {
            run(&db, &["PING"]).unwrap();
            ready.wait();
            go.wait();
            // Its connection predates the failure: dropped as sick and
            // replaced, instead of failing the command.
            assert_eq!(run(&db, &["PING"]).unwrap(), Reply::Status("PONG".into()));
        });
        run(&db, &["PING"]).unwrap();
        ready.wait();
        redis.cli(&["CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"]);
        assert!(run(&db, &["PING"]).is_err());
        assert!(db.topology().servers[0].health.is_sick(Instant::now()));
        go.wait();
    });
    assert_eq!(db.stats().get(Counter::DroppedHungUp), 1);
    assert_eq!(db.stats().get(Counter::DroppedSick), 1);
    assert_eq!(db.stats().get(Counter::CommandsFailed), 1);
}

#[test]
fn command_timeout_fails_the_command_and_drops_the_connection() {
    let redis = RedisProcess::start(&[]);
    let db = database(&redis, |args| {
        args.shared_connections = false;
        args.command_timeout = 100;
    });
    let started = Instant::now();
    let err = run(&db, &["DEBUG", "SLEEP", "0.5"]).unwrap_err();
    assert!(matches!(err, Error::Timeout { .. }), "{err}");
    assert!(started.elapsed() < Duration::from_millis(450));
    assert_eq!(db.stats().get(Counter::DroppedError), 1);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(run(&db, &["PING"]).unwrap(), Reply::Status("PONG".into()));
}

#[test]
fn a_server_that_times_out_is_avoided_while_another_can_serve() {
    let (first, second) = (RedisProcess::start(&[]), RedisProcess::start(&[]));
    let db = database(&first, |args| {
        args.command_timeout = 100;
        args.max_command_retries = 0;
    });
    db.add_server(
        &second.location().parse().unwrap(),
        Role::Master,
        &mut |_| {},
    )
    .unwrap();
    let socket_of = |db: &Database| match run(db, &["CONFIG", "GET", "unixsocket"]).unwrap() {
        Reply::Array(items) => items[1].clone(),
        other => panic!("{other:?}"),
    };
    // This thread's rotation picks the same server while both are healthy.
    let usual = socket_of(&db);
    assert_eq!(socket_of(&db), usual);
    let err = run(&db, &["DEBUG", "SLEEP", "0.3"]).unwrap_err();
    assert!(matches!(err, Error::Timeout { .. }), "{err}");
    assert_ne!(
        socket_of(&db),
        usual,
        "the server that timed out is avoided"
    );
}

#[test]
fn connection_ttl_replaces_old_connections() {
    let redis = RedisProcess::start(&[]);
    for shared in [false, true] {
        let db = database(&redis, |args| {
            args.shared_connections = shared;
            args.connection_ttl = 1;
        });
        run(&db, &["PING"]).unwrap();
        std::thread::sleep(Duration::from_millis(1100));
        run(&db, &["PING"]).unwrap();
        assert_eq!(db.stats().get(Counter::DroppedTtl), 1, "shared={shared}");
        assert_eq!(
            db.stats().get(Counter::ConnectionsTotal),
            2,
            "shared={shared}"
        );
    }
}

#[test]
fn shared_pool_is_bounded_and_counts_blocked_workers() {
    let redis = RedisProcess::start(&[]);
    let db = database(&redis, |args| {
        args.shared_connections = true;
        args.max_connections = 1;
        args.connection_timeout = 2000;
    });
    std::thread::scope(|scope| {
        for _ in 0..4 {
            scope.spawn(|| {
                let reply = run(&db, &["DEBUG", "SLEEP", "0.05"]).unwrap();
                assert_eq!(reply, Reply::Status("OK".into()));
            });
        }
    });
    assert_eq!(db.stats().get(Counter::ConnectionsTotal), 1);
    assert!(db.stats().get(Counter::WorkersBlocked) >= 1);
    assert_eq!(db.pool_state(0), (1, 1));
    assert_eq!(db.close_idle(), 1);
    assert_eq!(db.pool_state(0), (0, 0));
}

#[test]
fn a_huge_max_connections_makes_a_bounded_pool() {
    let redis = RedisProcess::start(&[]);
    let db = database(&redis, |args| {
        args.shared_connections = true;
        args.max_connections = i64::from(u32::MAX);
        // Making the slots must not be bounded by this (it would take far
        // longer than the connect, and the COMMAND table read with it).
        args.connection_timeout = 200;
    });
    assert_eq!(run(&db, &["PING"]).unwrap(), Reply::Status("PONG".into()));
    assert_eq!(db.pool_state(0), (1, 1));
}

#[test]
fn a_burst_on_a_fresh_pool_opens_no_more_connections_than_workers() {
    let redis = RedisProcess::start(&[]);
    let db = database(&redis, |args| {
        args.shared_connections = true;
        args.max_connections = 100;
        args.connection_timeout = 5000;
        // HELLO on connect: opening waits while Redis sleeps.
        args.protocol = "RESP3";
    });
    let sleeper = std::thread::spawn({
        let cli = redis.location();
        move || {
            std::process::Command::new("redis-cli")
                .args(["-s", &cli, "DEBUG", "SLEEP", "0.3"])
                .output()
                .expect("redis-cli")
        }
    });
    std::thread::sleep(Duration::from_millis(50));
    std::thread::scope(|scope| {
        for _ in 0..8 {
            scope.spawn(|| run(&db, &["PING"]).unwrap());
        }
    });
    sleeper.join().unwrap();
    let opened = db.stats().get(Counter::ConnectionsTotal);
    assert!(
        (1..=8).contains(&opened),
        "{opened} connections for 8 workers"
    );
}

/// Captured from the C VMOD (libvmod-redis 15.1, Varnish 7.1.1) with a
/// database of five servers (`add_server()` of two masters, a replica,
/// a location added twice and two refused ports): no per-server data
/// and no `server` label, whatever the number of servers.
const C_JSON_FIVE_SERVERS: &str = r#"{"servers": {"total": 5,"failed": 0},"connections": {"total": 2,"failed": 0,"dropped": {"error": 0,"hung_up": 0,"overflow": 0,"ttl": 0,"version": 0,"sick": 0}},"workers": {"blocked": 0},"commands": {"total": 2,"failed": 0,"retried": 0,"error": 0,"noscript": 0},"cluster": {"discoveries": {"total": 0,"failed": 0},"replies": {"moved": 0,"ask": 0}}}"#;
const C_PROM_FIVE_SERVERS_HEAD: &str = "# TYPE vmod_redis_servers_total counter
vmod_redis_servers_total{name=\"db\"} 5
# TYPE vmod_redis_servers_failed counter
vmod_redis_servers_failed{name=\"db\"} 0
# TYPE vmod_redis_connections_total counter
vmod_redis_connections_total{name=\"db\"} 3
# TYPE vmod_redis_connections_failed counter
vmod_redis_connections_failed{name=\"db\"} 1
# TYPE vmod_redis_connections_dropped counter
vmod_redis_connections_dropped{name=\"db\",reason=\"error\"} 0
";

#[test]
fn stats_of_several_servers_are_the_c_vmods() {
    let args = DbArgs {
        location: "",
        role: "master",
        ..DbArgs::default()
    };
    let db = Database::new("db", DbConfig::from_args(&args).unwrap()).unwrap();
    // type=master: nothing is connected at load.
    for location in [
        "127.0.0.1:1",
        "127.0.0.2:1",
        "127.0.1.1:1",
        "/nowhere.sock",
        "127.0.0.3:2",
    ] {
        db.add_server(&location.parse().unwrap(), Role::Master, &mut |_| {})
            .unwrap();
    }
    // Added again: the same server.
    db.add_server(&"127.0.0.2:1".parse().unwrap(), Role::Slave, &mut |_| {})
        .unwrap();
    assert_eq!(db.topology().servers.len(), 5);
    assert_eq!(db.topology().servers[1].role(), Role::Slave);
    db.stats().add(Counter::ConnectionsTotal, 2);
    db.stats().add(Counter::CommandsTotal, 2);
    let mut json = String::new();
    db.write_stats(&mut json, &StatsFormat::Json, false);
    assert_eq!(json, C_JSON_FIVE_SERVERS);
    db.stats().inc(Counter::ConnectionsTotal);
    db.stats().inc(Counter::ConnectionsFailed);
    let mut prom = String::new();
    let options = PrometheusOptions::default();
    db.write_stats(&mut prom, &StatsFormat::Prometheus(&options), false);
    assert!(prom.starts_with(C_PROM_FIVE_SERVERS_HEAD), "{prom}");
    assert!(!prom.contains("server="), "{prom}");
    // [ext] only on request: one entry per server.
    let mut ext = String::new();
    db.write_stats(&mut ext, &StatsFormat::Json, true);
    assert_eq!(ext.matches("\"location\": ").count(), 5, "{ext}");
}

#[test]
fn a_pool_wait_ends_within_the_bound_of_the_whole_execute() {
    let redis = RedisProcess::start(&[]);
    let db = database(&redis, |args| {
        args.shared_connections = true;
        args.max_connections = 1;
        args.connection_timeout = 100;
        args.command_timeout = 100;
    });
    let holding = std::sync::Barrier::new(2);
    std::thread::scope(|scope| {
        scope.spawn(|| {
            // No timeout for this one: it holds the only connection.
            let mut sleep = Command::new(b"DEBUG");
            sleep.push(b"SLEEP");
            sleep.push(b"0.8");
            sleep.timeout = Some(Duration::ZERO);
            holding.wait();
            db.execute(
                &mut sleep,
                true,
                &mut TaskConnection::default(),
                &mut |_| {},
            )
            .unwrap();
        });
        holding.wait();
        // Let it take the connection first.
        std::thread::sleep(Duration::from_millis(150));
        // (connection_timeout + command_timeout) x (1 + 0 retries).
        let started = Instant::now();
        let err = run(&db, &["PING"]).unwrap_err();
        let waited = started.elapsed();
        assert!(matches!(err, Error::PoolTimeout(_)), "{err}");
        assert!(
            waited >= Duration::from_millis(190) && waited < Duration::from_millis(400),
            "{waited:?}"
        );
    });
    assert_eq!(db.stats().get(Counter::WorkersBlocked), 1);
}

#[test]
fn private_connections_are_one_budget_per_thread_across_databases() {
    // The example of the C VMOD's documentation (issue 9): two
    // databases on two servers, max_connections=1 each, one thread.
    let (one, two) = (RedisProcess::start(&[]), RedisProcess::start(&[]));
    let private = Arc::new(PrivateConnections::default());
    let no_log = crate::logger::Log::discard();
    let make = |redis: &RedisProcess| {
        let location = redis.location();
        let args = DbArgs {
            location: &location,
            role: "master",
            shared_connections: false,
            max_connections: 1,
            ..DbArgs::default()
        };
        let config = DbConfig::from_args(&args).unwrap();
        Database::with_stats(
            "db",
            config,
            Stats::default(),
            Preference::default(),
            &private,
            &mut |_| {},
            &no_log,
        )
        .unwrap()
    };
    let (db1, db2) = (make(&one), make(&two));
    run(&db1, &["SET", "k", "1"]).unwrap();
    run(&db1, &["GET", "k"]).unwrap();
    run(&db2, &["GET", "k"]).unwrap();
    run(&db2, &["SET", "k", "2"]).unwrap();
    run(&db2, &["GET", "k"]).unwrap();
    run(&db1, &["GET", "k"]).unwrap();
    let counts = |db: &Database| {
        (
            db.stats().get(Counter::ConnectionsTotal),
            db.stats().get(Counter::DroppedOverflow),
        )
    };
    assert_eq!(counts(&db1), (2, 1));
    assert_eq!(counts(&db2), (1, 1));
    // Another thread has a budget of its own.
    std::thread::scope(|scope| {
        scope.spawn(|| run(&db2, &["GET", "k"]).unwrap());
    });
    assert_eq!(counts(&db2), (2, 1));
    // Cold: each database closes its own idle connections only.
    assert_eq!(db1.close_idle(), 1);
    assert_eq!(db2.close_idle(), 1);
}

#[test]
fn auth_with_acl_user_and_wrong_password() {
    let redis = RedisProcess::start(&["--user", "alice", "on", ">secret", "~*", "+@all"]);
    let good = database(&redis, |args| {
        args.user = "alice";
        args.password = Secret("secret");
    });
    assert_eq!(run(&good, &["PING"]).unwrap(), Reply::Status("PONG".into()));
    let bad = database(&redis, |args| {
        args.user = "alice";
        args.password = Secret("wrong");
        args.shared_connections = false;
    });
    let err = run(&bad, &["PING"]).unwrap_err();
    assert!(matches!(err, Error::Connect(_)), "{err}");
    assert!(bad.stats().get(Counter::ConnectionsFailed) >= 1);
}

#[test]
fn an_idle_connection_the_server_closed_is_replaced_before_use() {
    let redis = RedisProcess::start(&[]);
    for shared in [false, true] {
        let db = database(&redis, |args| args.shared_connections = shared);
        run(&db, &["PING"]).unwrap();
        redis.cli(&["CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"]);
        std::thread::sleep(IDLE_CHECK_WAIT);
        assert_eq!(run(&db, &["PING"]).unwrap(), Reply::Status("PONG".into()));
        let stats = db.stats();
        assert_eq!(stats.get(Counter::CommandsFailed), 0, "shared={shared}");
        assert_eq!(stats.get(Counter::DroppedHungUp), 1, "shared={shared}");
        assert_eq!(stats.get(Counter::ConnectionsTotal), 2, "shared={shared}");
        // The server is not blamed for it.
        assert!(!db.topology().servers[0].health.is_sick(Instant::now()));
    }
}

#[test]
fn without_hello_the_password_goes_in_auth_and_never_in_errors() {
    let redis = RedisProcess::start(&[
        "--requirepass",
        "Sup3rS3cret",
        "--rename-command",
        "HELLO",
        "",
    ]);
    for protocol in ["RESP2", "RESP3"] {
        let good = database(&redis, |args| {
            args.password = Secret("Sup3rS3cret");
            args.protocol = protocol;
        });
        assert_eq!(run(&good, &["PING"]).unwrap(), Reply::Status("PONG".into()));
        // RESP2 replies whatever was asked: the server has no HELLO.
        assert_eq!(
            run(&good, &["HGETALL", "none"]).unwrap(),
            Reply::Array(vec![])
        );
        let bad = database(&redis, |args| {
            args.password = Secret("Wr0ngS3cret");
            args.protocol = protocol;
        });
        let err = run(&bad, &["PING"]).unwrap_err().to_string();
        assert!(err.contains("authentication failed (WRONGPASS"), "{err}");
        assert!(!err.contains("S3cret"), "{err}");
    }
}

#[test]
fn a_failed_connect_makes_the_next_commands_fail_fast_until_the_spacing_ends() {
    let redis = RedisProcess::start(&["--requirepass", "right"]);
    let db = database(&redis, |args| args.password = Secret("wrong"));
    assert!(matches!(run(&db, &["PING"]), Err(Error::Connect(_))));
    // 100 ms of commands: attempts at 0, 25 and 75 ms at most.
    let started = Instant::now();
    let mut spaced = 0;
    while started.elapsed() < Duration::from_millis(100) {
        if matches!(run(&db, &["PING"]), Err(Error::Backoff { .. })) {
            spaced += 1;
        }
    }
    assert!(spaced > 0);
    assert!((1..=3).contains(&db.stats().get(Counter::ConnectionsFailed)));
    redis.cli(&["-a", "right", "CONFIG", "SET", "requirepass", "wrong"]);
    std::thread::sleep(crate::server::MAX_BACKOFF);
    assert_eq!(run(&db, &["PING"]).unwrap(), Reply::Status("PONG".into()));
}

#[test]
fn resp3_replies_keep_their_types() {
    let redis = RedisProcess::start(&[]);
    let db = database(&redis, |args| args.protocol = "RESP3");
    run(&db, &["HSET", "h", "f", "v"]).unwrap();
    assert_eq!(
        run(&db, &["HGETALL", "h"]).unwrap(),
        Reply::Array(vec![
            Reply::String(b"f".to_vec()),
            Reply::String(b"v".to_vec())
        ])
    );
    let double = run(&db, &["EVAL", "redis.setresp(3); return {double=1.5}", "0"]).unwrap();
    assert_eq!(double, Reply::Double(1.5));
}

#[test]
fn down_server_fails_fast_in_both_modes() {
    let dir = std::env::temp_dir().join(format!("vmod-redis-unit-down-{}", std::process::id()));
    let location = dir.join("nobody.sock").display().to_string();
    for shared in [false, true] {
        let args = DbArgs {
            location: &location,
            role: "master",
            shared_connections: shared,
            ..DbArgs::default()
        };
        let db = Database::new("db", DbConfig::from_args(&args).unwrap()).unwrap();
        // The first failure marks the server sick; then no waiting.
        let _ = run(&db, &["PING"]);
        let started = Instant::now();
        assert!(run(&db, &["PING"]).is_err());
        assert!(
            started.elapsed() < Duration::from_millis(200),
            "shared={shared}"
        );
        assert!(db.stats().get(Counter::CommandsFailed) == 2);
    }
}

#[test]
fn pipelined_workers_share_one_connection_and_each_reads_its_own_key() {
    let redis = RedisProcess::start(&[]);
    let db = database(&redis, |args| {
        args.shared_connections = true;
        args.max_connections = 1;
        args.pipelining = true;
        args.command_timeout = 5000;
    });
    let threads = 12;
    std::thread::scope(|scope| {
        for t in 0..threads {
            let db = &db;
            scope.spawn(move || {
                for i in 0..200 {
                    let (key, value) = (format!("k{t}.{i}"), format!("v{t}.{i}"));
                    assert_eq!(
                        run(db, &["SET", &key, &value]).unwrap(),
                        Reply::Status("OK".into())
                    );
                    assert_eq!(
                        run(db, &["GET", &key]).unwrap(),
                        Reply::String(value.into_bytes())
                    );
                }
                // A transaction takes an ordinary pooled connection.
                let mut task = TaskConnection::default();
                assert_eq!(
                    run_in(db, &mut task, &["MULTI"]).unwrap(),
                    Reply::Status("OK".into())
                );
                assert_eq!(run_in(db, &mut task, &["INCR", "n"]).unwrap(), queued());
                assert!(matches!(
                    run_in(db, &mut task, &["EXEC"]).unwrap(),
                    Reply::Array(_)
                ));
            });
        }
    });
    assert_eq!(
        run(&db, &["GET", "n"]).unwrap(),
        Reply::String(b"12".to_vec())
    );
    let stats = db.stats();
    assert_eq!(stats.get(Counter::CommandsTotal), 12 * (400 + 3) + 1);
    assert_eq!(stats.get(Counter::CommandsFailed), 0);
    // Every command but the transactions' went through the multiplexed
    // connection, written once each.
    assert_eq!(stats.get(Counter::PipelineCommands), 12 * 400 + 1);
    let batches = stats.get(Counter::PipelineBatches);
    assert!((1..=12 * 400 + 1).contains(&batches), "{batches}");
    // Each batch is in the histogram once.
    let histogram: u64 = (Counter::PipelineBatchSize1 as usize..Counter::COUNT)
        .map(|i| stats.get(Counter::ALL[i]))
        .sum();
    assert_eq!(histogram, batches);
    // One multiplexed connection, and one ordinary one for the
    // transactions (max_connections=1: they waited for each other).
    assert_eq!(stats.get(Counter::ConnectionsTotal), 2);
    let clients = redis.cli(&["CLIENT", "LIST"]);
    assert_eq!(clients.lines().count(), 3, "{clients}");
}

fn queued() -> Reply {
    Reply::Status("QUEUED".into())
}

mod deadlines;
mod learning;
mod removed;
mod state;

/// A master swapped with its replica (as `FAILOVER` does) refuses the
/// next write with `READONLY`: not run, it goes to the new master within
/// the retry count, in private, shared and pipelined modes; without
/// retries the error is the reply, as in the C VMOD; a script's
/// `READONLY` is the reply (it may have come after writes).
#[test]
fn a_write_refused_by_a_demoted_master_goes_to_the_new_one() {
    {
        let (a_port, b_port) = (crate::testing::free_port(), crate::testing::free_port());
        let a = RedisProcess::start(&["--port", &a_port]);
        let b = RedisProcess::start(&["--port", &b_port, "--replicaof", "127.0.0.1", &a_port]);
        let db = database(&a, |_| {});
        db.add_server(&b.location().parse().unwrap(), Role::Auto, &mut |_| {})
            .unwrap();
        b.cli(&["REPLICAOF", "NO", "ONE"]);
        a.cli(&["REPLICAOF", "127.0.0.1", &b_port]);
        match run(&db, &["INCR", "n"]) {
            Ok(Reply::Error(text)) => assert!(text.starts_with("READONLY"), "{text}"),
            other => panic!("{other:?}"),
        }
        assert_eq!(db.stats().get(Counter::CommandsRetried), 0);
        assert_eq!(b.cli(&["GET", "n"]).trim(), "");
    }
    for (shared, pipelining) in [(false, false), (true, false), (true, true)] {
        let (a_port, b_port) = (crate::testing::free_port(), crate::testing::free_port());
        let a = RedisProcess::start(&["--port", &a_port]);
        let b = RedisProcess::start(&["--port", &b_port, "--replicaof", "127.0.0.1", &a_port]);
        // `a` declared a master: never asked ROLE, so the write reaches it.
        let db = database(&a, |args| {
            args.shared_connections = shared;
            args.pipelining = pipelining;
            args.max_command_retries = 2;
        });
        db.add_server(&b.location().parse().unwrap(), Role::Auto, &mut |_| {})
            .unwrap();
        assert_eq!(
            run(&db, &["SET", "k", "1"]).unwrap(),
            Reply::Status("OK".into())
        );
        // The swap.
        b.cli(&["REPLICAOF", "NO", "ONE"]);
        a.cli(&["REPLICAOF", "127.0.0.1", &b_port]);
        let reply = run(&db, &["INCR", "n"]).unwrap();
        assert_eq!(
            reply,
            Reply::Integer(1),
            "shared {shared} pipelining {pipelining}"
        );
        assert_eq!(b.cli(&["GET", "n"]).trim(), "1");
        // Once, or twice when the new plan tries the declared master first.
        let retried = db.stats().get(Counter::CommandsRetried);
        assert!((1..=2).contains(&retried), "{retried}");
        // A script is never sent again: a READONLY from the declared
        // master (now a replica) is its reply.
        for _ in 0..4 {
            match run(&db, &["EVAL", "return redis.call('INCR', 'n')", "0"]) {
                Ok(Reply::Error(text)) => assert!(text.starts_with("READONLY"), "{text}"),
                Ok(Reply::Integer(_)) => {}
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(db.stats().get(Counter::CommandsRetried), retried);
    }
}
