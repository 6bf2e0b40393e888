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
    /// For each master being failed over, the Sentinel (its index in the
    /// VCL's list) that published the failover's steps: the leader. Only
    /// its abort lifts the hold: a Sentinel that lost the election
    /// publishes `-failover-abort-not-elected` while the leader goes on.
    leaders: HashMap<Location, usize>,
    /// Promotions heard, by the master replaced: the one promoted, and
    /// until when a refresh naming the old master is older news. From
    /// `+promoted-slave` to `+switch-master` (the leader reconfigures the
    /// other replicas, up to `failover-timeout`; the others learn it from
    /// its hello, seconds later), `SENTINEL masters` still names the old
    /// master: applied, it would give the old master its writes back,
    /// lost once it turns replica.
    promoted: HashMap<Location, (Location, Instant)>,
}

/// The longest a hold lasts without news from Sentinel when its master's
/// `failover-timeout` is longer or unknown (Sentinel's default is 3
/// minutes): a command without timeouts waits this long at most.
const MAX_HOLD: Duration = Duration::from_secs(10);
/// Past the `failover-timeout`, time for Sentinel's abort to arrive.
const HOLD_MARGIN: Duration = Duration::from_secs(1);
/// Sentinel's `failover-timeout` when no refresh gave it.
const DEFAULT_FAILOVER_TIMEOUT: Duration = Duration::from_secs(180);
/// Past the `failover-timeout`, time for every Sentinel to learn the
/// switch from the leader's hello (sent every 2 s).
const SWITCH_MARGIN: Duration = Duration::from_secs(5);

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
            leaders: HashMap::new(),
            promoted: HashMap::new(),
        }
    }

    /// Holds the master commands of every database with a server at
    /// `master`, until its promotion or abort, at most the failover
    /// timeout (plus a margin) or [`MAX_HOLD`]. `leader` published the
    /// step. Each step of the same failover comes again here (and may
    /// come from several connections): the hold started first stands.
    fn hold(
        &mut self,
        dbs: &[Arc<Database>],
        name: &str,
        master: &Location,
        leader: usize,
        log: &mut Vec<String>,
    ) {
        self.leaders.insert(master.clone(), leader);
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
        self.leaders.remove(master);
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

    /// `new` replaces `old` (`+promoted-slave`, or `+switch-master`):
    /// until every Sentinel says so, a refresh naming `old` as the master
    /// is older news. Remembered, rather than trusting Sentinel's
    /// `failover_in_progress` flag, because only the leader sets that
    /// flag: the others answer with the old master and no flag until the
    /// leader's hello. The memory is sound for the whole failover timeout
    /// after the promotion: `+switch-master` comes within it, and Sentinel
    /// starts no new failover of that master for twice that time (a
    /// forced one, `SENTINEL FAILOVER`, publishes its own promotion,
    /// which replaces this one).
    fn remember_promotion(&mut self, name: &str, old: &Location, new: &Location) {
        if old == new {
            return;
        }
        // `new` back as the master: what was said of it is over.
        self.promoted.remove(new);
        let timeout = self
            .failover_timeouts
            .get(name)
            .copied()
            .unwrap_or(DEFAULT_FAILOVER_TIMEOUT);
        let until = Instant::now() + timeout + SWITCH_MARGIN;
        self.promoted.insert(old.clone(), (new.clone(), until));
    }

    /// Whether a refresh naming `master` as the master predates a
    /// promotion heard since. A refresh that names the promoted one as a
    /// master shows Sentinel has caught up: forgotten then (in
    /// [`Self::on_refresh`]), as at the memory's bound.
    fn predates_promotion(&mut self, master: &Location) -> bool {
        match self.promoted.get(master) {
            Some((_, until)) if Instant::now() < *until => true,
            Some(_) => {
                self.promoted.remove(master);
                false
            }
            None => false,
        }
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

    /// A Pub/Sub message from the Sentinel at index `sentinel` of the
    /// VCL's list. Returns what changed, for the log. The same event may
    /// come from several Sentinels, or twice from one (its topology
    /// session and its failover events): each change is idempotent.
    pub(crate) fn on_event(
        &mut self,
        event: &Event,
        sentinel: usize,
        dbs: &[Arc<Database>],
    ) -> Vec<String> {
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
            Event::SwitchMaster { name, old, new } => {
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
                self.remember_promotion(name, old, new);
                // Sentinel saw the replica answer as a master: the held
                // commands go to it, on the roles just set.
                self.lift(old, &new.to_string(), &mut log);
            }
            Event::FailoverStarted { name, master } => {
                self.hold(dbs, name, master, sentinel, &mut log);
            }
            // Another Sentinel's abort (it lost the election the leader
            // won) ends nothing: the leader goes on.
            Event::FailoverAborted { master, .. }
                if self.leaders.get(master).is_some_and(|&l| l != sentinel) => {}
            Event::FailoverAborted { master, .. } => {
                self.promoted.remove(master);
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
        // A promoted master named as such: Sentinel caught up.
        self.promoted
            .retain(|_, (new, _)| !masters.iter().any(|m| &m.master.addr == new));
        let mut seen = HashSet::new();
        for m in masters {
            // Its health is news; its roles, older than the promotion,
            // are not.
            let roles = !self.predates_promotion(&m.master.addr);
            let every = std::iter::once((&m.master, Role::Master))
                .chain(m.replicas.iter().map(|r| (r, Role::Slave)));
            for (instance, role) in every {
                if instance.sdown {
                    self.sdown.insert(instance.addr.clone());
                }
                if instance.odown {
                    self.odown.insert(instance.addr.clone());
                }
                if roles {
                    Self::apply_role(dbs, &instance.addr, role, &mut log);
                }
                seen.insert(instance.addr.clone());
            }
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
#[path = "apply_tests.rs"]
mod tests;
