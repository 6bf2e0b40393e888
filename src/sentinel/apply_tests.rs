//! Tests of [`super::Knowledge`].
use super::*;
use crate::config::{DbArgs, DbConfig};
use std::time::Instant;

const M: &str = "127.0.0.1:7001";
const R1: &str = "127.0.0.1:7002";
const R2: &str = "127.0.0.1:7003";

/// A database with a master and a replica declared (no connection is
/// opened for declared roles).
fn db(name: &str, servers: &[(&str, Role)]) -> Arc<Database> {
    let config = DbConfig::from_args(&DbArgs::default()).unwrap();
    let db = Database::new(name, config).unwrap();
    for (addr, role) in servers {
        db.add_server(&addr.parse().unwrap(), *role, &mut |_| {})
            .unwrap();
    }
    Arc::new(db)
}

fn at(text: &str) -> Location {
    text.parse().unwrap()
}

/// Sentinel's `+switch-master` of `main` from `old` to `new`.
fn switch(old: &str, new: &str) -> Event {
    Event::SwitchMaster {
        name: "main".into(),
        old: at(old),
        new: at(new),
    }
}

fn state(db: &Database, addr: &str) -> Option<(Role, bool)> {
    let topology = db.topology();
    let server = topology.by_location(&at(addr))?;
    Some((server.role(), server.health.is_sick(Instant::now())))
}

fn reported(addr: &str, sdown: bool) -> Reported {
    Reported {
        name: String::new(),
        addr: at(addr),
        sdown,
        odown: false,
        failover_timeout: None,
    }
}

#[test]
fn down_until_both_verdicts_are_cleared() {
    let dbs = [db("a", &[(M, Role::Master), (R1, Role::Slave)])];
    let mut knowledge = Knowledge::new(false);
    let event = |kind, down| Event::Down {
        addr: at(M),
        kind,
        down,
    };
    knowledge.on_event(&event(Down::Subjective, true), 0, &dbs);
    knowledge.on_event(&event(Down::Objective, true), 0, &dbs);
    assert_eq!(state(&dbs[0], M), Some((Role::Master, true)));
    assert_eq!(state(&dbs[0], R1), Some((Role::Slave, false)));
    knowledge.on_event(&event(Down::Objective, false), 0, &dbs);
    assert_eq!(state(&dbs[0], M), Some((Role::Master, true)));
    let log = knowledge.on_event(&event(Down::Subjective, false), 0, &dbs);
    assert_eq!(state(&dbs[0], M), Some((Role::Master, false)));
    assert_eq!(log, ["db a: 127.0.0.1:7001 up again"]);
}

/// An old master still answering `ROLE` as a master (restarted, not yet
/// reconfigured by Sentinel) is not given writes once Sentinel has
/// switched: reads that reach it on new connections must not promote it.
#[test]
fn a_role_answer_does_not_promote_a_server_sentinel_demoted() {
    use crate::database::TaskConnection;
    use crate::protocol::Command;
    use crate::testing::RedisProcess;
    // Two masters: `old` still says master, as an old master does
    // before Sentinel reconfigures it.
    let (old, new) = (RedisProcess::start(&[]), RedisProcess::start(&[]));
    let (old_addr, new_addr) = (old.location(), new.location());
    let dbs = [db("a", &[(&old_addr, Role::Auto), (&new_addr, Role::Auto)])];
    let mut knowledge = Knowledge::new(false);
    knowledge.on_event(&switch(&old_addr, &new_addr), 0, &dbs);
    let run = |args: &[&str], master: bool| {
        let mut command = Command::new(args[0].as_bytes());
        for arg in &args[1..] {
            command.push(arg.as_bytes());
        }
        dbs[0].execute(
            &mut command,
            master,
            &mut TaskConnection::default(),
            &mut |_| {},
        )
    };
    // Several threads (each has its own rotation over the servers), each
    // command on a new connection (ROLE is asked on each).
    std::thread::scope(|scope| {
        for thread in 0..4 {
            let run = &run;
            let dbs = &dbs;
            scope.spawn(move || {
                for i in 0..10 {
                    run(&["GET", "k"], false).expect("read");
                    dbs[0].close_idle();
                    let key = format!("w{thread}-{i}");
                    run(&["SET", &key, "v"], true).expect("write");
                    dbs[0].close_idle();
                }
            });
        }
    });
    assert_eq!(
        old.cli(&["DBSIZE"]).trim(),
        "0",
        "writes reached the demoted master"
    );
    assert_eq!(new.cli(&["DBSIZE"]).trim(), "40");
    assert_eq!(state(&dbs[0], &old_addr), Some((Role::Slave, false)));
}

