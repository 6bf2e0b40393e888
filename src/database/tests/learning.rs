//! Commands the built-in model does not know (a newer server's, a
//! module's): the server's own `COMMAND` table decides, read when the
//! first such command comes.
use super::*;
use crate::commands::Commands;

/// `redis` as a database whose model lacks `missing`.
fn database_without(
    redis: &RedisProcess,
    missing: &[&str],
    edit: impl FnOnce(&mut DbArgs),
) -> Database {
    let mut db = database(redis, edit);
    db.commands = Commands::fallback_without(missing);
    db
}

/// How often `redis` ran `command` (lower case), by its `INFO
/// commandstats`.
fn calls(redis: &RedisProcess, command: &str) -> u64 {
    let stats = redis.cli(&["INFO", "commandstats"]);
    let prefix = format!("cmdstat_{command}:calls=");
    stats
        .lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |calls| calls.parse().expect("a count"))
}

/// A command the model lacks makes the database read the server's table
/// first (`INFO server`, then `COMMAND` unless another database of this
/// process read this version already), once: the command is known then,
/// and a command the server does not know either asks nothing more.
#[test]
fn an_unknown_command_makes_the_server_tell_its_table_once() {
    let redis = RedisProcess::start(&[]);
    let db = database_without(&redis, &["GET"], |args| args.command_timeout = 500);
    let get = Command::new(b"GET");
    assert!(db.commands.find(&get).unknown());
    redis.cli(&["SET", "k", "v"]);
    assert_eq!(
        run(&db, &["GET", "k"]).unwrap(),
        Reply::String(b"v".to_vec())
    );
    let source = &db.commands.model().source;
    assert!(
        source.starts_with("redis ") || source.starts_with("valkey "),
        "{source}"
    );
    assert!(!db.commands.find(&get).unknown());
    assert!(db.commands.find(&get).shares(&get));
    assert_eq!(calls(&redis, "info"), 1, "INFO server, once");
    assert!(calls(&redis, "command") <= 1);
    for _ in 0..3 {
        assert!(matches!(run(&db, &["NOSUCHCOMMAND"]), Ok(Reply::Error(_))));
    }
    // The count includes the two INFO commandstats above.
    assert_eq!(calls(&redis, "info"), 3, "not asked again");
}

/// The commands the built-in model knows (every Redis 7.0 command) cost
/// no request: nothing goes to the server that the VCL did not send.
#[test]
fn known_commands_ask_the_server_nothing() {
    let redis = RedisProcess::start(&[]);
    let db = database(&redis, |args| args.command_timeout = 500);
    run(&db, &["SET", "k", "v"]).unwrap();
    run(&db, &["GET", "k"]).unwrap();
    run(&db, &["BLPOP", "list", "0.01"]).unwrap();
    run(&db, &["CLIENT", "ID"]).unwrap();
    assert_eq!(calls(&redis, "info"), 0);
    assert_eq!(calls(&redis, "command"), 0);
    assert!(db.commands.model().source.starts_with("built-in"));
}

/// A server that refuses `INFO` (an ACL user without it) leaves the model
/// as it is; the unknown command still runs, on an ordinary connection,
/// and the server is not asked again for every command.
#[test]
fn a_server_that_refuses_info_leaves_the_model_and_serves_the_command() {
    let redis = RedisProcess::start(&["--user", "u", "on", ">pw", "~*", "+@all", "-info"]);
    let db = database_without(&redis, &["GET"], |args| {
        args.user = "u";
        args.password = Secret("pw");
    });
    redis.cli(&["SET", "k", "v"]);
    for _ in 0..3 {
        assert_eq!(
            run(&db, &["GET", "k"]).unwrap(),
            Reply::String(b"v".to_vec())
        );
    }
    assert!(db.commands.model().source.starts_with("built-in less"));
    let stats = redis.cli(&["INFO", "commandstats"]);
    assert!(
        stats.contains("cmdstat_info:calls=0,usec=0,usec_per_call=0.00,rejected_calls=1,"),
        "one INFO, refused: {stats}"
    );
}

