//! One `execute()` as its attempts see it: the command and what was
//! decided for it once (model entry, timeouts, deadline, the task's
//! connection), handed along the executors (`standalone.rs`, `cluster.rs`,
//! `pinned.rs`), the sending (`send.rs`) and discovery.
use std::time::{Duration, Instant};

use super::lease::TaskConnection;
use super::{within, Note};
use crate::commands::{Effect, Found};
use crate::protocol::Command;

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
    /// [ext] A near-cache fill waits for the reply: `Database::settle`
    /// (`execute.rs`) learns where it was read, on its lease (`near.rs`).
    pub(super) fills: bool,
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