fn run(db: &Database, args: &[&str], master: bool) -> crate::error::Result<crate::protocol::Reply> {
    let mut command = crate::protocol::Command::new(args[0].as_bytes());
    for arg in &args[1..] {
        command.push(arg.as_bytes());
    }
    db.execute(
        &mut command,
        master,
        &mut crate::database::TaskConnection::default(),
        &mut |_| {},
    )
}

/// From the first failover step to the promotion, master commands
/// wait (reads go on), then go to the promoted replica: none reaches
/// the old master.
#[test]
fn writes_held_from_the_failover_start_go_to_the_promoted_replica() {
    use crate::testing::RedisProcess;
    let (old, new) = (RedisProcess::start(&[]), RedisProcess::start(&[]));
    let (old_addr, new_addr) = (old.location(), new.location());
    let dbs = [
        db("a", &[(&old_addr, Role::Master), (&new_addr, Role::Slave)]),
        db("other", &[(&new_addr, Role::Master)]),
    ];
    let mut knowledge = Knowledge::new(false);
    let log = knowledge.on_event(
        &Event::FailoverStarted {
            name: "main".into(),
            master: at(&old_addr),
        },
        0,
        &dbs,
    );
    assert!(dbs[0].failover_hold().is_on());
    // Not a database of that master.
    assert!(!dbs[1].failover_hold().is_on());
    assert_eq!(log.len(), 1, "{log:?}");
    std::thread::scope(|scope| {
        let writers: Vec<_> = (0..4)
            .map(|i| {
                let db = &dbs[0];
                scope.spawn(move || {
                    let start = Instant::now();
                    run(db, &["SET", &format!("k{i}"), "v"], true).expect("write");
                    start.elapsed()
                })
            })
            .collect();
        std::thread::sleep(std::time::Duration::from_millis(200));
        // Reads went on meanwhile.
        run(&dbs[0], &["GET", "k"], false).expect("read");
        assert_eq!(old.cli(&["DBSIZE"]).trim(), "0");
        let log = knowledge.on_event(&switch(&old_addr, &new_addr), 0, &dbs);
        assert!(log.iter().any(|line| line.contains("released")), "{log:?}");
        for writer in writers {
            let held = writer.join().unwrap();
            assert!(held >= std::time::Duration::from_millis(150), "{held:?}");
        }
    });
    assert_eq!(
        old.cli(&["DBSIZE"]).trim(),
        "0",
        "a write reached the old master"
    );
    assert_eq!(new.cli(&["DBSIZE"]).trim(), "4");
    assert!(!dbs[0].failover_hold().is_on());
}

/// An abort sends the held commands to the old master; a command
/// whose deadline passes while held fails, not sent; the hold ends
/// with the thread.
#[test]
fn aborts_deadlines_and_a_stopped_thread_end_the_hold() {
    use crate::testing::RedisProcess;
    let old = RedisProcess::start(&[]);
    let old_addr = old.location();
    // The deadline: (100 + 100) ms.
    let config = DbConfig::from_args(&DbArgs {
        connection_timeout: 100,
        command_timeout: 100,
        ..DbArgs::default()
    })
    .unwrap();
    let timed = Database::new("timed", config).unwrap();
    timed
        .add_server(&at(&old_addr), Role::Master, &mut |_| {})
        .unwrap();
    let dbs = [Arc::new(timed)];
    let mut knowledge = Knowledge::new(false);
    let started = Event::FailoverStarted {
        name: "main".into(),
        master: at(&old_addr),
    };
    knowledge.on_event(&started, 0, &dbs);
    let start = Instant::now();
    let err = run(&dbs[0], &["SET", "late", "v"], true).unwrap_err();
    assert!(
        matches!(err, crate::error::Error::FailoverHeld { .. }),
        "{err}"
    );
    let elapsed = start.elapsed();
    assert!(
        elapsed >= std::time::Duration::from_millis(200),
        "{elapsed:?}"
    );
    assert!(elapsed < std::time::Duration::from_secs(1), "{elapsed:?}");
    assert_eq!(old.cli(&["DBSIZE"]).trim(), "0");
    assert_eq!(dbs[0].stats().get(crate::stats::Counter::CommandsFailed), 1);
    assert_eq!(dbs[0].stats().get(crate::stats::Counter::CommandsTotal), 0);
    std::thread::scope(|scope| {
        let writer = scope.spawn(|| run(&dbs[0], &["SET", "kept", "v"], true));
        std::thread::sleep(std::time::Duration::from_millis(30));
        knowledge.on_event(
            &Event::FailoverAborted {
                name: "main".into(),
                master: at(&old_addr),
            },
            0,
            &dbs,
        );
        writer.join().unwrap().expect("released to the old master");
    });
    assert_eq!(old.cli(&["DBSIZE"]).trim(), "1");
    knowledge.on_event(&started, 0, &dbs);
    assert!(dbs[0].failover_hold().is_on());
    drop(knowledge);
    assert!(!dbs[0].failover_hold().is_on());
}

