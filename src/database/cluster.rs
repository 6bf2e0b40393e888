//! One command on a cluster database: routed by the slot of its key,
//! following `MOVED` and `ASK` redirections (at most `max_cluster_hops`),
//! retried on failures and on `TRYAGAIN` / `CLUSTERDOWN` replies up to the
//! retry count, as the verdict on each attempt says (`verdict.rs`). The
//! standalone path (`standalone.rs`) never comes here.
use std::sync::Arc;
use std::time::Instant;

use super::discovery::Cluster;
use super::execution::Execution;
use super::lease::Lease;
use super::near::Replied;
use super::verdict::{decide, Answer, Hops, Mode, Next, Verdict};
use super::{Database, Note};
use crate::cluster::{HashSlot, Node, Redirection};
use crate::commands::{Effect, CROSSSLOT};
use crate::error::{Error, Result};
use crate::protocol::Reply;
use crate::routing::{self, rotation, Candidate};
use crate::server::Server;
use crate::stats::Counter;
use crate::topology::Topology;

const ASKING: &[u8] = b"*1\r\n$6\r\nASKING\r\n";
/// `MULTI`, packed: sent held back, before the command that decides the
/// node of the transaction.
const MULTI: &[u8] = b"*1\r\n$5\r\nMULTI\r\n";

impl Database {
    /// Runs `command` on the cluster node that serves its key (any node
    /// when it has none). See the module documentation.
    pub(super) fn execute_cluster(&self, cluster: &Cluster, x: &mut Execution) -> Result<Replied> {
        // A transaction's node is decided by its first command (see
        // `held_reply`): the task holds a `MULTI` not sent yet.
        let multi = x.task.session.in_multi();
        if let Some(reply) = held_reply(x.effect, multi) {
            self.stats.inc(Counter::CommandsTotal);
            x.task.session.after_reply(x.effect, &reply);
            return Ok((reply, None));
        }
        let result = self.execute_routed(cluster, x, multi);
        if multi && result.is_err() {
            // Not queued: the EXEC must not run the rest (Redis would
            // abort it too), and the MULTI may have gone with a
            // connection. Later commands fail until the task ends it.
            x.task.session.lose();
        }
        result
    }

    /// [`execute_cluster`](Self::execute_cluster) past the held
    /// transaction commands; `multi`: a `MULTI` is held, sent first.
    /// Carries out the verdict on each attempt (`verdict.rs`).
    fn execute_routed(&self, cluster: &Cluster, x: &mut Execution, multi: bool) -> Result<Replied> {
        // Scripts are writes for Redis Cluster: a replica would redirect
        // every one of them (the C VMOD forces master=true too). A
        // transaction runs on the master.
        let master_only = x.master || self.config.ignore_slaves || x.found.master_only() || multi;
        let slot = match self.slot_of(x, multi) {
            Ok(slot) => slot,
            Err(crossslot) => return Ok((crossslot, None)),
        };
        let max_hops = self.config.max_cluster_hops;
        let (topology, seen) = match self.topology_with_slots(cluster, x) {
            Ok(known) => known,
            Err(err) => {
                self.stats.inc(Counter::CommandsFailed);
                return Err(err);
            }
        };
        let mut route = Route {
            topology,
            seen,
            refreshed: false,
            multi,
            hops: 0,
            max_hops,
            failed: 0,
        };
        // A redirection's target, and whether it is an ASK.
        let mut target: Option<(Arc<Server>, bool)> = None;
        loop {
            let (server, asking) = match target.take() {
                Some(target) => target,
                None => self.node_for(&route.topology, slot, master_only, route.failed)?,
            };
            self.note_sending(x, slot, &server, asking);
            let mut outcome = self.cluster_attempt(x, &server, asking, multi);
            let verdict = route.verdict(self, x, &server, &outcome);
            if let (true, Ok((_, lease))) = (verdict.retire, &mut outcome) {
                lease.retire();
            }
            self.heed(x, &server, &verdict);
            route.failed += u32::from(verdict.uses_retry());
            let error = match (outcome, &verdict.next) {
                (Ok((reply, lease)), Next::Done) => {
                    return Ok(self.settle(x, reply, lease, &server))
                }
                (Err(err), Next::GiveUp) => Some(err),
                // Its lease goes back first.
                _ => None,
            };
            if verdict.refresh {
                route.refresh(self, cluster, x);
            }
            if let Some(err) = error {
                return Err(err);
            }
            match verdict.next {
                Next::TooManyRedirections { last } => {
                    return Err(Error::TooManyRedirections {
                        max: max_hops,
                        last,
                    })
                }
                Next::Follow(redirection) => {
                    route.hops += 1;
                    target = Some(self.redirected(redirection)?);
                }
                Next::SameServer => target = Some((server, asking)),
                // Routed again, for the retry.
                Next::Reroute | Next::PassOver | Next::Done | Next::GiveUp => {}
            }
        }
    }

