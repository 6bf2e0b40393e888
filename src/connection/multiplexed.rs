//! [ext] `pipelining=true`: one connection carries the commands of many
//! workers at once.
//!
//! Varnish workers are blocking threads, so there is no I/O thread and no
//! async runtime: the first worker to find the connection idle becomes its
//! *driver*. It writes every request queued so far in one write, then reads
//! replies in order and hands each to the worker that sent the request
//! (the replies come back in the order the requests were written). When its
//! own reply has come, it passes the driving to the oldest worker still
//! waiting and returns; a worker that arrives meanwhile only queues its
//! request and sleeps until its reply (or the driving) is handed to it.
//! Many workers' requests thus cost one write and as few reads as the
//! kernel needs, in varnishd and in Redis.
//!
//! A reply never reaches another request, whatever the commands do, and
//! one request's deadline costs no other request its reply: see
//! [`State::in_flight`] for the rule (a fence after every batch; a request
//! past its deadline is abandoned, its reply read and dropped). A waiting
//! worker stops at its deadline and marks its request abandoned; a driver
//! that reaches its own deadline passes the driving to the oldest worker
//! still waiting; when nobody is left waiting while replies are owed, the
//! connection is closed. A fence that comes back wrong, or a failed read
//! or write, fails every request written on the connection at once;
//! requests queued and not written yet go to a new connection.
use std::collections::VecDeque;
use std::fmt;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::{self, Thread};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::{Connection, Failure, Limit, ManageConnection, Prepared, RequestError};
use crate::protocol::resp::ProtocolError;
use crate::protocol::Reply;
use crate::stats::{Counter, Stats};

/// One connection shared by many workers, and the requests on it.
#[derive(Default)]
pub(crate) struct Multiplexed {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// The connection while no driver holds it; `None` with `driving`
    /// false: none is open.
    conn: Option<Connection>,
    /// A worker is writing and reading (it holds `conn`), or has been
    /// handed the driving and is waking up.
    driving: bool,
    /// Requests queued and not written yet, their bytes in order.
    unsent: Vec<u8>,
    /// Their waiters, each with the length of its bytes in `unsent`.
    unsent_waiters: Vec<(Arc<Waiter>, usize)>,
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
    in_flight: VecDeque<InFlight>,
    /// How many requests at the front of `in_flight` hold their reply.
    held: usize,
    /// What the open connection was prepared as, taken when it was
    /// checked out; `ROLE` asked through this multiplexer is recorded
    /// here. [ext] Its identity (`run_id`) goes with each reply read on it.
    prepared: Prepared,
    /// This multiplexer's fences (see [`FenceToken`]): which stream of
    /// tokens (0: none drawn yet), and how many were made.
    fence_stream: u64,
    fences: u64,
}

enum InFlight {
    Request(Arc<Waiter>),
    /// Written after a batch of requests: its reply, in its place, says
    /// that the replies before it are theirs.
    Fence(FenceToken),
}

/// The argument of one fence, `PING <token>`: 128 bits of a keyed hash
/// (SipHash, keyed from the OS's random source once per process) of a
/// stream drawn per multiplexer and a counter. A VCL can read earlier
/// tokens (`SLOWLOG GET`, `CLIENT LIST`), not the key: the token of the
/// fence after its own command is not known when that command is written,
/// so no command (`ECHO`) can give it back in the fence's place.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct FenceToken([u8; FENCE_TOKEN_LEN]);

const FENCE_PREFIX: &[u8; 17] = b"vmod-redis-fence-";
const FENCE_TOKEN_LEN: usize = FENCE_PREFIX.len() + 32;
/// `PING` and the length of its argument, the token: packed as `Command`
/// would.
const FENCE_REQUEST_HEAD: &[u8] = b"*2\r\n$4\r\nPING\r\n$49\r\n";
/// The reply to the fence: the token as a bulk string (RESP2 and 3).
const FENCE_REPLY_HEAD: &[u8] = b"$49\r\n";

impl FenceToken {
    /// The `stream`'s `n`th token.
    fn new(stream: u64, n: u64) -> FenceToken {
        use std::hash::BuildHasher;
        static KEY: OnceLock<std::collections::hash_map::RandomState> = OnceLock::new();
        let key = KEY.get_or_init(std::collections::hash_map::RandomState::new);
        let mut token = [0; FENCE_TOKEN_LEN];
        token[..FENCE_PREFIX.len()].copy_from_slice(FENCE_PREFIX);
        let digits = token[FENCE_PREFIX.len()..].chunks_exact_mut(16);
        for (half, digits) in (0u8..).zip(digits) {
            let mut word = key.hash_one((stream, n, half));
            for digit in digits.iter_mut().rev() {
                *digit = b"0123456789abcdef"[(word & 0xf) as usize];
                word >>= 4;
            }
        }
        FenceToken(token)
    }

