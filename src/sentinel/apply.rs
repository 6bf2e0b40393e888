//! What Sentinel's news changes in the databases of a VCL: the role and
//! health of the servers whose location is the address Sentinel gives,
//! and, with `discover=true`, which replicas a database holds.
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::event::{Down, Event, Reported};
use crate::config::{Location, Role};
use crate::database::Database;

/// A master as `SENTINEL masters` and `SENTINEL replicas <name>` report it.
#[derive(Clone, Debug)]
pub(crate) struct Master {
    pub master: Reported,
    pub replicas: Vec<Reported>,
}

/// What the thread remembers between messages.
pub(crate) struct Knowledge {
    /// Addresses down for Sentinel: sick while in either set.
    sdown: HashSet<Location>,
    odown: HashSet<Location>,
    /// `discover=true`. The servers it added are marked in their database
    /// ([`Database::is_discovered`]), where a later thread finds them.
    discover: bool,
    /// Each master's `failover-timeout`, by name, from the last refresh:
    /// how long a hold may last.
    failover_timeouts: HashMap<String, Duration>,
    /// The databases this thread started a hold on: lifted when it stops.
    holding: Vec<Arc<Database>>,
}

/// The longest a hold lasts without news from Sentinel when its master's
/// `failover-timeout` is longer or unknown (Sentinel's default is 3
/// minutes): a command without timeouts waits this long at most.
const MAX_HOLD: Duration = Duration::from_secs(10);
/// Past the `failover-timeout`, time for Sentinel's abort to arrive.
const HOLD_MARGIN: Duration = Duration::from_secs(1);

/// Calls `change` on every server of `dbs` at `addr`.
fn each_server(
    dbs: &[Arc<Database>],
    addr: &Location,
    mut change: impl FnMut(&Database, &crate::server::Server),
) {
    for db in dbs {
        let topology = db.topology();
        for server in topology.servers.iter().filter(|s| s.location() == addr) {
            change(db, server);
        }
    }
}

impl Knowledge {
    pub(crate) fn new(discover: bool) -> Self {
        Knowledge {
            sdown: HashSet::new(),
            odown: HashSet::new(),
            discover,
            failover_timeouts: HashMap::new(),
            holding: Vec::new(),
        }
    }

    /// Holds the master commands of every database with a server at
    /// `master`, until its promotion or abort, at most the failover
    /// timeout (plus a margin) or [`MAX_HOLD`].
    fn hold(
        &mut self,
        dbs: &[Arc<Database>],
        name: &str,
        master: &Location,
        log: &mut Vec<String>,
    ) {
        let bound = self
            .failover_timeouts
            .get(name)
            .map_or(MAX_HOLD, |timeout| (*timeout + HOLD_MARGIN).min(MAX_HOLD));
        let until = Instant::now() + bound;
        for db in dbs {
            if db.topology().by_location(master).is_none() {
                continue;
            }
            if db.failover_hold().start(master, until) {
                log.push(format!(
                    "db {}: master commands held: Sentinel fails over {master} (at most {} ms)",
                    db.name(),
                    bound.as_millis()
                ));
            }
            if !self.holding.iter().any(|held| Arc::ptr_eq(held, db)) {
                self.holding.push(db.clone());
            }
        }
    }

    /// Lifts the holds on `master`: the held commands go where the roles
    /// now say (set before this).
    fn lift(&mut self, master: &Location, to: &str, log: &mut Vec<String>) {
        for db in &self.holding {
            if db.failover_hold().lift(master) {
                log.push(format!(
                    "db {}: held master commands released to {to}",
                    db.name()
                ));
            }
        }
        self.holding.retain(|db| db.failover_hold().is_on());
    }

    fn is_down(&self, addr: &Location) -> bool {
        self.sdown.contains(addr) || self.odown.contains(addr)
    }