    fn note_sending(
        &self,
        x: &mut Execution,
        slot: Option<HashSlot>,
        server: &Server,
        asking: bool,
    ) {
        if self.config.debug {
            let slot = slot.map_or("no key".to_string(), |slot| format!("slot {slot}"));
            let ask = if asking { " after ASKING" } else { "" };
            x.note(Note::Debug(&format!(
                "sending {} ({slot}) to {}{ask}",
                x.command.logged_name(),
                server.location()
            )));
        }
    }

    /// The slot of all the command's keys (`None`: it has none). Keys in
    /// different slots get Redis's own error, without a round trip
    /// (counted as a reply, an error): `Err`, that reply. As the first
    /// command of a held transaction, it goes to any master with the
    /// MULTI instead: Redis refuses it there and flags the transaction,
    /// so the EXEC gets Redis's EXECABORT, as with any client.
    fn slot_of(&self, x: &Execution, multi: bool) -> Result<Option<HashSlot>, Reply> {
        match x.found.slot(x.command) {
            Ok(slot) => Ok(slot),
            Err(_) if multi => Ok(None),
            Err(_) => {
                self.stats.inc(Counter::CommandsTotal);
                self.stats.inc(Counter::CommandsError);
                Err(Reply::Error(CROSSSLOT.into()))
            }
        }
    }

    /// The node of a command on `slot` for the attempt after `failed`
    /// ones ([`route`]), not after an ASK.
    fn node_for(
        &self,
        topology: &Topology,
        slot: Option<HashSlot>,
        master_only: bool,
        failed: u32,
    ) -> Result<(Arc<Server>, bool)> {
        match route(topology, slot, master_only, failed) {
            Some(server) => Ok((server, false)),
            None => {
                self.stats.inc(Counter::CommandsFailed);
                Err(Error::NoServer {
                    role: "cluster node",
                })
            }
        }
    }

    /// The node a redirection names, and whether it is an `ASK`.
    fn redirected(&self, redirection: Redirection) -> Result<(Arc<Server>, bool)> {
        let (to, ask) = match redirection {
            Redirection::Moved { to, .. } => (to, false),
            Redirection::Ask { to, .. } => (to, true),
        };
        match self.cluster_node(&to) {
            Some(node) => Ok((node, ask)),
            None => {
                self.stats.inc(Counter::CommandsFailed);
                Err(Error::NoServer {
                    role: "cluster node",
                })
            }
        }
    }

    /// One attempt on `server` (a replica's connection comes with
    /// `READONLY` sent: `Server::prepare`): `ASKING` first after an `ASK` (then the
    /// command as is: `EVALSHA` then `EVAL` would need a second `ASKING`).
    /// `multi`: `MULTI` first (after `ASKING`, which lasts through a
    /// transaction), on an ordinary connection, which the task keeps.
    fn cluster_attempt<'a>(
        &'a self,
        x: &mut Execution,
        server: &'a Arc<Server>,
        asking: bool,
        multi: bool,
    ) -> Result<(Reply, Lease<'a>)> {
        // With [ext] `pipelining=true`, `ASKING` and its command take an
        // ordinary pooled connection: on a multiplexed one another
        // worker's command could be written between them, and the
        // `ASKING` would let that one in instead. `ASK` only comes during
        // a migration, rarely enough not to be worth a way to queue two
        // requests as one in the multiplexer.
        let shares = !asking && !multi && x.found.shares(x.command);
        let mut lease = self.lease(server, shares, x.deadline, x.timeout)?;
        if asking {
            self.request(&mut lease, server, ASKING, x.request_timeout())?;
        }
        if multi {
            if let Reply::Error(text) =
                self.request(&mut lease, server, MULTI, x.request_timeout())?
            {
                return Err(Error::MultiRefused {
                    server: server.location().to_string(),
                    reply: text,
                });
            }
        }
        let reply = if asking {
            let timeout = x.request_timeout();
            self.request(&mut lease, server, x.command.packed(), timeout)?
        } else {
            self.send(&mut lease, server, x, multi)?
        };
        Ok((reply, lease))
    }
}

/// Where a cluster command stands between its attempts.
struct Route {
    /// The topology it routes on, with its slot map, and the generation
    /// the map is at least.
    topology: Arc<Topology>,
    seen: u64,
    /// The map was read again for this command: one discovery per
    /// command at most (a MOVED on each hop must not mean a discovery on
    /// each hop).
    refreshed: bool,
    /// A `MULTI` is held, sent first on each attempt's connection.
    multi: bool,
    /// Redirections followed, and the most it may follow.
    hops: u32,
    max_hops: u32,
    /// Retries used.
    failed: u32,
}

