//! Connection state a task leaves: transactions kept on their connection,
//! changed connections closed at the task's end, refused commands.
use super::*;

#[test]
fn a_transaction_keeps_its_connection_until_exec_in_both_modes() {
    let redis = RedisProcess::start(&[]);
    for shared in [false, true] {
        let db = database(&redis, |args| {
            args.shared_connections = shared;
            args.max_connections = 2;
        });
        let mut task = TaskConnection::default();
        run_in(&db, &mut task, &["MULTI"]).unwrap();
        assert_eq!(
            run_in(&db, &mut task, &["SET", "t", "1"]).unwrap(),
            queued()
        );
        // Another task meanwhile: its own connection, not queued.
        assert_eq!(
            run(&db, &["GET", "t"]).unwrap(),
            Reply::Nil,
            "shared={shared}"
        );
        assert_eq!(run_in(&db, &mut task, &["INCR", "t"]).unwrap(), queued());
        assert_eq!(
            run_in(&db, &mut task, &["EXEC"]).unwrap(),
            Reply::Array(vec![Reply::Status("OK".into()), Reply::Integer(2)])
        );
        assert_eq!(db.stats().get(Counter::ConnectionsTotal), 2);
        // Released: the next command reuses it and runs at once.
        assert_eq!(
            run_in(&db, &mut task, &["GET", "t"]).unwrap(),
            Reply::String(b"2".to_vec())
        );
        assert_eq!(db.stats().get(Counter::ConnectionsTotal), 2);
        assert_eq!(db.stats().get(Counter::DroppedState), 0);
        redis.cli(&["DEL", "t"]);
    }
}

#[test]
fn a_task_ending_in_a_transaction_closes_its_connection() {
    let redis = RedisProcess::start(&[]);
    for shared in [false, true] {
        let db = database(&redis, |args| {
            args.shared_connections = shared;
            args.max_connections = 1;
        });
        for open in [&["MULTI"][..], &["WATCH", "w"]] {
            let mut task = TaskConnection::default();
            run_in(&db, &mut task, open).unwrap();
            drop(task);
            assert_eq!(
                run(&db, &["SET", "w", "1"]).unwrap(),
                Reply::Status("OK".into())
            );
            // A WATCH left on the connection would abort this.
            let mut task = TaskConnection::default();
            run_in(&db, &mut task, &["MULTI"]).unwrap();
            run_in(&db, &mut task, &["SET", "w", "2"]).unwrap();
            assert_eq!(
                run_in(&db, &mut task, &["EXEC"]).unwrap(),
                Reply::Array(vec![Reply::Status("OK".into())]),
                "shared={shared} {open:?}"
            );
        }
        assert_eq!(db.stats().get(Counter::DroppedState), 2, "shared={shared}");
        assert_eq!(db.stats().get(Counter::ConnectionsTotal), 3);
    }
}

#[test]
fn eval_inside_multi_goes_out_as_eval() {
    let redis = RedisProcess::start(&[]);
    let db = database(&redis, |_| {});
    let mut task = TaskConnection::default();
    run_in(&db, &mut task, &["MULTI"]).unwrap();
    run_in(&db, &mut task, &["EVAL", "return ARGV[1]", "0", "ran"]).unwrap();
    assert_eq!(
        run_in(&db, &mut task, &["EXEC"]).unwrap(),
        Reply::Array(vec![Reply::String(b"ran".to_vec())])
    );
    assert_eq!(db.stats().get(Counter::CommandsNoscript), 0);
}

#[test]
fn a_changed_connection_serves_its_task_then_is_closed() {
    let redis = RedisProcess::start(&[]);
    for shared in [false, true] {
        let db = database(&redis, |args| {
            args.shared_connections = shared;
            args.max_connections = 1;
        });
        let mut task = TaskConnection::default();
        run_in(&db, &mut task, &["SELECT", "5"]).unwrap();
        run_in(&db, &mut task, &["SET", "s", "db5"]).unwrap();
        run_in(&db, &mut task, &["CLIENT", "SETNAME", "x"]).unwrap();
        assert_eq!(
            run_in(&db, &mut task, &["CLIENT", "GETNAME"]).unwrap(),
            Reply::String(b"x".to_vec())
        );
        drop(task);
        assert_eq!(
            redis.cli(&["-n", "5", "GET", "s"]),
            "db5",
            "shared={shared}"
        );
        assert_eq!(run(&db, &["GET", "s"]).unwrap(), Reply::Nil);
        assert_eq!(run(&db, &["CLIENT", "GETNAME"]).unwrap(), Reply::Nil);
        // QUIT: closed at once, not counted as a failure.
        run(&db, &["QUIT"]).unwrap();
        assert_eq!(run(&db, &["PING"]).unwrap(), Reply::Status("PONG".into()));
        let stats = db.stats();
        assert_eq!(stats.get(Counter::DroppedState), 2);
        assert_eq!(stats.get(Counter::ConnectionsTotal), 3);
        assert_eq!(stats.get(Counter::CommandsFailed), 0);
        assert_eq!(stats.get(Counter::DroppedHungUp), 0);
        redis.cli(&["-n", "5", "DEL", "s"]);
    }
}

#[test]
fn refused_commands_are_not_sent() {
    let redis = RedisProcess::start(&[]);
    let db = database(&redis, |_| {});
    for args in [
        &["subscribe", "ch"][..],
        &["MONITOR"],
        &["CLIENT", "REPLY", "OFF"],
    ] {
        let err = run(&db, args).unwrap_err();
        assert!(matches!(&err, Error::Refused { .. }), "{err}");
    }
    assert_eq!(db.stats().get(Counter::ConnectionsTotal), 0);
    assert_eq!(db.stats().get(Counter::CommandsFailed), 3);
}

#[test]
fn a_failed_pinned_connection_loses_the_transaction() {
    let redis = RedisProcess::start(&[]);
    for shared in [false, true] {
        let db = database(&redis, |args| {
            args.shared_connections = shared;
            args.max_command_retries = 3;
        });
        let mut task = TaskConnection::default();
        run_in(&db, &mut task, &["MULTI"]).unwrap();
        redis.cli(&["CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"]);
        // Not retried elsewhere, where it would run at once.
        assert!(matches!(
            run_in(&db, &mut task, &["SET", "lost", "1"]),
            Err(Error::Io { .. })
        ));
        assert!(matches!(
            run_in(&db, &mut task, &["SET", "lost", "2"]),
            Err(Error::Lost(session::Lost::Transaction))
        ));
        assert!(matches!(
            run_in(&db, &mut task, &["EXEC"]),
            Err(Error::Lost(session::Lost::Transaction))
        ));
        assert_eq!(redis.cli(&["EXISTS", "lost"]), "0");
        assert_eq!(db.stats().get(Counter::CommandsRetried), 0);
        assert_eq!(
            run_in(&db, &mut task, &["PING"]).unwrap(),
            Reply::Status("PONG".into())
        );
    }
}
