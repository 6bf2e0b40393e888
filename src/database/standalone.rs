//! One command on a standalone database (masters and replicas, with
//! or without Sentinel): along the execution plan (`plan.rs`), asking
//! a server its role when it must be known, carrying out the verdict on
//! each attempt (`verdict.rs`).
use std::sync::Arc;
use std::time::Instant;

use super::execution::Execution;
use super::hold::Waited;
use super::lease::Lease;
use super::near::Replied;
use super::plan::Plan;
use super::verdict::{decide, Answer, Mode, Next};
use super::{Database, Note};
use crate::config::Role;
use crate::error::{Error, Result};
use crate::protocol::Reply;
use crate::server::{RoleCheck, Server};
use crate::stats::Counter;

/// What one attempt on one server gave.
#[allow(
    clippy::large_enum_variant,
    reason = "moved once per attempt: boxing it would cost an allocation per command"
)]
enum Outcome<'a> {
    /// The reply, and the lease of the connection it came on.
    Reply(Reply, Lease<'a>),
    /// `ROLE` just said the server is a replica, and a master is needed:
    /// not a failure, the next candidate is tried.
    NotAMaster,
}

impl Database {
    /// Along the execution plan of the (standalone) servers (`plan.rs`),
    /// carrying out the verdict on each attempt (`verdict.rs`).
    pub(super) fn execute_standalone(&self, x: &mut Execution) -> Result<Replied> {
        if x.master && self.hold.is_on() {
            self.wait_for_failover(x)?;
        }
        let master_only = x.master || self.config.ignore_slaves;
        let topology = self.topology();
        let mut plan = Plan::new(self, &topology, master_only, x);
        let mut failed: u32 = 0;
        loop {
            let Some(index) = plan.next(x) else {
                self.stats.inc(Counter::CommandsFailed);
                let role = match master_only {
                    true => "master",
                    false => "master or replica",
                };
                return Err(Error::NoServer { role });
            };
            let server = &topology.servers[index];
            if self.config.debug {
                x.note(Note::Debug(&format!(
                    "sending {} to {}",
                    x.command.logged_name(),
                    server.location()
                )));
            }
            let outcome = self.attempt(x, server, master_only);
            let answer = match &outcome {
                Ok(Outcome::Reply(reply, _)) => Answer::Reply(reply),
                Ok(Outcome::NotAMaster) => Answer::NotAMaster,
                Err(err) => Answer::Failed(err),
            };
            let mode = Mode::Standalone { master_only };
            let verdict = decide(&answer, &self.attempt_state(x, server, mode, failed));
            self.heed(x, server, &verdict);
            failed += u32::from(verdict.uses_retry());
            match (outcome, verdict.next) {
                (Ok(Outcome::Reply(reply, lease)), Next::Done) => {
                    return Ok(self.settle(x, reply, lease, server))
                }
                (Err(err), Next::GiveUp) => return Err(err),
                (_, Next::PassOver) => plan.pass_over(index),
                // The next candidate (the only other verdict here).
                _ => {}
            }
        }
    }

    /// Sentinel is failing over a master of this database: the command
    /// waits for the promotion (then goes to the new master, on the roles
    /// Sentinel gave) or the abort, within its deadline, else within
    /// `command_timeout` of its own; past that it fails, never sent.
    fn wait_for_failover(&self, x: &mut Execution) -> Result<()> {
        let deadline = x
            .deadline
            .or_else(|| Instant::now().checked_add(x.timeout?));
        match self.hold.wait(deadline) {
            Waited::Free => Ok(()),
            Waited::Lifted(held) => {
                if self.config.debug {
                    let text = format!("held {} ms for a Sentinel failover", held.as_millis());
                    x.note(Note::Debug(&text));
                }
                Ok(())
            }
            Waited::Expired { master, held } => {
                self.stats.inc(Counter::CommandsFailed);
                Err(Error::FailoverHeld {
                    master: master.to_string(),
                    held_ms: held.as_millis(),
                })
            }
        }
    }

    /// A reply said `server` is not what routing thought: a failover
    /// happened. Every `type=auto` server is asked its role again before
    /// its next command, so the promoted replica is found too.
    pub(super) fn roles_changed(&self, server: &Server, x: &mut Execution) {
        if self.config.debug {
            x.note(Note::Debug(&format!(
                "{} changed role (a failover?): asking every role again",
                server.location()
            )));
        }
        for server in &self.topology().servers {
            server.forget_role();
        }
    }

    fn attempt<'a>(
        &'a self,
        x: &mut Execution,
        server: &'a Arc<Server>,
        master_only: bool,
    ) -> Result<Outcome<'a>> {
        let shares = x.found.shares(x.command);
        let mut lease = self.lease(server, shares, x.deadline, x.timeout)?;
        match self.check_role(&mut lease, server, x.request_timeout())? {
            Some(RoleCheck::Refused { text, first: true }) => {
                x.note(Note::Warning(&format!(
                    "ROLE refused by {} ({text}): taken as a master",
                    server.location()
                )));
            }
            Some(RoleCheck::Answered { role, changed }) => {
                if changed {
                    // A failover: the other servers' roles are stale too
                    // (the replica promoted, ...).
                    self.roles_changed(server, x);
                }
                if role == Role::Slave && master_only {
                    return Ok(Outcome::NotAMaster);
                }
            }
            _ => {}
        }
        let reply = self.send(&mut lease, server, x, false)?;
        Ok(Outcome::Reply(reply, lease))
    }
}
