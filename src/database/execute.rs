//! One command along the execution plan: attempts, retries, roles
//! learnt on the way, and where the connection goes afterwards.
use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::hold::Waited;
use super::lease::{Lease, Pinned, TaskConnection};
use super::{within, Database, Note};
use crate::commands::{Effect, Found, WAITS_FOREVER};
use crate::config::{Location, Role};
use crate::connection::RequestError;
use crate::error::{Error, Result, Retry, ServerError};
use crate::near_cache::Pledge;
use crate::protocol::Reply;
use crate::protocol::{Command, MAX_COMMAND_BYTES};
use crate::routing::{self, rotation, Candidate, Candidates};
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

/// One `execute()`: its command and what was decided for it once, handed
/// along the attempts (standalone, pinned, cluster, discovery).
pub(super) struct Execution<'x> {
    pub(super) command: &'x mut Command,
    /// The command in the model: every decision about it.
    pub(super) found: Found<'static>,
    pub(super) effect: Effect,
    /// `.execute(master)`.
    pub(super) master: bool,
    /// Of each request: the command's, else the database's (`None`: none).
    pub(super) timeout: Option<Duration>,
    pub(super) retries: u32,
    /// When the whole execution must be over (`None`: no bound).
    pub(super) deadline: Option<Instant>,
    pub(super) task: &'x mut TaskConnection,
    /// Routing and connection decisions for `debug=true`, and warnings.
    pub(super) debug: &'x mut dyn FnMut(Note),
    /// [ext] A near-cache fill waits for this reply: [`Database::settle`]
    /// notes what it needs (`near.rs`).
    pub(super) served: Option<Served>,
}

/// [ext] What a near-cache fill learnt of the reply it waits for, on the
/// read's lease (`near.rs`: `Database::near_served`).
#[derive(Default)]
pub(super) struct Served {
    /// The promise of the server that gave it, as it held when it came
    /// (`None`: it did not, or the connection reached another server).
    pub(super) pledge: Option<Pledge>,
    pub(super) master: bool,
    /// Cluster: the slot of the command's keys.
    pub(super) slot: Option<u16>,
    /// When the first of its keys (or fields) expires; `None`: unknown,
    /// so not kept.
    pub(super) expires: Option<Option<Instant>>,
}

impl Execution<'_> {
    /// The timeout of one request, ending by the deadline.
    pub(super) fn request_timeout(&self) -> Option<Duration> {
        within(self.timeout, self.deadline)
    }

    pub(super) fn note(&mut self, note: Note) {
        (self.debug)(note);
    }
}

impl Database {
    /// When one `execute()` must be over: `(connection_timeout +
    /// command_timeout) x (1 + retries)` from now when both timeouts are
    /// set, else no bound (a worker waits for a pooled connection as long
    /// as it takes, as in the C VMOD). A bound past what the clock can
    /// hold (VCL values of centuries) is no bound either: never a panic.
    pub(super) fn deadline(&self, timeout: Option<Duration>, retries: u32) -> Option<Instant> {
        let per_attempt = self.config.connection_timeout?.saturating_add(timeout?);
        Instant::now().checked_add(per_attempt.saturating_mul(retries.saturating_add(1)))
    }