impl Route {
    /// The verdict on an attempt on `server` that gave `outcome`.
    fn verdict(
        &self,
        db: &Database,
        x: &Execution,
        server: &Server,
        outcome: &Result<(Reply, Lease<'_>)>,
    ) -> Verdict {
        let answer = match outcome {
            Ok((reply, _)) => Answer::Reply(reply),
            Err(err) => Answer::Failed(err),
        };
        let agrees = |redirection: &Redirection| map_agrees_with(&self.topology, redirection);
        let hops = Hops {
            multi: self.multi,
            hops: self.hops,
            max_hops: self.max_hops,
            refreshed: self.refreshed,
            map_agrees: &agrees,
        };
        decide(
            &answer,
            &db.attempt_state(x, server, Mode::Cluster(hops), self.failed),
        )
    }

    /// The map read again (unless a discovery runs or ran since `seen`),
    /// routed on from now.
    fn refresh(&mut self, db: &Database, cluster: &Cluster, x: &mut Execution) {
        self.refreshed = true;
        db.refresh_slots(cluster, self.seen, x);
        self.seen = cluster.generation();
        self.topology = db.topology();
    }
}

/// The reply to a transaction command that is not sent, as Redis would
/// give it. A `MULTI` has no key to choose a node by: it is held back
/// (`OK`, the task's session in the transaction, no connection kept),
/// and sent first on the node of the next command, by its key, or any
/// master for a keyless one (`multi` then: one is held). An `EXEC` or
/// `DISCARD` right after it has nothing to end on any node.
fn held_reply(effect: Effect, multi: bool) -> Option<Reply> {
    match (effect, multi) {
        (Effect::Multi, false) | (Effect::Discard, true) => Some(Reply::Status("OK".into())),
        (Effect::Exec, true) => Some(Reply::Array(Vec::new())),
        _ => None,
    }
}

/// Whether `topology`'s map already says what `redirection` says: a
/// `MOVED` to where the map puts the slot, an `ASK` to a node it names.
fn map_agrees_with(topology: &Topology, redirection: &Redirection) -> bool {
    match redirection {
        Redirection::Moved { slot, to } => map_agrees(topology, *slot, to),
        Redirection::Ask { to, .. } => map_names(topology, to),
    }
}

/// Whether `topology`'s map has `slot` on the master at `node`.
fn map_agrees(topology: &Topology, slot: HashSlot, node: &Node) -> bool {
    let shard = topology.slots.as_ref().and_then(|map| map.shard_of(slot));
    let master = shard.and_then(|shard| topology.servers.get(shard.master));
    master.is_some_and(|master| node.as_ref() == Ok(master.location()))
}

/// Whether `topology`'s map names `node`, in any shard and role.
fn map_names(topology: &Topology, node: &Node) -> bool {
    let Some(slots) = &topology.slots else {
        return false;
    };
    slots.nodes().any(|&index| {
        let server = topology.servers.get(index);
        server.is_some_and(|server| node.as_ref() == Ok(server.location()))
    })
}

/// The node for a command on `slot` (`None`: no key) on attempt `attempt`
/// (0 first): the master of the slot's shard, or for reads its replicas
/// first (by health and subnet weight, as a standalone plan); without a
/// key or a map, any node but those of shards that serve no slot yet.
fn route(
    topology: &Topology,
    slot: Option<HashSlot>,
    master_only: bool,
    attempt: u32,
) -> Option<Arc<Server>> {
    let servers = &topology.servers;
    let shard = slot.and_then(|slot| topology.slots.as_ref()?.shard_of(slot));
    let indexes: Vec<usize> = match shard {
        Some(shard) if master_only => return servers.get(shard.master).cloned(),
        Some(shard) => shard
            .replicas
            .iter()
            .chain(std::iter::once(&shard.master))
            .copied()
            .filter(|&index| index < servers.len())
            .collect(),
        None => {
            let idle: Vec<usize> = match &topology.slots {
                Some(map) => map.idle_nodes().copied().collect(),
                None => Vec::new(),
            };
            (0..servers.len())
                .filter(|index| !idle.contains(index))
                .collect()
        }
    };
    let now = Instant::now();
    let candidates: Vec<Candidate> = indexes
        .iter()
        .map(|&index| {
            let server = &servers[index];
            Candidate {
                weight: server.weight,
                role: server.role(),
                sick: server.health.is_sick(now),
            }
        })
        .collect();
    let plan = routing::plan(&candidates, master_only, rotation());
    let chosen = plan.get(attempt as usize % plan.len().max(1))?;
    servers.get(indexes[*chosen]).cloned()
}

#[cfg(test)]
mod tests;