    /// Appends the fence request, `PING <token>`.
    fn pack_into(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(FENCE_REQUEST_HEAD);
        out.extend_from_slice(&self.0);
        out.extend_from_slice(b"\r\n");
    }

    /// Whether `reply` (a whole RESP value) is this fence's own reply.
    fn answered_by(&self, reply: &[u8]) -> bool {
        reply.len() == FENCE_REPLY_HEAD.len() + FENCE_TOKEN_LEN + 2
            && reply.starts_with(FENCE_REPLY_HEAD)
            && reply[FENCE_REPLY_HEAD.len()..].starts_with(&self.0)
            && reply.ends_with(b"\r\n")
    }
}

/// Streams of fence tokens, one per multiplexer: never the same twice.
static FENCE_STREAMS: AtomicU64 = AtomicU64::new(1);

/// What came back in a fence's place.
enum FenceReply {
    Itself,
    /// An error reply: the server refused the `PING` (an ACL without it).
    Refused,
    /// Another reply: the stream is out of step.
    Other,
}

/// What one waiting request gets.
struct Waiter {
    thread: Thread,
    /// When its worker stops waiting (none: never).
    deadline: Option<Instant>,
    /// Written by the driver; taken by the worker once `ready`.
    result: Mutex<Option<Result<Reply, Failure>>>,
    /// The server that gave the reply (its connection's identity).
    identity: Mutex<Option<Arc<str>>>,
    /// The result may be taken: released after its fence, or a failure.
    ready: AtomicBool,
    /// The worker is to drive next (set under the state lock).
    drive: AtomicBool,
    /// The worker stopped waiting (set under the state lock): its reply
    /// is dropped, and the driving is never handed to it.
    abandoned: AtomicBool,
}

impl Waiter {
    fn new(deadline: Option<Instant>) -> Arc<Waiter> {
        Arc::new(Waiter {
            thread: thread::current(),
            deadline,
            result: Mutex::new(None),
            identity: Mutex::new(None),
            ready: AtomicBool::new(false),
            drive: AtomicBool::new(false),
            abandoned: AtomicBool::new(false),
        })
    }

    fn abandoned(&self) -> bool {
        self.abandoned.load(Ordering::Relaxed)
    }

    /// Keeps a reply, not visible to the worker until released.
    fn hold(&self, reply: Reply, identity: Option<&Arc<str>>) {
        if !self.abandoned() {
            *self.identity.lock() = identity.cloned();
            *self.result.lock() = Some(Ok(reply));
        }
    }

    fn release(&self) {
        self.ready.store(true, Ordering::Release);
        self.thread.unpark();
    }

    /// A failure, visible at once (it replaces a held reply).
    fn fail(&self, failure: Failure) {
        if !self.abandoned() {
            *self.result.lock() = Some(Err(failure));
            self.release();
        }
    }

    fn take(&self) -> Option<Result<Reply, Failure>> {
        if self.ready.load(Ordering::Acquire) {
            self.result.lock().take()
        } else {
            None
        }
    }
}

/// How the worker that drives gets the connection when nothing is in
/// flight on it: its request's bounds for the server's manager.
struct Checkout<'m, E> {
    manager: &'m dyn ManageConnection<Error = E>,
    /// The end of the whole command, for opening a connection.
    open_by: Option<Instant>,
    /// The request's timeout, for preparing one.
    timeout: Option<Duration>,
}

/// The same failure for every request the connection took down with it.
fn copy(failure: &Failure) -> Failure {
    let io = |err: &io::Error| io::Error::new(err.kind(), err.to_string());
    match failure {
        Failure::HungUp(err) => Failure::HungUp(io(err)),
        Failure::Timeout => Failure::Timeout,
        Failure::Io(err) => Failure::Io(io(err)),
        Failure::Protocol(err) => Failure::Protocol(err.clone()),
    }
}

impl State {
    /// The token of the next fence written.
    fn next_fence(&mut self) -> FenceToken {
        if self.fence_stream == 0 {
            self.fence_stream = FENCE_STREAMS.fetch_add(1, Ordering::Relaxed);
        }
        self.fences += 1;
        FenceToken::new(self.fence_stream, self.fences)
    }

