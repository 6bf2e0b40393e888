//! Which standalone server a command tries next: the execution plan
//! ([`crate::routing::plan`]) over the topology's servers, walked in
//! order (round again past its end when there are more retries than
//! servers), passing over those found to be replicas when a master is
//! needed, and planned once more when every candidate was.
use super::execution::Execution;
use super::{Database, Note};
use crate::config::Location;
use crate::routing::{self, rotation, Candidate, Candidates};
use crate::topology::Topology;

pub(super) struct Plan<'a> {
    db: &'a Database,
    topology: &'a Topology,
    master_only: bool,
    /// The command's name, for debug lines only (empty otherwise: no
    /// allocation).
    name: String,
    /// Indexes of `topology.servers`, in the order to try them.
    order: routing::Plan,
    /// Where the walk is in `order`.
    position: usize,
    /// Candidates found to be replicas when a master is needed: passed
    /// over from then on, without using up a retry.
    passed_over: Vec<usize>,
    replanned: bool,
}

impl<'a> Plan<'a> {
    pub(super) fn new(
        db: &'a Database,
        topology: &'a Topology,
        master_only: bool,
        x: &mut Execution,
    ) -> Plan<'a> {
        let name = if db.config.debug {
            x.command.logged_name()
        } else {
            String::new()
        };
        let mut plan = Plan {
            db,
            topology,
            master_only,
            name,
            order: routing::Plan::new(),
            position: 0,
            passed_over: Vec::new(),
            replanned: false,
        };
        plan.order = plan.now(x);
        plan
    }

    /// The plan on the servers' health and roles as they are now.
    fn now(&self, x: &mut Execution) -> routing::Plan {
        let now = std::time::Instant::now();
        let candidates: Candidates = self
            .topology
            .servers
            .iter()
            .map(|server| Candidate {
                weight: server.weight,
                role: server.role(),
                sick: server.health.is_sick(now),
            })
            .collect();
        let order = routing::plan(&candidates, self.master_only, rotation());
        if self.db.config.debug {
            let locations: Vec<&Location> =
                self.topology.servers.iter().map(|s| s.location()).collect();
            let text = routing::describe(
                &self.name,
                self.master_only,
                &locations,
                &candidates,
                &order,
            );
            x.note(Note::Debug(&text));
        }
        order
    }

    /// The index of the server to try next; `None`: there is none.
    pub(super) fn next(&mut self, x: &mut Execution) -> Option<usize> {
        loop {
            if self.passed_over.len() == self.order.len() {
                // Every candidate turned out to be a replica: roles were
                // stale (a failover), and the new master may have been
                // left out of this plan as a replica. Once more, on the
                // roles just learnt.
                if self.replanned || self.passed_over.is_empty() {
                    return None;
                }
                self.replanned = true;
                self.passed_over.clear();
                self.order = self.now(x);
                self.position = 0;
                continue;
            }
            // Past the end of the plan (more retries than servers), round
            // again from its start.
            let index = self.order[self.position % self.order.len()];
            self.position += 1;
            if !self.passed_over.contains(&index) {
                return Some(index);
            }
        }
    }

    /// The server at `index` is a replica, and a master is needed.
    pub(super) fn pass_over(&mut self, index: usize) {
        self.passed_over.push(index);
    }
}
