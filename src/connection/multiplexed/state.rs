//! What the workers share under the multiplexer's lock: the connection
//! while idle, the requests queued for the next batch, and those written
//! and owed a reply, with the rule that keeps every reply with its own
//! request.
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use super::fence::{FenceReply, FenceToken, Fences};
use super::opening::Pending;
use super::waiter::Waiter;
use crate::connection::{Connection, Failure};
use crate::protocol::resp::ProtocolError;
use crate::protocol::Reply;
use crate::stats::{Counter, Stats};

#[derive(Default)]
pub(super) struct State {
    /// The connection while no driver holds it; `None` with `driving`
    /// false: none is open.
    pub(super) conn: Option<Connection>,
    /// A worker is writing and reading (it holds `conn`), or has been
    /// handed the driving and is waking up.
    pub(super) driving: bool,
    /// Requests queued and not written yet, their bytes in order.
    pub(super) unsent: Vec<u8>,
    /// Their waiters, each with the length of its bytes in `unsent`.
    pub(super) unsent_waiters: Vec<(Arc<Waiter>, usize)>,
    /// What was written and is not answered yet, in order: each batch of
    /// requests, then its fence (`PING <token>`).
    ///
    /// The rule that keeps every reply with its own request:
    /// - A reply read is *held* by the request at its place (the first
    ///   `held` requests have theirs) and handed to no one until the
    ///   fence of its batch has come back as itself, in its own place:
    ///   then every reply before it is in step, and they are released.
    ///   A command that gives no reply, or several, moves the replies
    ///   after it by one: the fence's place then gets another reply (or
    ///   none), and no held reply is ever released.
    /// - Each fence has its own token, unguessable from the earlier ones
    ///   (see [`FenceToken`]): no command can give back the fence of its
    ///   own batch.
    /// - When the fence's place gets a reply that is not the fence's, the
    ///   connection is closed and every request here fails: none gets a
    ///   reply.
    /// - Deadlines are each request's own: a request whose deadline
    ///   passes is abandoned (its worker returns a timeout) and its reply,
    ///   when it comes, is read in its place and dropped. The driver reads
    ///   until its own deadline, then passes the driving to the oldest
    ///   worker still waiting. Only when no worker is left waiting while
    ///   replies are still owed is the connection closed. So a command
    ///   that never replies costs only the requests that wait behind it,
    ///   each until its own deadline (and the fence then catches the
    ///   stream out of step); it never costs a reply to the wrong request.
    pub(super) in_flight: VecDeque<InFlight>,
    /// How many requests at the front of `in_flight` hold their reply.
    pub(super) held: usize,
    /// [ext] The server the open connection reached (its `run_id`), given
    /// with each reply read on it. A copy of the connection's `Prepared`
    /// identity (`Multiplexed::prepared`), taken at checkout, so that
    /// routing a reply takes no second lock.
    pub(super) identity: Option<Arc<str>>,
    /// The tokens of this multiplexer's fences.
    pub(super) fences: Fences,
    /// A connection being opened, or opened and not yet taken by a
    /// driver (`opening.rs`); `conn` is `None` meanwhile.
    pub(super) opening: Option<Pending>,
    /// The last deadline of the requests written since nothing was owed on
    /// the connection: a batch's write must be over by then (see
    /// `take_batch`). Kept as requests are written, not searched for in
    /// `in_flight` under the lock at each batch; one that left meanwhile
    /// had a deadline already past, below every live one.
    pub(super) written_until: Until,
    /// Replies (fences too) read on this multiplexer's connections: a
    /// request that times out while they kept coming, or soon after it was
    /// written, was not failed by the server ([`Waiter::late_only`]).
    pub(super) replies: u64,
}

/// The last of some deadlines.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) enum Until {
    /// None yet.
    #[default]
    Nothing,
    By(Instant),
    /// One has none.
    Never,
}

impl Until {
    /// The last of these and `deadline` (none: never).
    fn and(self, deadline: Option<Instant>) -> Until {
        match (self, deadline) {
            (Until::Never, _) | (_, None) => Until::Never,
            (Until::Nothing, Some(by)) => Until::By(by),
            (Until::By(last), Some(by)) => Until::By(last.max(by)),
        }
    }

    /// As a write's deadline (`None`: no bound).
    fn instant(self) -> Option<Instant> {
        match self {
            Until::By(by) => Some(by),
            Until::Nothing | Until::Never => None,
        }
    }
}

pub(super) enum InFlight {
    Request(Arc<Waiter>),
    /// Written after a batch of requests: its reply, in its place, says
    /// that the replies before it are theirs.
    Fence(FenceToken),
}

/// One reply read on the connection.
pub(super) enum Read {
    Reply(Reply),
    Fence(FenceReply),
}