    /// Gives the servers at `addr` the health Sentinel says.
    fn apply_down(&self, dbs: &[Arc<Database>], addr: &Location, log: &mut Vec<String>) {
        let down = self.is_down(addr);
        each_server(dbs, addr, |db, server| {
            let now = std::time::Instant::now();
            let was = server.health.is_sick(now);
            server.health.set_down(down);
            if was != server.health.is_sick(now) {
                let state = if down { "down (sick)" } else { "up again" };
                log.push(format!("db {}: {addr} {state}", db.name()));
            }
        });
    }

    fn apply_role(dbs: &[Arc<Database>], addr: &Location, role: Role, log: &mut Vec<String>) {
        each_server(dbs, addr, |db, server| {
            let before = server.role();
            server.set_role_by_sentinel(role);
            if before != role {
                log.push(format!("db {}: {addr} is now {role}", db.name()));
            }
        });
    }

    /// A Pub/Sub message. Returns what changed, for the log.
    pub(crate) fn on_event(&mut self, event: &Event, dbs: &[Arc<Database>]) -> Vec<String> {
        let mut log = Vec::new();
        match event {
            Event::Down { addr, kind, down } => {
                let set = match kind {
                    Down::Subjective => &mut self.sdown,
                    Down::Objective => &mut self.odown,
                };
                if *down {
                    set.insert(addr.clone());
                } else {
                    set.remove(addr);
                }
                self.apply_down(dbs, addr, &mut log);
            }
            Event::SwitchMaster { old, new, .. } => {
                if self.discover {
                    // The new master joins every database that held the old
                    // one (it is a replica they may not know yet).
                    for db in dbs {
                        let topology = db.topology();
                        if topology.by_location(old).is_some()
                            && topology.by_location(new).is_none()
                        {
                            self.add(db, new, Role::Master, &mut log);
                        }
                    }
                }
                Self::apply_role(dbs, old, Role::Slave, &mut log);
                Self::apply_role(dbs, new, Role::Master, &mut log);
                // Sentinel saw the replica answer as a master: the held
                // commands go to it, on the roles just set.
                self.lift(old, &new.to_string(), &mut log);
            }
            Event::FailoverStarted { name, master } => self.hold(dbs, name, master, &mut log),
            Event::FailoverAborted { master, .. } => {
                self.lift(master, &format!("{master} (failover aborted)"), &mut log);
            }
            Event::RoleReported { addr, role } => Self::apply_role(dbs, addr, *role, &mut log),
        }
        log
    }

    /// A complete answer to `SENTINEL masters` and `SENTINEL replicas` of
    /// each master. Returns what changed, for the log.
    pub(crate) fn on_refresh(&mut self, masters: &[Master], dbs: &[Arc<Database>]) -> Vec<String> {
        let mut log = Vec::new();
        for m in masters {
            if let Some(timeout) = m.master.failover_timeout {
                self.failover_timeouts
                    .insert(m.master.name.clone(), timeout);
            }
        }
        if self.discover {
            self.discover_replicas(masters, dbs, &mut log);
        }
        let before: HashSet<Location> = self.sdown.union(&self.odown).cloned().collect();
        self.sdown.clear();
        self.odown.clear();
        let every = masters.iter().flat_map(|m| {
            std::iter::once((&m.master, Role::Master))
                .chain(m.replicas.iter().map(|r| (r, Role::Slave)))
        });
        let mut seen = HashSet::new();
        for (instance, role) in every.clone() {
            if instance.sdown {
                self.sdown.insert(instance.addr.clone());
            }
            if instance.odown {
                self.odown.insert(instance.addr.clone());
            }
            Self::apply_role(dbs, &instance.addr, role, &mut log);
            seen.insert(instance.addr.clone());
        }
        for addr in seen.iter().chain(before.iter()) {
            self.apply_down(dbs, addr, &mut log);
        }
        log
    }

