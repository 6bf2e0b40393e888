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
//! connection is closed. A request whose deadline passed before it was
//! written is not written at all, and a batch's write is bounded by the
//! last deadline of the live requests on the connection. A fence that
//! comes back wrong, or a failed read or write, fails every request
//! written on the connection at once (one that broke the protocol is not
//! retried: the commands ran); requests queued and not written yet go to
//! a new connection. That one is opened on a thread of its own, within
//! the connection's bounds, not the driving worker's deadline.
//!
//! The parts: [`fence`] (the token after each batch), [`waiter`] (one
//! worker's request and how it is woken), [`state`] (what the workers
//! share, and the rule that keeps every reply with its request),
//! [`driver`] (writing, reading, deadlines, passing the driving on),
//! [`opening`] (a new connection, opened apart from any request).
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::{ManageConnection, Prepared, RequestError};
use crate::protocol::Reply;
use crate::stats::Stats;
use driver::Checkout;
use state::State;
use waiter::Waiter;

mod driver;
mod fence;
mod opening;
mod state;
mod waiter;

/// A reply, and the identity of the server that gave it.
pub(crate) type Identified = (Reply, Option<Arc<str>>);

/// One connection shared by many workers, and the requests on it.
#[derive(Default)]
pub(crate) struct Multiplexed {
    state: Mutex<State>,
    /// What the open connection was prepared as (`ROLE` asked through
    /// this multiplexer is recorded here): read before every command, so
    /// not under the state lock, which the driver holds while it puts
    /// replies in place.
    prepared: Mutex<Prepared>,
}

impl Multiplexed {
    /// What the open connection was prepared as, read and recorded by
    /// its server's preparation (`ROLE`).
    pub(crate) fn with_prepared<R>(&self, f: impl FnOnce(&mut Prepared) -> R) -> R {
        f(&mut self.prepared.lock())
    }

    /// Requests (written but unanswered, or queued) right now.
    pub(crate) fn in_flight(&self) -> usize {
        let state = self.state.lock();
        state.written().count() + state.unsent_waiters.len()
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
    /// still usable, else a new one opened on a thread of its own, its
    /// handshake and preparation within `open_timeout` (the connection's,
    /// not this request's: `opening.rs`).
    ///
    /// With the reply, the identity of the server that answered (the
    /// `run_id` its connection found, [ext] `near_cache`).
    pub(crate) fn request<M>(
        &self,
        packed: &[u8],
        timeout: Option<Duration>,
        open_timeout: Option<Duration>,
        manager: &Arc<M>,
        stats: &Stats,
    ) -> Result<Identified, RequestError<M::Error>>
    where
        M: ManageConnection + Send + Sync + 'static,
        M::Error: Send + 'static,
    {
        let deadline = timeout.map(|timeout| Instant::now() + timeout);
        let checkout = Checkout {
            manager,
            timeout,
            open_timeout,
        };
        let waiter = Waiter::new(deadline);
        let reply = self.exchange(packed, &waiter, stats, &checkout)?;
        let identity = waiter.identity.lock().take();
        Ok((reply, identity))
    }

    /// Queues `packed` for `waiter`, then waits for its reply or drives.
    fn exchange<M>(
        &self,
        packed: &[u8],
        waiter: &Arc<Waiter>,
        stats: &Stats,
        checkout: &Checkout<'_, M>,
    ) -> Result<Reply, RequestError<M::Error>>
    where
        M: ManageConnection + Send + Sync + 'static,
        M::Error: Send + 'static,
    {
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
            if waiter.drives() {
                return self.drive(waiter, stats, checkout);
            }
            if waiter.park() {
                let state = self.state.lock();
                if let Some(result) = waiter.take() {
                    return result.map_err(RequestError::Collateral);
                }
                if waiter.drives() {
                    drop(state);
                    return self.drive(waiter, stats, checkout);
                }
                waiter.abandon();
                return Err(waiter.timed_out(state.replies));
            }
        }
    }
}

#[cfg(test)]
mod tests;