impl State {
    /// Moves the queued requests in flight, a fence after them, and
    /// returns their bytes (empty: nothing to write). A request abandoned,
    /// or past its deadline, leaves here unwritten (marked abandoned: its
    /// worker returns its own timeout): it touches neither the connection
    /// nor anyone else's request.
    ///
    /// With the batch, when its write must be over: the last deadline of
    /// the requests on the connection, this batch's and those written
    /// before (`None`: one has none; `written_until`). A write cut short fails them all
    /// (half a request is on the stream), so none of their deadlines, and
    /// not the driver's, may end it while another still has time: a
    /// driver whose short deadline passed while it waited for the CPU
    /// once failed every request of the batch, each with seconds left.
    pub(super) fn take_batch(&mut self, stats: &Stats) -> (Vec<u8>, Option<Instant>) {
        let mut batch = std::mem::take(&mut self.unsent);
        let mut waiters = std::mem::take(&mut self.unsent_waiters);
        let now = Instant::now();
        if waiters.iter().any(|(waiter, _)| !waiter.live_at(now)) {
            let mut live = Vec::with_capacity(batch.len());
            let mut at = 0;
            for (waiter, len) in &waiters {
                if waiter.live_at(now) {
                    live.extend_from_slice(&batch[at..at + len]);
                } else {
                    waiter.abandon();
                }
                at += len;
            }
            waiters.retain(|(waiter, _)| !waiter.abandoned());
            batch = live;
        }
        if waiters.is_empty() {
            batch.clear();
            return (batch, None);
        }
        self.written_until = waiters
            .iter()
            .fold(self.written_until, |until, (waiter, _)| {
                until.and(waiter.deadline)
            });
        let write_by = self.written_until.instant();
        stats.inc(Counter::PipelineBatches);
        stats.add(Counter::PipelineCommands, waiters.len() as u64);
        stats.inc(Counter::batch_size(waiters.len()));
        let replies = self.replies;
        self.in_flight
            .extend(waiters.into_iter().map(|(waiter, _)| {
                waiter.set_written(replies, now);
                InFlight::Request(waiter)
            }));
        let fence = self.fences.next();
        self.in_flight.push_back(InFlight::Fence(fence));
        fence.pack_into(&mut batch);
        (batch, write_by)
    }

    /// Gives a written batch's buffer back, to be reused.
    pub(super) fn reuse(&mut self, mut batch: Vec<u8>) {
        if self.unsent.is_empty() && self.unsent.capacity() < batch.capacity() {
            batch.clear();
            self.unsent = batch;
        }
    }

    /// The fence whose reply is read next, if it is a fence's.
    pub(super) fn fence_next(&self) -> Option<FenceToken> {
        match self.in_flight.get(self.held) {
            Some(InFlight::Fence(fence)) => Some(*fence),
            _ => None,
        }
    }

    /// Puts one reply in its place (see `in_flight`). A fence that came
    /// back as itself moves the requests of its batch, holding their
    /// replies, to `released` (woken by the caller once it unlocked: each
    /// wake-up is a system call, and the woken would wait for the lock);
    /// true when `mine` is among them.
    pub(super) fn route(
        &mut self,
        read: Read,
        mine: &Arc<Waiter>,
        released: &mut Vec<Arc<Waiter>>,
    ) -> Result<bool, Failure> {
        self.replies += 1;
        match read {
            Read::Reply(reply) => match self.in_flight.get(self.held) {
                Some(InFlight::Request(waiter)) => {
                    waiter.hold(reply, self.identity.as_ref());
                    self.held += 1;
                    Ok(false)
                }
                _ => Err(ProtocolError::Malformed("a reply where none was expected").into()),
            },
            Read::Fence(FenceReply::Itself) => {
                let mut released_mine = false;
                for entry in self.in_flight.drain(..=self.held) {
                    if let InFlight::Request(waiter) = entry {
                        released_mine |= Arc::ptr_eq(&waiter, mine);
                        waiter.set_ready();
                        released.push(waiter);
                    }
                }
                self.held = 0;
                if self.in_flight.is_empty() {
                    self.written_until = Until::Nothing;
                }
                Ok(released_mine)
            }
            Read::Fence(FenceReply::Refused) => Err(ProtocolError::Malformed(
                "the server refused PING, which pipelining=true needs after each batch \
                 (grant it to the user, or set pipelining=false)",
            )
            .into()),
            Read::Fence(FenceReply::Other) => Err(ProtocolError::Malformed(
                "replies out of step with the requests (a command gave no reply, or \
                 several): the pipelined connection was closed",
            )
            .into()),
        }
    }

    /// Nothing is owed on the connection any more (it is closed, or only
    /// abandoned requests were left).
    pub(super) fn forget_in_flight(&mut self) {
        self.in_flight.clear();
        self.held = 0;
        self.written_until = Until::Nothing;
    }

    /// The requests written and owed a reply, in order.
    pub(super) fn written(&self) -> impl Iterator<Item = &Arc<Waiter>> {
        self.in_flight.iter().filter_map(|entry| match entry {
            InFlight::Request(waiter) => Some(waiter),
            InFlight::Fence(_) => None,
        })
    }
}