    /// Moves the queued requests in flight, a fence after them, and
    /// returns their bytes (empty: nothing to write). Requests abandoned
    /// before they were written are not written at all.
    /// With the batch, when its write must be over: the last deadline of
    /// its requests (`None`: one has none). Not the driver's own: a driver
    /// whose short deadline passed while it waited for the CPU would fail
    /// every request of the batch, each with seconds left.
    fn take_batch(&mut self, stats: &Stats) -> (Vec<u8>, Option<Instant>) {
        let mut batch = std::mem::take(&mut self.unsent);
        let mut waiters = std::mem::take(&mut self.unsent_waiters);
        if waiters.iter().any(|(waiter, _)| waiter.abandoned()) {
            let mut live = Vec::with_capacity(batch.len());
            let mut at = 0;
            for (waiter, len) in &waiters {
                if !waiter.abandoned() {
                    live.extend_from_slice(&batch[at..at + len]);
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
        let write_by = waiters
            .iter()
            .map(|(waiter, _)| waiter.deadline)
            .try_fold(None, |last: Option<Instant>, deadline| {
                deadline.map(|deadline| Some(last.map_or(deadline, |last| last.max(deadline))))
            })
            .flatten();
        stats.inc(Counter::PipelineBatches);
        stats.add(Counter::PipelineCommands, waiters.len() as u64);
        stats.inc(Counter::batch_size(waiters.len()));
        self.in_flight.extend(
            waiters
                .into_iter()
                .map(|(waiter, _)| InFlight::Request(waiter)),
        );
        let fence = self.next_fence();
        self.in_flight.push_back(InFlight::Fence(fence));
        fence.pack_into(&mut batch);
        (batch, write_by)
    }

    /// Gives a written batch's buffer back, to be reused.
    fn reuse(&mut self, mut batch: Vec<u8>) {
        if self.unsent.is_empty() && self.unsent.capacity() < batch.capacity() {
            batch.clear();
            self.unsent = batch;
        }
    }

    /// The fence whose reply is read next, if it is a fence's.
    fn fence_next(&self) -> Option<FenceToken> {
        match self.in_flight.get(self.held) {
            Some(InFlight::Fence(fence)) => Some(*fence),
            _ => None,
        }
    }

    /// Puts one reply in its place (see `in_flight`); true when `mine`
    /// was released by it.
    fn route(&mut self, read: Read, mine: &Arc<Waiter>) -> Result<bool, Failure> {
        match read {
            Read::Reply(reply) => match self.in_flight.get(self.held) {
                Some(InFlight::Request(waiter)) => {
                    waiter.hold(reply, self.prepared.identity());
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
                        waiter.release();
                    }
                }
                self.held = 0;
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
}

/// One reply read on the connection.
enum Read {
    Reply(Reply),
    Fence(FenceReply),
}

fn read_next(
    conn: &mut Connection,
    fence_next: Option<FenceToken>,
    limit: Limit,
) -> Result<Read, Failure> {
    if let Some(fence) = fence_next {
        conn.read_raw_reply(limit, |bytes| {
            if fence.answered_by(bytes) {
                FenceReply::Itself
            } else if bytes.first() == Some(&b'-') {
                FenceReply::Refused
            } else {
                FenceReply::Other
            }
        })
        .map(Read::Fence)
    } else {
        conn.read_reply(limit).map(Read::Reply)
    }
}

impl Multiplexed {
    /// What the open connection was prepared as, read and recorded by
    /// its server's preparation (`ROLE`).
    pub(crate) fn with_prepared<R>(&self, f: impl FnOnce(&mut Prepared) -> R) -> R {
        f(&mut self.state.lock().prepared)
    }

    /// Requests (written but unanswered, or queued) right now.
    pub(crate) fn in_flight(&self) -> usize {
        let state = self.state.lock();
        let written = state
            .in_flight
            .iter()
            .filter(|entry| matches!(entry, InFlight::Request(_)))
            .count();
        written + state.unsent_waiters.len()
    }

    /// Whether a connection is open (idle or in use).
    pub(crate) fn is_open(&self) -> bool {
        let state = self.state.lock();
        state.conn.is_some() || state.driving
    }

    /// Closes the connection if nobody uses it (VCL cold): 1 if it did.
    pub(crate) fn close_idle(&self) -> usize {
        let mut state = self.state.lock();
        usize::from(!state.driving && state.conn.take().is_some())
    }

    /// Sends one packed request and waits for its reply for `timeout`
    /// (none: as long as it takes). The worker that drives while nothing is
    /// in flight has `manager` check out the connection: the idle one if
    /// still usable, else a new one opened by `open_by`; prepared.
    ///
    /// With the reply, the identity of the server that answered (the
    /// `run_id` its connection found, [ext] `near_cache`).
    pub(crate) fn request<E: fmt::Display>(
        &self,
        packed: &[u8],
        timeout: Option<Duration>,
        open_by: Option<Instant>,
        manager: &dyn ManageConnection<Error = E>,
        stats: &Stats,
    ) -> Result<(Reply, Option<Arc<str>>), RequestError<E>> {
        let deadline = timeout.map(|timeout| Instant::now() + timeout);
        let checkout = Checkout {
            manager,
            open_by,
            timeout,
        };
        let waiter = Waiter::new(deadline);
        let reply = self.exchange(packed, &waiter, stats, &checkout)?;
        let identity = waiter.identity.lock().take();
        Ok((reply, identity))
    }

    /// Queues `packed` for `waiter`, then waits for its reply or drives.
    fn exchange<E: fmt::Display>(
        &self,
        packed: &[u8],
        waiter: &Arc<Waiter>,
        stats: &Stats,
        checkout: &Checkout<'_, E>,
    ) -> Result<Reply, RequestError<E>> {
        let deadline = waiter.deadline;
        {
            let mut state = self.state.lock();
            state.unsent.extend_from_slice(packed);
            state.unsent_waiters.push((waiter.clone(), packed.len()));
            if !state.driving {
                state.driving = true;
                drop(state);
                return self.drive(waiter, stats, checkout);
            }
        }
        loop {
            if let Some(result) = waiter.take() {
                return result.map_err(RequestError::Collateral);
            }
            if waiter.drive.load(Ordering::Acquire) {
                return self.drive(waiter, stats, checkout);
            }
            match deadline {
                None => thread::park(),
                Some(deadline) => {
                    let now = Instant::now();
                    if now < deadline {
                        thread::park_timeout(deadline - now);
                        continue;
                    }
                    let state = self.state.lock();
                    if let Some(result) = waiter.take() {
                        return result.map_err(RequestError::Collateral);
                    }
                    if waiter.drive.load(Ordering::Acquire) {
                        drop(state);
                        return self.drive(waiter, stats, checkout);
                    }
                    waiter.abandoned.store(true, Ordering::Relaxed);
                    return Err(RequestError::Collateral(Failure::Timeout));
                }
            }
        }
    }

    /// Writes what is queued and reads replies, putting each in its place,
    /// until `mine` has its reply; then passes the driving on.
    fn drive<E: fmt::Display>(
        &self,
        mine: &Arc<Waiter>,
        stats: &Stats,
        checkout: &Checkout<'_, E>,
    ) -> Result<Reply, RequestError<E>> {
        mine.drive.store(false, Ordering::Relaxed);
        let (idle, quiet) = {
            let mut state = self.state.lock();
            (state.conn.take(), state.in_flight.is_empty())
        };
        let idle_created = idle.as_ref().map(Connection::created);
        let checked_out = match idle {
            // Replies still owed: this connection, whatever its age.
            Some(conn) if !quiet => Ok(conn),
            idle => {
                let Checkout {
                    manager,
                    open_by,
                    timeout,
                } = checkout;
                manager.checkout(&mut idle.into_iter(), *open_by, *timeout)
            }
        };
        let mut conn = match checked_out {
            Ok(conn) => {
                if idle_created != Some(conn.created()) {
                    let mut state = self.state.lock();
                    state.prepared = conn.prepared().clone();
                }
                conn
            }
            Err(err) => {
                // The requests queued behind this one fail with it: the
                // next of them to be retried connects again.
                let mut state = self.state.lock();
                state.unsent.clear();
                for (waiter, _) in std::mem::take(&mut state.unsent_waiters) {
                    if !Arc::ptr_eq(&waiter, mine) {
                        let failure = io::Error::new(
                            io::ErrorKind::NotConnected,
                            format!("connecting failed: {err}"),
                        );
                        waiter.fail(Failure::Io(failure));
                    }
                }
                self.pass_driving(&mut state, None);
                return Err(RequestError::Connect(err));
            }
        };
        loop {
            let (batch, write_by) = self.state.lock().take_batch(stats);
            let written = if batch.is_empty() {
                Ok(())
            } else {
                // A write cut short leaves half a request on the stream: a
                // failure for every request, whatever its cause.
                conn.write_requests(&batch, Limit::by(write_by))
                    .map_err(|failure| match failure {
                        Failure::Timeout => Failure::Io(io::ErrorKind::TimedOut.into()),
                        failure => failure,
                    })
            };
            let mut state = self.state.lock();
            state.reuse(batch);
            if let Err(failure) = written {
                return Err(self.condemn(&mut state, mine, failure));
            }
            // Unlocked while reading, until this worker's own deadline
            // (the others' are theirs: see `in_flight`).
            let fence_next = state.fence_next();
            drop(state);
            let read = read_next(&mut conn, fence_next, Limit::by(mine.deadline));
            let mut state = self.state.lock();
            let routed = match read {
                Ok(read) => state.route(read, mine),
                Err(Failure::Timeout) => {
                    let due = mine.deadline.is_some_and(|due| due <= Instant::now());
                    if !due {
                        // Woken early (a partial TLS record stays in
                        // rustls, a partial reply in the buffer): read on.
                        Ok(false)
                    } else {
                        // This worker's own deadline: someone else reads
                        // on, with theirs.
                        mine.abandoned.store(true, Ordering::Relaxed);
                        if self.pass_driving(&mut state, Some(conn)) {
                            return Err(RequestError::Collateral(Failure::Timeout));
                        }
                        // Nobody else waits: the connection, which still
                        // owes this reply, was closed.
                        return Err(RequestError::Failed(Failure::Timeout));
                    }
                }
                Err(failure) => Err(failure),
            };
            match routed {
                Ok(false) => {}
                Ok(true) => {
                    // The replies already read for others are put in place
                    // before passing the driving on: each hand-off costs
                    // the next driver a wake-up. Only what is buffered: a
                    // limit already spent never waits (a buffered RESP3
                    // push may be all there is), and running out of
                    // buffered bytes is no failure: the next driver reads.
                    let now = Limit::by(Some(Instant::now()));
                    while conn.has_buffered_reply() && !state.in_flight.is_empty() {
                        let fence_next = state.fence_next();
                        let routed = match read_next(&mut conn, fence_next, now) {
                            Ok(read) => state.route(read, mine),
                            Err(Failure::Timeout) => break,
                            Err(failure) => Err(failure),
                        };
                        if let Err(failure) = routed {
                            // Its own reply was in step (its fence came
                            // back): only the later ones are lost.
                            self.condemn::<E>(&mut state, mine, failure);
                            drop(state);
                            return mine
                                .take()
                                .expect("a released waiter holds its reply")
                                .map_err(RequestError::Failed);
                        }
                    }
                    self.pass_driving(&mut state, Some(conn));
                    drop(state);
                    return mine
                        .take()
                        .expect("a released waiter holds its reply")
                        .map_err(RequestError::Failed);
                }
                Err(failure) => return Err(self.condemn(&mut state, mine, failure)),
            }
        }
    }

    /// Closes the connection (the caller drops it) after `failure`: every
    /// request written on it fails, held replies included; requests not
    /// written yet go to a new connection. Returns `mine`'s error.
    fn condemn<E>(
        &self,
        state: &mut State,
        mine: &Arc<Waiter>,
        failure: Failure,
    ) -> RequestError<E> {
        let mut mine_failed = None;
        let written = std::mem::take(&mut state.in_flight);
        let requests = written.into_iter().filter_map(|entry| match entry {
            InFlight::Request(waiter) => Some(waiter),
            InFlight::Fence(_) => None,
        });
        for waiter in requests {
            let theirs = copy(&failure);
            if Arc::ptr_eq(&waiter, mine) {
                mine_failed = Some(theirs);
            } else {
                waiter.fail(theirs);
            }
        }
        state.held = 0;
        self.pass_driving(state, None);
        RequestError::Failed(mine_failed.unwrap_or(failure))
    }

    /// Ends this worker's driving: the oldest worker still waiting drives
    /// next; with nobody waiting the connection goes back idle, unless it
    /// still owes replies to abandoned requests (closed then).
    /// Returns whether the connection stays open.
    fn pass_driving(&self, state: &mut State, conn: Option<Connection>) -> bool {
        let written = state.in_flight.iter().filter_map(|entry| match entry {
            InFlight::Request(waiter) => Some(waiter),
            InFlight::Fence(_) => None,
        });
        let next = written
            .chain(state.unsent_waiters.iter().map(|(waiter, _)| waiter))
            .find(|waiter| !waiter.abandoned())
            .cloned();
        match next {
            Some(next) => {
                let open = conn.is_some();
                state.conn = conn;
                next.drive.store(true, Ordering::Release);
                next.thread.unpark();
                open
            }
            None => {
                // Only abandoned requests, if any, are left: no reply on
                // this connection is wanted any more.
                let owes = !state.in_flight.is_empty();
                state.in_flight.clear();
                state.held = 0;
                state.unsent_waiters.clear();
                state.unsent.clear();
                state.conn = conn.filter(|_| !owes);
                state.driving = false;
                state.conn.is_some()
            }
        }
    }
}

#[cfg(test)]
mod tests;