    /// Runs `command` for the task that holds `task` and returns its reply
    /// (error replies included), trying the servers of the execution plan
    /// in order: a failed attempt (connection, I/O, timeout) is retried on
    /// the next one, up to the retry count, except on a connection the
    /// task's transaction pinned. `debug` receives routing and connection
    /// decisions when the object has `debug=true`.
    pub fn execute(
        &self,
        command: &mut Command,
        master: bool,
        task: &mut TaskConnection,
        debug: &mut dyn FnMut(Note),
    ) -> Result<Reply> {
        let timeout = command
            .timeout
            .or(self.config.command_timeout)
            .filter(|timeout| !timeout.is_zero());
        let retries = command.retries.unwrap_or(self.config.max_command_retries);
        if let Err(size) = command.check_size() {
            self.stats.inc(Counter::CommandsFailed);
            return Err(Error::CommandTooLarge {
                size,
                limit: MAX_COMMAND_BYTES,
            });
        }
        let deadline = self.deadline(timeout, retries);
        let mut found = self.commands.find(command);
        // Not in the model (a newer server's command, a module's): the
        // server's own table says what it is, read once per server
        // process, bounded as one request of the command (500 ms with no
        // timeout at all) so that its attempts keep their time. Not while
        // the task holds a connection: in a pool of one, that would wait
        // for itself.
        if found.unknown() && task.pinned.is_none() {
            let bound = within(timeout, deadline).unwrap_or(super::PROBE_STEP_CAP);
            self.learn_commands(Instant::now().checked_add(bound));
            found = self.commands.find(command);
        }
        let effect = found.effect();
        let refused = match effect {
            Effect::Refused(reason) => Err(Error::Refused { reason }),
            _ if timeout.is_none() && found.waits_forever(command) => Err(Error::Refused {
                reason: WAITS_FOREVER,
            }),
            _ => task.session.admit(effect).map_err(Error::Lost),
        };
        if let Err(err) = refused {
            self.stats.inc(Counter::CommandsFailed);
            return Err(err);
        }
        let in_multi = task.session.in_multi();
        let x = &mut Execution {
            command,
            found,
            effect,
            master,
            timeout,
            retries,
            deadline,
            task,
            debug,
            served: None,
        };
        // [ext] A reply the near cache keeps is served with no round trip.
        let fill = match self.near_lookup(x) {
            ControlFlow::Break(reply) => return Ok(reply),
            ControlFlow::Continue(fill) => fill,
        };
        let result = if let Some(pinned) = x.task.pinned.take() {
            self.execute_pinned(x, pinned)
        } else if let Some(cluster) = &self.cluster {
            self.execute_cluster(cluster, x)
        } else {
            self.execute_standalone(x)
        };
        self.near_after(x, fill, &result, in_multi);
        result
    }