/// Every Sentinel is listened to: the leader's steps may come twice (its
/// topology session and its failover events), the promotion from several
/// Sentinels, and a Sentinel that lost the election aborts while the
/// leader goes on. One hold, one release, and only the leader's abort
/// lifts it.
#[test]
fn only_the_leader_aborts_and_duplicates_change_nothing() {
    let dbs = [db("a", &[(M, Role::Master), (R1, Role::Slave)])];
    let mut knowledge = Knowledge::new(false);
    let started = Event::FailoverStarted {
        name: "main".into(),
        master: at(M),
    };
    let aborted = Event::FailoverAborted {
        name: "main".into(),
        master: at(M),
    };
    let switch = switch(M, R1);
    // Sentinel 2 leads.
    assert_eq!(knowledge.on_event(&started, 2, &dbs).len(), 1);
    assert!(knowledge.on_event(&started, 2, &dbs).is_empty());
    assert!(knowledge.on_event(&aborted, 0, &dbs).is_empty());
    assert!(dbs[0].failover_hold().is_on());
    let log = knowledge.on_event(&switch, 2, &dbs);
    assert!(log.iter().any(|l| l.contains("released")), "{log:?}");
    assert!(!dbs[0].failover_hold().is_on());
    // The same switch from another Sentinel: nothing more.
    assert!(knowledge.on_event(&switch, 0, &dbs).is_empty());
    assert!(knowledge.on_event(&switch, 2, &dbs).is_empty());
    assert_eq!(state(&dbs[0], R1), Some((Role::Master, false)));
    assert_eq!(state(&dbs[0], M), Some((Role::Slave, false)));
    // A failover Sentinel 1 leads, then aborts.
    knowledge.on_event(&started, 1, &dbs);
    assert!(knowledge.on_event(&aborted, 0, &dbs).is_empty());
    assert!(dbs[0].failover_hold().is_on());
    let log = knowledge.on_event(&aborted, 1, &dbs);
    assert!(log.iter().any(|l| l.contains("aborted")), "{log:?}");
    assert!(!dbs[0].failover_hold().is_on());
    // A later leader (a new epoch) takes the hold over: its abort counts,
    // not the former leader's.
    knowledge.on_event(&started, 1, &dbs);
    knowledge.on_event(&started, 2, &dbs);
    assert!(knowledge.on_event(&aborted, 1, &dbs).is_empty());
    assert!(dbs[0].failover_hold().is_on());
    knowledge.on_event(&aborted, 2, &dbs);
    assert!(!dbs[0].failover_hold().is_on());
}

#[test]
fn a_role_change_sets_the_role() {
    let dbs = [db("a", &[(M, Role::Master)])];
    let mut knowledge = Knowledge::new(false);
    knowledge.on_event(
        &Event::RoleReported {
            addr: at(M),
            role: Role::Slave,
        },
        0,
        &dbs,
    );
    assert_eq!(state(&dbs[0], M), Some((Role::Slave, false)));
}

#[test]
fn switch_master_swaps_roles_in_every_database() {
    let dbs = [
        db("a", &[(M, Role::Master), (R1, Role::Slave)]),
        db("b", &[(R1, Role::Slave)]),
    ];
    let mut knowledge = Knowledge::new(false);
    let log = knowledge.on_event(&switch(M, R1), 0, &dbs);
    assert_eq!(state(&dbs[0], M), Some((Role::Slave, false)));
    assert_eq!(state(&dbs[0], R1), Some((Role::Master, false)));
    assert_eq!(state(&dbs[1], R1), Some((Role::Master, false)));
    // Without discover, nothing is added.
    assert_eq!(state(&dbs[1], M), None);
    assert_eq!(log.len(), 3, "{log:?}");
}