/// Reading the table is bounded as one request of the command, not as
/// its whole execution: against a frozen server, an unknown command fails
/// about as soon as a known one (3 attempts of 100 ms), not after
/// `(connection_timeout + command_timeout) x (1 + retries)` = 3.3 s.
#[test]
fn learning_waits_no_longer_than_a_request_of_the_command() {
    let location = silent_server();
    let db = |location: &str| {
        let args = DbArgs {
            location,
            role: "master",
            command_timeout: 100,
            max_command_retries: 2,
            ..DbArgs::default()
        };
        Database::new("db", DbConfig::from_args(&args).expect("valid config")).expect("database")
    };
    let timed = |args: &[&str]| {
        let db = db(&location);
        let started = Instant::now();
        let result = run(&db, args);
        (result, started.elapsed())
    };
    let (known, known_took) = timed(&["GET", "k"]);
    assert!(matches!(known, Err(Error::Timeout { .. })), "{known:?}");
    let (unknown, unknown_took) = timed(&["NOSUCHCOMMAND", "k"]);
    assert!(matches!(unknown, Err(Error::Timeout { .. })), "{unknown:?}");
    assert!(
        unknown_took < known_took + Duration::from_millis(200),
        "an unknown command waited {unknown_took:?}, a known one {known_took:?}"
    );
}

/// Two servers of one version (`redis 7.0.15`), one with `GET` renamed
/// away: each database uses the table its own server gave. Neither
/// database's learning changes what the other sends: on the plain
/// server, `GET` stays a known read that goes on the multiplexed
/// connection, whichever learnt first; on the other, it stays unknown. A
/// second database on the plain server uses the table read from it with
/// no second `COMMAND`, and a third plain server's equal table shares its
/// model.
#[test]
fn databases_on_servers_of_one_version_keep_their_own_tables() {
    let renamed = RedisProcess::start(&["--rename-command", "GET", ""]);
    let plain = RedisProcess::start(&[]);
    let pipelined = |args: &mut DbArgs| {
        args.command_timeout = 500;
        args.pipelining = true;
    };
    let get = Command::new(b"GET");
    // Learnt when the first command no table has comes.
    let learn = |db: &Database| {
        assert!(matches!(run(db, &["NOSUCHCOMMAND"]), Ok(Reply::Error(_))));
    };
    let on_renamed = database(&renamed, pipelined);
    learn(&on_renamed);
    assert!(on_renamed.commands.find(&get).unknown(), "GET renamed away");

    let on_plain = database(&plain, pipelined);
    learn(&on_plain);
    assert!(!on_plain.commands.find(&get).unknown());
    plain.cli(&["SET", "k", "v"]);
    let before = on_plain.stats().get(Counter::PipelineCommands);
    assert_eq!(
        run(&on_plain, &["GET", "k"]).unwrap(),
        Reply::String(b"v".to_vec())
    );
    assert_eq!(
        on_plain.stats().get(Counter::PipelineCommands),
        before + 1,
        "GET went on the multiplexed connection"
    );
    assert_eq!(calls(&plain, "command"), 1);

    // Learning again from the renamed server changes neither.
    let again_on_renamed = database(&renamed, pipelined);
    learn(&again_on_renamed);
    assert!(again_on_renamed.commands.find(&get).unknown());
    assert!(!on_plain.commands.find(&get).unknown());
    assert_eq!(calls(&renamed, "command"), 1, "known by its run_id");

    let again_on_plain = database(&plain, pipelined);
    learn(&again_on_plain);
    assert!(!again_on_plain.commands.find(&get).unknown());
    assert_eq!(calls(&plain, "command"), 1, "known by its run_id");

    let other_plain = RedisProcess::start(&[]);
    let on_other_plain = database(&other_plain, pipelined);
    learn(&on_other_plain);
    assert_eq!(calls(&other_plain, "command"), 1, "another server: read");
    assert!(std::ptr::eq(
        on_other_plain.commands.model(),
        on_plain.commands.model()
    ));
}
