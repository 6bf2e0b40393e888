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
//! Deadlines: a waiting worker stops at its deadline and marks its request
//! abandoned; its reply, when it comes, is read and dropped, so the stream
//! stays in step. A driver that reaches its deadline passes the driving on;
//! when nobody is left waiting, the connection (which may still owe
//! replies) is closed. A failed read or write fails every request on the
//! connection at once, and the next request opens a new one.
use std::collections::VecDeque;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{self, Thread};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::{Connection, Failure};
use crate::error::Error;
use crate::reply::Reply;
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
    unsent_slots: Vec<Arc<Slot>>,
    /// Requests written whose replies are not read yet, in order.
    in_flight: VecDeque<Arc<Slot>>,
    /// `ROLE` was asked on the open connection.
    role_asked: bool,
}

/// What one waiting request gets.
struct Slot {
    thread: Thread,
    /// Written by the driver, taken by the worker.
    result: Mutex<Option<Result<Reply, Failure>>>,
    /// The worker is to drive next (set under the state lock).
    drive: AtomicBool,
    /// The worker stopped waiting (set under the state lock): its reply
    /// is dropped, and the driving is never handed to it.
    abandoned: AtomicBool,
}

impl Slot {
    fn new() -> Arc<Slot> {
        Arc::new(Slot {
            thread: thread::current(),
            result: Mutex::new(None),
            drive: AtomicBool::new(false),
            abandoned: AtomicBool::new(false),
        })
    }

    fn deliver(&self, result: Result<Reply, Failure>) {
        if !self.abandoned.load(Ordering::Relaxed) {
            *self.result.lock() = Some(result);
            self.thread.unpark();
        }
    }

    fn take(&self) -> Option<Result<Reply, Failure>> {
        self.result.lock().take()
    }
}

/// Why a multiplexed request got no reply.
#[derive(Debug)]
pub(crate) enum MuxError {
    /// Opening the connection failed (the error of the connect).
    Connect(Error),
    /// This worker's own write or read failed, and the connection with
    /// it: count it as dropped.
    Failed(Failure),
    /// No reply, but the connection was not dropped by this worker: its
    /// wait ended at its deadline, or another worker's read failed.
    Collateral(Failure),
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

fn left(deadline: Option<Instant>) -> Option<Duration> {
    deadline.map(|deadline| {
        deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1))
    })
}

impl Multiplexed {
    /// Whether `ROLE` was asked on the open connection.
    pub(crate) fn role_asked(&self) -> bool {
        self.state.lock().role_asked
    }

    pub(crate) fn set_role_asked(&self) {
        self.state.lock().role_asked = true;
    }

    /// Requests (written but unanswered, or queued) right now.
    pub(crate) fn in_flight(&self) -> usize {
        let state = self.state.lock();
        state.in_flight.len() + state.unsent_slots.len()
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

    /// Sends one packed request and waits for its reply until `deadline`
    /// (none: as long as it takes). `refresh` gets the idle connection (or
    /// none) when nothing is in flight on it, and returns it if it is still
    /// good, else a new one; it runs on the worker that drives.
    pub(crate) fn request(
        &self,
        packed: &[u8],
        deadline: Option<Instant>,
        stats: &Stats,
        refresh: &mut dyn FnMut(Option<Connection>) -> Result<Connection, Error>,
    ) -> Result<Reply, MuxError> {
        let slot = Slot::new();
        {
            let mut state = self.state.lock();
            state.unsent.extend_from_slice(packed);
            state.unsent_slots.push(slot.clone());
            if !state.driving {
                state.driving = true;
                drop(state);
                return self.drive(&slot, deadline, stats, refresh);
            }
        }
        loop {
            if let Some(result) = slot.take() {
                return result.map_err(MuxError::Collateral);
            }
            if slot.drive.load(Ordering::Acquire) {
                return self.drive(&slot, deadline, stats, refresh);
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
                    if let Some(result) = slot.take() {
                        return result.map_err(MuxError::Collateral);
                    }
                    if slot.drive.load(Ordering::Acquire) {
                        drop(state);
                        return self.drive(&slot, deadline.into(), stats, refresh);
                    }
                    slot.abandoned.store(true, Ordering::Relaxed);
                    return Err(MuxError::Collateral(Failure::Timeout));
                }
            }
        }
    }