#[test]
fn refresh_sets_roles_and_health() {
    let dbs = [db(
        "a",
        &[(M, Role::Slave), (R1, Role::Master), (R2, Role::Slave)],
    )];
    let mut knowledge = Knowledge::new(false);
    knowledge.on_event(
        &Event::Down {
            addr: at(R1),
            kind: Down::Subjective,
            down: true,
        },
        0,
        &dbs,
    );
    let masters = [Master {
        master: reported(M, false),
        replicas: vec![reported(R1, false), reported(R2, true)],
    }];
    knowledge.on_refresh(&masters, &dbs);
    assert_eq!(state(&dbs[0], M), Some((Role::Master, false)));
    // R1 was down; the full picture says it is not any more.
    assert_eq!(state(&dbs[0], R1), Some((Role::Slave, false)));
    assert_eq!(state(&dbs[0], R2), Some((Role::Slave, true)));
}

#[test]
fn discovery_adds_and_removes_only_its_own_servers() {
    let dbs = [
        db("a", &[(M, Role::Master)]),
        db("other", &[("127.0.0.1:9999", Role::Master)]),
    ];
    let mut knowledge = Knowledge::new(true);
    let masters = |replicas: Vec<Reported>| {
        [Master {
            master: reported(M, false),
            replicas,
        }]
    };
    knowledge.on_refresh(
        &masters(vec![reported(R1, false), reported(R2, true)]),
        &dbs,
    );
    assert_eq!(state(&dbs[0], R1), Some((Role::Slave, false)));
    assert_eq!(state(&dbs[0], R2), Some((Role::Slave, true)));
    assert_eq!(dbs[1].topology().servers.len(), 1);
    assert_eq!(dbs[0].stats().get(crate::stats::Counter::ServersTotal), 3);
    // R2 is no longer reported: removed. The declared master stays
    // even when it is not reported.
    knowledge.on_refresh(&masters(vec![reported(R1, false)]), &dbs);
    assert_eq!(state(&dbs[0], R2), None);
    assert_eq!(state(&dbs[0], R1), Some((Role::Slave, false)));
    let empty: [Master; 0] = [];
    knowledge.on_refresh(&empty, &dbs);
    assert!(state(&dbs[0], M).is_some());
    assert_eq!(state(&dbs[0], R1), None);
}

/// The servers discovery added live with the database: the thread of a
/// later warm period (a new `Knowledge`) removes them when Sentinel no
/// longer reports them, and still keeps the declared ones.
#[test]
fn a_new_thread_removes_what_an_earlier_one_discovered() {
    let dbs = [db("a", &[(M, Role::Master)])];
    let masters = |replicas: Vec<Reported>| {
        [Master {
            master: reported(M, false),
            replicas,
        }]
    };
    Knowledge::new(true).on_refresh(
        &masters(vec![reported(R1, false), reported(R2, false)]),
        &dbs,
    );
    assert!(state(&dbs[0], R2).is_some());
    let log = Knowledge::new(true).on_refresh(&masters(vec![reported(R1, false)]), &dbs);
    assert_eq!(state(&dbs[0], R2), None, "{log:?}");
    assert!(state(&dbs[0], R1).is_some());
    let empty: [Master; 0] = [];
    Knowledge::new(true).on_refresh(&empty, &dbs);
    assert_eq!(state(&dbs[0], R1), None);
    assert!(state(&dbs[0], M).is_some());
}

/// A replica Sentinel drops and reports again comes back under its
/// former id: the private connections workers kept to it (keyed by
/// it) serve again rather than stay open unused.
#[test]
fn a_replica_reported_again_gets_its_id_back() {
    let dbs = [db("a", &[(M, Role::Master)])];
    let mut knowledge = Knowledge::new(true);
    let id = |addr: &str| dbs[0].topology().by_location(&at(addr)).map(|s| s.id);
    let with = [Master {
        master: reported(M, false),
        replicas: vec![reported(R1, false)],
    }];
    let without = [Master {
        master: reported(M, false),
        replicas: vec![],
    }];
    knowledge.on_refresh(&with, &dbs);
    let first = id(R1).expect("added");
    for _ in 0..3 {
        knowledge.on_refresh(&without, &dbs);
        assert_eq!(id(R1), None);
        knowledge.on_refresh(&with, &dbs);
        assert_eq!(id(R1), Some(first));
    }
    assert_eq!(dbs[0].topology().servers.len(), 2);
}