    /// `discover=true`: every database holding a master (or one of its
    /// replicas) gets the replicas it does not have, and loses the ones it
    /// got this way that Sentinel no longer reports.
    fn discover_replicas(
        &mut self,
        masters: &[Master],
        dbs: &[Arc<Database>],
        log: &mut Vec<String>,
    ) {
        for db in dbs {
            let topology = db.topology();
            let mut wanted: HashSet<&Location> = HashSet::new();
            let mut missing = Vec::new();
            // Held: a server the VCL declared (not one discovery added)
            // is this master or one of its replicas.
            let declared =
                |addr: &Location| topology.by_location(addr).is_some() && !db.is_discovered(addr);
            for m in masters {
                let holds =
                    declared(&m.master.addr) || m.replicas.iter().any(|r| declared(&r.addr));
                if !holds {
                    continue;
                }
                wanted.insert(&m.master.addr);
                for replica in &m.replicas {
                    wanted.insert(&replica.addr);
                    if topology.by_location(&replica.addr).is_none() {
                        missing.push(replica.addr.clone());
                    }
                }
            }
            let gone: Vec<Location> = db
                .discovered()
                .into_iter()
                .filter(|addr| !wanted.contains(addr))
                .collect();
            for addr in gone {
                if db.remove_discovered(&addr) {
                    log.push(format!(
                        "db {}: {addr} removed (no longer reported)",
                        db.name()
                    ));
                }
            }
            for addr in missing {
                self.add(db, &addr, Role::Slave, log);
            }
        }
    }

    fn add(&mut self, db: &Database, addr: &Location, role: Role, log: &mut Vec<String>) {
        match db.add_discovered(addr, role) {
            Ok(()) => {
                // Sentinel may have said it was down before it was added.
                let down = self.is_down(addr);
                if let Some(server) = db.topology().by_location(addr) {
                    server.health.set_down(down);
                }
                log.push(format!(
                    "db {}: {addr} added as {role} (discovered)",
                    db.name()
                ));
            }
            Err(err) => log.push(format!("db {}: {addr} not added: {err}", db.name())),
        }
    }
}

impl Drop for Knowledge {
    /// The thread stops (VCL cold, or a bug): no hold outlives it.
    fn drop(&mut self) {
        for db in &self.holding {
            db.failover_hold().lift_any();
        }
    }
}

#[cfg(test)]
mod tests {
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
        knowledge.on_event(&event(Down::Subjective, true), &dbs);
        knowledge.on_event(&event(Down::Objective, true), &dbs);
        assert_eq!(state(&dbs[0], M), Some((Role::Master, true)));
        assert_eq!(state(&dbs[0], R1), Some((Role::Slave, false)));
        knowledge.on_event(&event(Down::Objective, false), &dbs);
        assert_eq!(state(&dbs[0], M), Some((Role::Master, true)));
        let log = knowledge.on_event(&event(Down::Subjective, false), &dbs);
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
        knowledge.on_event(
            &Event::SwitchMaster {
                name: "main".into(),
                old: at(&old_addr),
                new: at(&new_addr),
            },
            &dbs,
        );
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

    fn run(
        db: &Database,
        args: &[&str],
        master: bool,
    ) -> crate::error::Result<crate::protocol::Reply> {
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
            let log = knowledge.on_event(
                &Event::SwitchMaster {
                    name: "main".into(),
                    old: at(&old_addr),
                    new: at(&new_addr),
                },
                &dbs,
            );
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
        knowledge.on_event(&started, &dbs);
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
                &dbs,
            );
            writer.join().unwrap().expect("released to the old master");
        });
        assert_eq!(old.cli(&["DBSIZE"]).trim(), "1");
        knowledge.on_event(&started, &dbs);
        assert!(dbs[0].failover_hold().is_on());
        drop(knowledge);
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
        let log = knowledge.on_event(
            &Event::SwitchMaster {
                name: "main".into(),
                old: at(M),
                new: at(R1),
            },
            &dbs,
        );
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
        knowledge.on_event(
            &Event::SwitchMaster {
                name: "main".into(),
                old: at(M),
                new: at(R1),
            },
            &dbs,
        );
        assert_eq!(state(&dbs[0], M), Some((Role::Slave, false)));
        assert_eq!(state(&dbs[0], R1), Some((Role::Master, false)));
    }
}