    /// Along the execution plan of the (standalone) servers.
    fn execute_standalone(&self, x: &mut Execution) -> Result<Reply> {
        if x.master && self.hold.is_on() {
            self.wait_for_failover(x)?;
        }
        let master_only = x.master || self.config.ignore_slaves;
        let topology = self.topology();
        // For debug lines only (no allocation otherwise).
        let name = if self.config.debug {
            x.command.logged_name()
        } else {
            String::new()
        };
        let plan_now = |x: &mut Execution| {
            let now = Instant::now();
            let candidates: Candidates = topology
                .servers
                .iter()
                .map(|server| Candidate {
                    weight: server.weight,
                    role: server.role(),
                    sick: server.health.is_sick(now),
                })
                .collect();
            let plan = routing::plan(&candidates, master_only, rotation());
            if self.config.debug {
                let locations: Vec<&Location> =
                    topology.servers.iter().map(|s| s.location()).collect();
                let text = routing::describe(&name, master_only, &locations, &candidates, &plan);
                x.note(Note::Debug(&text));
            }
            plan
        };
        let mut plan = plan_now(x);
        let mut replanned = false;
        let no_server = || Error::NoServer {
            role: if master_only {
                "master"
            } else {
                "master or replica"
            },
        };
        let mut failed: u32 = 0;
        // Candidates found to be replicas when a master is needed: passed
        // over from then on, without using up a retry.
        let mut not_masters: Vec<usize> = Vec::new();
        let mut position = 0;
        loop {
            if not_masters.len() == plan.len() {
                // Every candidate turned out to be a replica: roles were
                // stale (a failover), and the new master may have been
                // left out of this plan as a replica. Once more, on the
                // roles just learnt.
                if replanned || not_masters.is_empty() {
                    self.stats.inc(Counter::CommandsFailed);
                    return Err(no_server());
                }
                replanned = true;
                not_masters.clear();
                plan = plan_now(x);
                position = 0;
                continue;
            }
            // Past the end of the plan (more retries than servers), round
            // again from its start.
            let index = plan[position % plan.len()];
            position += 1;
            if not_masters.contains(&index) {
                continue;
            }
            let server = &topology.servers[index];
            if self.config.debug {
                x.note(Note::Debug(&format!(
                    "sending {} to {}",
                    x.command.logged_name(),
                    server.location()
                )));
            }
            let outcome = self.attempt(x, server, master_only);
            match outcome {
                Ok(Outcome::Reply(reply, lease)) => {
                    match ServerError::of_reply(&reply).map(ServerError::retry) {
                        Some(Retry::RolesChanged) => {
                            self.roles_changed(server, x);
                            if master_only
                                && failed < x.retries
                                && self.not_run_on_a_replica(x, &reply)
                            {
                                // A demoted master refused the write (its
                                // `FAILOVER` swap, say): not run, so sent
                                // to the master found next, within the
                                // retry count as `LOADING` (without
                                // retries, the error is the reply, as in
                                // the C VMOD).
                                drop(lease);
                                failed += 1;
                                self.stats.inc(Counter::CommandsTotal);
                                self.stats.inc(Counter::CommandsRetried);
                                if self.config.debug {
                                    let text = format!(
                                        "{} replied READONLY; sending to the master found next",
                                        server.location(),
                                    );
                                    x.note(Note::Debug(&text));
                                }
                                not_masters.push(index);
                                continue;
                            }
                        }
                        Some(Retry::Again)
                            if failed < x.retries && !self.may_have_run(x, &reply) =>
                        {
                            // Not run (LOADING): the next candidate may serve it.
                            drop(lease);
                            failed += 1;
                            // A reply, if not the one the command ends with.
                            self.stats.inc(Counter::CommandsTotal);
                            self.stats.inc(Counter::CommandsRetried);
                            if let (true, Reply::Error(text)) = (self.config.debug, &reply) {
                                let text = format!(
                                    "{} replied {text}; retrying on the next candidate",
                                    server.location(),
                                );
                                x.note(Note::Debug(&text));
                            }
                            continue;
                        }
                        _ => {}
                    }
                    return Ok(self.settle(x, reply, lease, server));
                }
                Ok(Outcome::NotAMaster) => {
                    if self.config.debug {
                        x.note(Note::Debug(&format!(
                            "skipping {}: ROLE says it is a replica, a master is needed",
                            server.location()
                        )));
                    }
                    not_masters.push(index);
                }
                Err(err) if failed < x.retries => {
                    self.stats.inc(Counter::CommandsFailed);
                    if self.config.debug {
                        let text = format!(
                            "attempt {} failed ({err}); retrying on the next candidate",
                            failed + 1
                        );
                        x.note(Note::Debug(&text));
                    }
                    failed += 1;
                    self.stats.inc(Counter::CommandsRetried);
                }
                Err(err) => {
                    self.stats.inc(Counter::CommandsFailed);
                    return Err(err);
                }
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

    /// A `READONLY` reply: the server is a replica, which ran nothing.
    /// Not for a script, whose own `redis.error_reply('READONLY ...')`
    /// may come after writes (as for `LOADING`, [`Self::may_have_run`]).
    fn not_run_on_a_replica(&self, x: &Execution, reply: &Reply) -> bool {
        ServerError::of_reply(reply) == Some(ServerError::ReadOnly) && !x.found.runs_script()
    }

    /// A `LOADING` reply to a script or function may be the script's own
    /// (`redis.error_reply('LOADING ...')`), sent after it ran: retrying it
    /// would run the script again. The server's own `LOADING` comes
    /// before anything runs.
    pub(super) fn may_have_run(&self, x: &Execution, reply: &Reply) -> bool {
        ServerError::of_reply(reply) == Some(ServerError::Loading) && x.found.runs_script()
    }

    /// A reply said `server` is not what routing thought: a failover
    /// happened. Every `type=auto` server is asked its role again before
    /// its next command, so the promoted replica is found too.
    fn roles_changed(&self, server: &Server, x: &mut Execution) {
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
        server: &'a Server,
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

    /// A command of a task that keeps a connection. No retry: another
    /// connection would run it outside the task's transaction (or without
    /// the state it set), so a failure closes the connection and loses
    /// them.
    fn execute_pinned(&self, x: &mut Execution, pinned: Pinned) -> Result<Reply> {
        let server = pinned.server.clone();
        if self.config.debug {
            let text = format!(
                "sending {} to {} on the connection this task keeps",
                x.command.logged_name(),
                server.location()
            );
            x.note(Note::Debug(&text));
        }
        let mut lease = pinned.into_lease();
        if x.master && self.failed_over_under_task(x, &server) {
            // Closed, not sent: the server drops what the task queued or
            // watched there, and the write is never acknowledged by a
            // master Sentinel is replacing (lost once it turns replica).
            // Not held either: the transaction cannot move to the new
            // master.
            lease.retire();
            x.task.session.lose();
            // This command ends what was lost (`EXEC`, `DISCARD`...):
            // nothing is left for the next ones to fail on.
            let _ = x.task.session.admit(x.effect);
            self.stats.inc(Counter::CommandsFailed);
            return Err(Error::FailedOverUnderTask {
                master: server.location().to_string(),
            });
        }
        let in_multi = x.task.session.in_multi();
        match self.send(&mut lease, &server, x, in_multi) {
            Ok(reply) => Ok(self.settle(x, reply, lease, &server)),
            Err(err) => {
                // Failed requests leave the connection broken; make sure
                // nothing left on it can reach another task.
                lease.retire();
                x.task.session.lose();
                self.stats.inc(Counter::CommandsFailed);
                Err(err)
            }
        }
    }

    /// Whether the master a task's kept connection goes to is being
    /// replaced (a failover hold is on for it) or was (Sentinel calls it
    /// a replica now): a `master=true` command must not run there.
    /// `DISCARD`, `UNWATCH` and `RESET`, which only drop what is there,
    /// still go.
    fn failed_over_under_task(&self, x: &Execution, server: &Server) -> bool {
        !matches!(x.effect, Effect::Discard | Effect::Unwatch | Effect::Reset)
            && (server.is_replica_for_sentinel() || self.hold.holds(server.location()))
    }

    /// Counts a reply and decides where its connection goes: kept by the
    /// task while what it left there matters, closed after `QUIT`, else
    /// released.
    pub(super) fn settle(
        &self,
        x: &mut Execution,
        reply: Reply,
        mut lease: Lease<'_>,
        server: &Arc<Server>,
    ) -> Reply {
        self.near_served(x, &reply, &mut lease, server);
        let (effect, task) = (x.effect, &mut *x.task);
        // As in the C VMOD: `total` counts sends that got a reply (here
        // the last; a redirection or a retried `TRYAGAIN` / `LOADING` was
        // counted when it came), `failed` every attempt that got none.
        self.stats.inc(Counter::CommandsTotal);
        if matches!(reply, Reply::Error(_)) {
            self.stats.inc(Counter::CommandsError);
        }
        // In a cluster, a connection kept for the task would take its
        // commands for every slot to one node: one that a command in no
        // table may have changed is closed after the reply instead
        // (whatever it changed goes with it). In a transaction it is kept,
        // as the transaction's connection is.
        let close_unknown = effect == Effect::Unknown
            && self.cluster.is_some()
            && !task.session.in_multi()
            && !matches!(reply, Reply::Error(_));
        if !close_unknown {
            task.session.after_reply(effect, &reply);
        }
        if effect == Effect::Quit || close_unknown {
            // Closed by the server (QUIT), or as just said: not a failure,
            // nor a connection to reuse.
            lease.retire();
            self.stats.inc(Counter::DroppedState);
        } else if task.session.owns_state() {
            task.pinned = lease.pin(server.clone(), &self.stats);
        }
        reply
    }

    /// Sends the command of `x` on `lease`: an `EVAL` as `EVALSHA` first, unless
    /// `in_multi`, where the `NOSCRIPT` would only come with the `EXEC`.
    /// Each request ends by `deadline`.
    pub(super) fn send(
        &self,
        lease: &mut Lease<'_>,
        server: &Server,
        x: &mut Execution,
        in_multi: bool,
    ) -> Result<Reply> {
        let evalsha = if in_multi {
            None
        } else {
            x.command.packed_as_evalsha()
        };
        match evalsha {
            Some(evalsha) => match self.request(lease, server, &evalsha, x.request_timeout())? {
                Reply::Error(text) if ServerError::of(&text).retry() == Retry::AsScript => {
                    self.stats.inc(Counter::CommandsNoscript);
                    let timeout = x.request_timeout();
                    self.request(lease, server, x.command.packed(), timeout)
                }
                reply => Ok(reply),
            },
            None => {
                let timeout = x.request_timeout();
                self.request(lease, server, x.command.packed(), timeout)
            }
        }
    }

    /// One request on `lease`, turning transport failures into counted,
    /// logged errors (and the server sick when it went away).
    pub(super) fn request(
        &self,
        lease: &mut Lease<'_>,
        server: &Server,
        packed: &[u8],
        timeout: Option<Duration>,
    ) -> Result<Reply> {
        // Left out of step by the previous request of this attempt (ROLE,
        // or EVALSHA before EVAL): counted then.
        let was_broken = lease.is_broken();
        let result = lease.request(packed, timeout);
        if result.is_ok() && lease.is_broken() {
            // A reply followed by bytes nobody asked for: the connection
            // is out of step and dropped after this command.
            self.stats.inc(Counter::DroppedError);
        }
        match result {
            Ok(reply) => Ok(reply),
            Err(RequestError::Connect(err)) => Err(err),
            Err(RequestError::Failed(failure)) => Err(server.failed(failure, was_broken, timeout)),
            Err(RequestError::Collateral(failure)) => Err(server.failed(failure, true, timeout)),
        }
    }
}