#[test]
fn discovery_follows_a_switch_to_an_unknown_master() {
    let dbs = [db("a", &[(M, Role::Master)])];
    let mut knowledge = Knowledge::new(true);
    knowledge.on_event(&switch(M, R1), 0, &dbs);
    assert_eq!(state(&dbs[0], M), Some((Role::Slave, false)));
    assert_eq!(state(&dbs[0], R1), Some((Role::Master, false)));
}

/// A hold that passed its bound while no master command waited (nothing
/// cleared it: the leader went silent on a quiet site) must not swallow
/// the hold of the next failover of the same master, which a later leader
/// starts: taken as "the same failover seen again", the new hold would
/// keep the stale bound, be over at once, and the writes of the second
/// failover would go to the old master.
#[test]
fn a_stale_hold_does_not_swallow_the_next_failover() {
    let dbs = [db("a", &[(M, Role::Master), (R1, Role::Slave)])];
    let mut knowledge = Knowledge::new(false);
    // failover-timeout 0 from a refresh: each hold lasts `HOLD_MARGIN`.
    let mut master = reported(M, false);
    master.name = "main".into();
    master.failover_timeout = Some(Duration::ZERO);
    knowledge.on_refresh(
        &[Master {
            master,
            replicas: vec![reported(R1, false)],
        }],
        &dbs,
    );
    let started = Event::FailoverStarted {
        name: "main".into(),
        master: at(M),
    };
    // Sentinel 0 leads, then goes silent; no write comes meanwhile.
    knowledge.on_event(&started, 0, &dbs);
    std::thread::sleep(HOLD_MARGIN + Duration::from_millis(100));
    // A new epoch: Sentinel 1 leads a new failover of the same master.
    knowledge.on_event(&started, 1, &dbs);
    let waited = dbs[0]
        .failover_hold()
        .wait(Some(Instant::now() + Duration::from_millis(300)));
    assert!(
        format!("{waited:?}").starts_with("Expired"),
        "the second failover's writes were not held: {waited:?}"
    );
}

/// Between `+promoted-slave` and `+switch-master` (the leader
/// reconfigures the other replicas: a second or more), `SENTINEL
/// masters` still names the old master, on the leader as on the others
/// (they learn the switch from the leader's hello, up to 2 s later). A
/// refresh in that window (the periodic one, or a new topology session)
/// must not give the old master its role back: writes would go to it
/// until the next `+switch-master`, lost once it is turned into a
/// replica.
#[test]
fn a_refresh_during_the_failover_does_not_undo_the_promotion() {
    let dbs = [db(
        "a",
        &[(M, Role::Master), (R1, Role::Slave), (R2, Role::Slave)],
    )];
    let mut knowledge = Knowledge::new(false);
    knowledge.on_event(
        &Event::FailoverStarted {
            name: "main".into(),
            master: at(M),
        },
        0,
        &dbs,
    );
    // `+promoted-slave` from the leader.
    knowledge.on_event(&switch(M, R1), 0, &dbs);
    assert_eq!(state(&dbs[0], R1), Some((Role::Master, false)));
    // What `SENTINEL masters` / `replicas` answer before `+switch-master`.
    knowledge.on_refresh(
        &[Master {
            master: reported(M, false),
            replicas: vec![reported(R1, false), reported(R2, false)],
        }],
        &dbs,
    );
    assert_eq!(
        state(&dbs[0], M),
        Some((Role::Slave, false)),
        "the old master is given writes again"
    );
    assert_eq!(state(&dbs[0], R1), Some((Role::Master, false)));
}

/// Once a refresh names the promoted master, Sentinel has caught up:
/// what later refreshes say applies again, the old master's role too.
#[test]
fn a_refresh_naming_the_promoted_master_ends_the_wait_for_the_switch() {
    let dbs = [db("a", &[(M, Role::Master), (R1, Role::Slave)])];
    let mut knowledge = Knowledge::new(false);
    knowledge.on_event(&switch(M, R1), 0, &dbs);
    let refresh = |master: &str, replica: &str| {
        [Master {
            master: reported(master, false),
            replicas: vec![reported(replica, false)],
        }]
    };
    knowledge.on_refresh(&refresh(R1, M), &dbs);
    assert_eq!(state(&dbs[0], R1), Some((Role::Master, false)));
    knowledge.on_refresh(&refresh(M, R1), &dbs);
    assert_eq!(state(&dbs[0], M), Some((Role::Master, false)));
    assert_eq!(state(&dbs[0], R1), Some((Role::Slave, false)));
}

