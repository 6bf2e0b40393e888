//! One command, top to bottom ([`Database::execute`]): checked, found in
//! the command model, admitted by the task's session, looked up in the
//! near cache (`near.rs`), run on the connection the task keeps
//! (`pinned.rs`), on the cluster (`cluster.rs`) or on the standalone
//! servers (`standalone.rs`, `plan.rs`), each attempt sent over a lease
//! (`send.rs`) and followed by its verdict (`verdict.rs`); then settled
//! (counted, its connection kept or released) and the near cache filled.
use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::execution::Execution;
use super::lease::{Lease, TaskConnection};
use super::near::Replied;
use super::verdict::{Attempt, Mode, Verdict};
use super::{within, Database, Note};
use crate::commands::{Effect, Found, WAITS_FOREVER};
use crate::error::{Error, Result};
use crate::protocol::Reply;
use crate::protocol::{Command, MAX_COMMAND_BYTES};
use crate::server::Server;
use crate::stats::Counter;

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
        let (timeout, retries, deadline) = self.check(command)?;
        let found = self.find(command, task, timeout, deadline);
        let effect = self.admit(command, found, timeout, task)?;
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
            fills: false,
        };
        // [ext] A reply the near cache keeps is served with no round trip.
        let fill = match self.near_lookup(x) {
            ControlFlow::Break(reply) => return Ok(reply),
            ControlFlow::Continue(fill) => fill,
        };
        x.fills = fill.is_some();
        let replied = self.run(x);
        self.near_after(x, fill, replied, in_multi)
    }

    /// The command's request timeout, retries and deadline, once its size
    /// is within the limit.
    fn check(&self, command: &Command) -> Result<(Option<Duration>, u32, Option<Instant>)> {
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
        Ok((timeout, retries, self.deadline(timeout, retries)))
    }

    /// The command in the model. Not in it (a newer server's command, a
    /// module's): the server's own table says what it is, read once per
    /// server process, bounded as one request of the command (500 ms with
    /// no timeout at all) so that its attempts keep their time. Not while
    /// the task holds a connection: in a pool of one, that would wait for
    /// itself.
    fn find(
        &self,
        command: &Command,
        task: &TaskConnection,
        timeout: Option<Duration>,
        deadline: Option<Instant>,
    ) -> Found<'static> {
        let found = self.commands.find(command);
        if !found.unknown() || task.pinned.is_some() {
            return found;
        }
        let bound = within(timeout, deadline).unwrap_or(super::PROBE_STEP_CAP);
        self.learn_commands(Instant::now().checked_add(bound));
        self.commands.find(command)
    }

    /// The command's effect, once the model and the task's session let it
    /// go: refused (blocking with no timeout, ...), or after a lost
    /// transaction, it fails unsent.
    fn admit(
        &self,
        command: &Command,
        found: Found<'static>,
        timeout: Option<Duration>,
        task: &mut TaskConnection,
    ) -> Result<Effect> {
        let effect = found.effect();
        let admitted = match effect {
            Effect::Refused(reason) => Err(Error::Refused { reason }),
            _ if timeout.is_none() && found.waits_forever(command) => Err(Error::Refused {
                reason: WAITS_FOREVER,
            }),
            _ => task.session.admit(effect).map_err(Error::Lost),
        };
        if admitted.is_err() {
            self.stats.inc(Counter::CommandsFailed);
        }
        admitted.map(|()| effect)
    }

    /// On the connection the task keeps, else on the cluster or the
    /// standalone servers.
    fn run(&self, x: &mut Execution) -> Result<Replied> {
        if let Some(pinned) = x.task.pinned.take() {
            self.execute_pinned(x, pinned)
        } else if let Some(cluster) = &self.cluster {
            self.execute_cluster(cluster, x)
        } else {
            self.execute_standalone(x)
        }
    }

    /// Where `x` stands after an attempt on `server`, for its verdict.
    pub(super) fn attempt_state<'a>(
        &self,
        x: &Execution,
        server: &'a Server,
        mode: Mode<'a>,
        failed: u32,
    ) -> Attempt<'a> {
        Attempt {
            mode,
            server: server.location(),
            failed,
            retries: x.retries,
            runs_script: x.found.runs_script(),
            debug: self.config.debug,
        }
    }

    /// What a verdict asks besides where the command goes next: its
    /// counters, every role asked again, its debug line.
    pub(super) fn heed(&self, x: &mut Execution, server: &Server, verdict: &Verdict) {
        for &counter in verdict.counts {
            self.stats.inc(counter);
        }
        if verdict.ask_roles {
            self.roles_changed(server, x);
        }
        if let Some(text) = &verdict.note {
            x.note(Note::Debug(text));
        }
    }

    /// Counts a reply and decides where its connection goes: kept by the
    /// task while what it left there matters, closed after `QUIT`, else
    /// released. [ext] A near-cache fill learns first where it was read.
    pub(super) fn settle(
        &self,
        x: &mut Execution,
        reply: Reply,
        mut lease: Lease<'_>,
        server: &Arc<Server>,
    ) -> Replied {
        let served = match x.fills {
            true => self.near_served(x, &reply, &mut lease, server),
            false => None,
        };
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
        (reply, served)
    }
}