    /// Writes what is queued and reads replies, handing each to its
    /// worker, until `mine` has its reply; then passes the driving on.
    fn drive(
        &self,
        mine: &Arc<Slot>,
        deadline: Option<Instant>,
        stats: &Stats,
        refresh: &mut dyn FnMut(Option<Connection>) -> Result<Connection, Error>,
    ) -> Result<Reply, MuxError> {
        mine.drive.store(false, Ordering::Relaxed);
        let (idle, quiet) = {
            let mut state = self.state.lock();
            (state.conn.take(), state.in_flight.is_empty())
        };
        let idle_created = idle.as_ref().map(Connection::created);
        let refreshed = match idle {
            // Replies still owed: this connection, whatever its age.
            Some(conn) if !quiet => Ok(conn),
            idle => refresh(idle),
        };
        let mut conn = match refreshed {
            Ok(conn) => {
                if idle_created != Some(conn.created()) {
                    self.state.lock().role_asked = false;
                }
                conn
            }
            Err(err) => {
                // The requests queued behind this one fail with it: the
                // next of them to be retried connects again.
                let mut state = self.state.lock();
                state.unsent.clear();
                for slot in std::mem::take(&mut state.unsent_slots) {
                    if !Arc::ptr_eq(&slot, mine) {
                        let failure = io::Error::new(
                            io::ErrorKind::NotConnected,
                            format!("connecting failed: {err}"),
                        );
                        slot.deliver(Err(Failure::Io(failure)));
                    }
                }
                self.pass_driving(&mut state, None);
                return Err(MuxError::Connect(err));
            }
        };
        // No reply is ever handed to the driver's own slot: replies go to
        // slots popped from the queue, and a driver's slot is in it until
        // the driver itself reads its reply.
        loop {
            let batch = {
                let mut state = self.state.lock();
                let slots = std::mem::take(&mut state.unsent_slots);
                if !slots.is_empty() {
                    stats.inc(Counter::PipelineBatches);
                    stats.add(Counter::PipelineCommands, slots.len() as u64);
                    stats.inc(Counter::batch_size(slots.len()));
                }
                state.in_flight.extend(slots);
                std::mem::take(&mut state.unsent)
            };
            let written = if batch.is_empty() {
                Ok(())
            } else {
                // A write cut short leaves half a request on the stream: a
                // failure for every request, whatever its cause.
                conn.write_requests(&batch, left(deadline))
                    .map_err(|failure| match failure {
                        Failure::Timeout => Failure::Io(io::ErrorKind::TimedOut.into()),
                        failure => failure,
                    })
            };
            let read = written.and_then(|()| conn.read_reply(left(deadline)));
            let mut state = self.state.lock();
            if state.unsent.is_empty() && state.unsent.capacity() < batch.capacity() {
                // Keep the larger buffer for the next batch.
                state.unsent = batch;
                state.unsent.clear();
            }
            match read {
                Ok(reply) => {
                    let slot = state
                        .in_flight
                        .pop_front()
                        .expect("a reply answers a request in flight");
                    if Arc::ptr_eq(&slot, mine) {
                        drop(state);
                        // The replies already read for others are handed
                        // out before passing the driving on: each hand-off
                        // costs the next driver a wake-up.
                        while conn.has_buffered_reply() {
                            let Ok(reply) = conn.read_reply(Some(Duration::from_millis(1))) else {
                                break;
                            };
                            let next = self.state.lock().in_flight.pop_front();
                            if let Some(next) = next {
                                next.deliver(Ok(reply));
                            }
                        }
                        self.pass_driving(&mut self.state.lock(), Some(conn));
                        return Ok(reply);
                    }
                    slot.deliver(Ok(reply));
                }
                Err(Failure::Timeout) => {
                    // This worker's deadline: someone else reads on, with
                    // theirs.
                    mine.abandoned.store(true, Ordering::Relaxed);
                    if self.pass_driving(&mut state, Some(conn)) {
                        return Err(MuxError::Collateral(Failure::Timeout));
                    }
                    // Nobody else waits: the connection, which still owes
                    // this reply, was closed.
                    return Err(MuxError::Failed(Failure::Timeout));
                }
                Err(failure) => {
                    let unsent = std::mem::take(&mut state.unsent_slots);
                    for slot in state.in_flight.drain(..).chain(unsent) {
                        if !Arc::ptr_eq(&slot, mine) {
                            slot.deliver(Err(copy(&failure)));
                        }
                    }
                    state.unsent.clear();
                    self.pass_driving(&mut state, None);
                    return Err(MuxError::Failed(failure));
                }
            }
        }
    }

    /// Ends this worker's driving: the oldest worker still waiting drives
    /// next; with nobody waiting the connection goes back idle, unless it
    /// still owes replies to abandoned requests (closed then).
    /// Returns whether the connection stays open.
    fn pass_driving(&self, state: &mut State, conn: Option<Connection>) -> bool {
        let next = state
            .in_flight
            .iter()
            .chain(&state.unsent_slots)
            .find(|slot| !slot.abandoned.load(Ordering::Relaxed))
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
                state.unsent_slots.clear();
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