/// A transaction (`MULTI` ... `EXEC`) begun on the old master before
/// the failover keeps its connection (`execute_pinned`): its `EXEC`, sent
/// after the promotion is known, must not run on the old master and be
/// acknowledged (the write would be lost once the old master turns
/// replica). It fails instead, never sent.
#[test]
fn a_transaction_begun_before_the_failover_is_not_acknowledged_by_the_old_master() {
    use crate::database::TaskConnection;
    use crate::testing::RedisProcess;
    let (old, new) = (RedisProcess::start(&[]), RedisProcess::start(&[]));
    let (old_addr, new_addr) = (old.location(), new.location());
    let dbs = [db(
        "a",
        &[(&old_addr, Role::Master), (&new_addr, Role::Slave)],
    )];
    let mut task = TaskConnection::default();
    let mut send = |args: &[&str]| {
        let mut command = crate::protocol::Command::new(args[0].as_bytes());
        for arg in &args[1..] {
            command.push(arg.as_bytes());
        }
        dbs[0].execute(&mut command, true, &mut task, &mut |_| {})
    };
    send(&["MULTI"]).expect("MULTI");
    send(&["INCR", "counter"]).expect("queued");
    let mut knowledge = Knowledge::new(false);
    knowledge.on_event(
        &Event::FailoverStarted {
            name: "main".into(),
            master: at(&old_addr),
        },
        0,
        &dbs,
    );
    knowledge.on_event(&switch(&old_addr, &new_addr), 0, &dbs);
    let exec = send(&["EXEC"]);
    assert!(
        exec.is_err() || old.cli(&["DBSIZE"]).trim() == "0",
        "EXEC acknowledged by the demoted master: {exec:?}"
    );
    assert_eq!(old.cli(&["DBSIZE"]).trim(), "0");
    // That EXEC ended the transaction: the task's next command goes on.
    send(&["SET", "k", "v"]).expect("a write after the failed EXEC");
    assert_eq!(new.cli(&["DBSIZE"]).trim(), "1");
}

/// While the hold is on for the master a task's transaction is on, its
/// commands fail, never sent, and the connection is closed (what was
/// queued there goes with it); `DISCARD` still goes. The task's next
/// transaction starts afresh, on the master then known.
#[test]
fn a_transaction_on_a_held_master_fails_and_the_next_one_starts_afresh() {
    use crate::database::TaskConnection;
    use crate::protocol::Reply;
    use crate::testing::RedisProcess;
    let (old, new) = (RedisProcess::start(&[]), RedisProcess::start(&[]));
    let (old_addr, new_addr) = (old.location(), new.location());
    let dbs = [db(
        "a",
        &[(&old_addr, Role::Master), (&new_addr, Role::Slave)],
    )];
    let send = |task: &mut TaskConnection, args: &[&str]| {
        let mut command = crate::protocol::Command::new(args[0].as_bytes());
        for arg in &args[1..] {
            command.push(arg.as_bytes());
        }
        dbs[0].execute(&mut command, true, task, &mut |_| {})
    };
    let (mut task, mut other) = (TaskConnection::default(), TaskConnection::default());
    send(&mut task, &["MULTI"]).expect("MULTI");
    send(&mut other, &["MULTI"]).expect("MULTI");
    let mut knowledge = Knowledge::new(false);
    knowledge.on_event(
        &Event::FailoverStarted {
            name: "main".into(),
            master: at(&old_addr),
        },
        0,
        &dbs,
    );
    // Queued while held: fails, and so does the EXEC of what was lost.
    let queued = send(&mut task, &["INCR", "counter"]);
    assert!(
        matches!(queued, Err(crate::error::Error::FailedOverUnderTask { .. })),
        "{queued:?}"
    );
    assert!(send(&mut task, &["EXEC"]).is_err());
    // `DISCARD` goes.
    let discarded = send(&mut other, &["DISCARD"]);
    assert!(matches!(discarded, Ok(Reply::Status(_))), "{discarded:?}");
    // The promotion: the next transaction goes to the new master.
    knowledge.on_event(&switch(&old_addr, &new_addr), 0, &dbs);
    send(&mut task, &["MULTI"]).expect("MULTI");
    send(&mut task, &["INCR", "counter"]).expect("queued");
    let exec = send(&mut task, &["EXEC"]);
    assert!(matches!(exec, Ok(Reply::Array(_))), "{exec:?}");
    assert_eq!(old.cli(&["DBSIZE"]).trim(), "0");
    assert_eq!(new.cli(&["DBSIZE"]).trim(), "1");
}
