//! The transaction pin: a command of a task that keeps a connection
//! (`MULTI` / `WATCH` to `EXEC`, or a changed state: [`Pinned`]) goes
//! there, with no plan and no retry: another connection would run it
//! outside the task's transaction (or without the state it set), so a
//! failure closes the connection and loses them (`verdict.rs`).
use super::execution::Execution;
use super::lease::Pinned;
use super::near::Replied;
use super::verdict::{decide, Answer, Mode};
use super::{Database, Note};
use crate::commands::Effect;
use crate::error::{Error, Result};
use crate::server::Server;
use crate::stats::Counter;

impl Database {
    /// Runs the command of `x` on the connection `pinned` of its task.
    pub(super) fn execute_pinned(&self, x: &mut Execution, pinned: Pinned) -> Result<Replied> {
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
        let outcome = self.send(&mut lease, &server, x, in_multi);
        let answer = match &outcome {
            Ok(reply) => Answer::Reply(reply),
            Err(err) => Answer::Failed(err),
        };
        let verdict = decide(&answer, &self.attempt_state(x, &server, Mode::Pinned, 0));
        if verdict.retire {
            // Failed requests leave the connection broken; make sure
            // nothing left on it can reach another task.
            lease.retire();
        }
        self.heed(x, &server, &verdict);
        match outcome {
            Ok(reply) => Ok(self.settle(x, reply, lease, &server)),
            Err(err) => {
                x.task.session.lose();
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
}
