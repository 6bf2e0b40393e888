//! The worker that drives: it takes the connection, writes what is queued
//! with a fence after it, and reads replies into their places until its
//! own has come or its deadline passes; then it passes the driving on.
use std::fmt;
use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::MutexGuard;

use super::fence::FenceToken;
use super::opening::{Landed, Opened, Opening};
use super::state::{Read, State};
use super::waiter::Waiter;
use super::Multiplexed;
use crate::connection::{Connection, Failure, Limit, ManageConnection, RequestError};
use crate::protocol::Reply;
use crate::stats::Stats;

/// How the worker that drives gets the connection when nothing is in
/// flight on it.
pub(super) struct Checkout<'m, M> {
    pub(super) manager: &'m Arc<M>,
    /// The request's timeout, for preparing the idle connection (nothing
    /// is sent on one prepared already).
    pub(super) timeout: Option<Duration>,
    /// The bound of a new connection's handshake and preparation: the
    /// connection's own (the database's command timeout), not the
    /// request's (`opening.rs`).
    pub(super) open_timeout: Option<Duration>,
}

/// Where the connection to drive is, as `check_out` finds it.
enum Found<E> {
    /// The connection still owed replies: this one, whatever its age.
    Busy(Connection),
    /// None is open but the idle one, if any.
    Idle(Option<Connection>),
    /// An opening is under way.
    Opening,
    Opened(Landed<E>),
}

impl Multiplexed {
    /// Writes what is queued and reads replies, putting each in its place,
    /// until `mine` has its reply; then passes the driving on.
    pub(super) fn drive<M>(
        &self,
        mine: &Arc<Waiter>,
        stats: &Stats,
        checkout: &Checkout<'_, M>,
    ) -> Result<Reply, RequestError<M::Error>>
    where
        M: ManageConnection + Send + Sync + 'static,
        M::Error: Send + 'static,
    {
        mine.start_driving();
        let mut conn = self.check_out(mine, checkout)?;
        let mut released = Vec::new();
        loop {
            let state = self.write_queued(&mut conn, mine, stats)?;
            // Unlocked while reading, until this worker's own deadline
            // (the others' are theirs: see `State::in_flight`).
            let fence_next = state.fence_next();
            drop(state);
            let read = read_next(&mut conn, fence_next, Limit::by(mine.deadline));
            let mut state = self.state.lock();
            let routed = match read {
                Ok(read) => state.route(read, mine, &mut released),
                // Woken early (a partial TLS record stays in rustls, a
                // partial reply in the buffer): read on.
                Err(Failure::Timeout) if !mine.due() => Ok(false),
                Err(Failure::Timeout) => return Err(self.stop_at_deadline(&mut state, conn, mine)),
                Err(failure) => Err(failure),
            };
            match routed {
                Ok(false) => {
                    drop(state);
                    wake(&mut released);
                }
                Ok(true) => return self.finish(state, conn, mine, released),
                Err(failure) => return Err(self.condemn(&mut state, mine, failure)),
            }
        }
    }

    /// The connection to drive: the one still owed replies, else the idle
    /// one if still usable, else a new one, opened on a thread of its own
    /// (`opening.rs`) that this worker waits for within its deadline, then
    /// leaves to the next worker waiting. A failed opening fails the
    /// requests queued for it.
    fn check_out<M>(
        &self,
        mine: &Arc<Waiter>,
        checkout: &Checkout<'_, M>,
    ) -> Result<Connection, RequestError<M::Error>>
    where
        M: ManageConnection + Send + Sync + 'static,
        M::Error: Send + 'static,
    {
        let manager = checkout.manager;
        loop {
            match self.find::<M::Error>() {
                Found::Busy(conn) => return Ok(conn),
                Found::Idle(idle) => {
                    if let Some(conn) = idle.and_then(|mut conn| {
                        manager.is_usable(&mut conn, Instant::now()).then_some(conn)
                    }) {
                        return self.prepare_idle(&**manager, conn, checkout.timeout);
                    }
                    // A server in its reconnect spacing fails at once,
                    // with no thread started.
                    if let Err(err) = manager.may_open() {
                        return Err(self.fail_queued(mine, err));
                    }
                    let opening = Opening::start(manager, checkout.open_timeout);
                    self.state.lock().opening = Some(opening);
                }
                Found::Opening => {
                    if mine.park() {
                        return Err(self.leave_opening(mine));
                    }
                }
                Found::Opened(landed) => {
                    if let Some(taken) = self.take_opened(landed, mine, &**manager) {
                        return taken;
                    }
                }
            }
        }
    }

    /// Where the connection to drive is now (an opening that ended is
    /// taken out of the state).
    fn find<E: Send + 'static>(&self) -> Found<E> {
        let mut state = self.state.lock();
        match &state.opening {
            Some(pending) => {
                let opening = Opening::of(pending).expect("one error type per multiplexer");
                match opening.poll() {
                    Some(landed) => {
                        state.opening = None;
                        Found::Opened(landed)
                    }
                    None => Found::Opening,
                }
            }
            None if state.in_flight.is_empty() => Found::Idle(state.conn.take()),
            None => Found::Busy(state.conn.take().expect("replies owed on a connection")),
        }
    }

    /// What an ended opening gives this driver: its connection, or its
    /// failure (the queued requests fail with it); `None` to open another.
    fn take_opened<M: ManageConnection>(
        &self,
        Landed { opened, orphan }: Landed<M::Error>,
        mine: &Arc<Waiter>,
        manager: &M,
    ) -> Option<Result<Connection, RequestError<M::Error>>> {
        match opened {
            // Just opened for the requests waiting: theirs, though one of
            // them timed out meanwhile. One that waited with nobody
            // driving is checked as an idle one.
            Opened::Connected(mut conn) => {
                if orphan && !manager.is_usable(&mut conn, Instant::now()) {
                    return None;
                }
                let mut state = self.state.lock();
                *self.prepared.lock() = conn.prepared().clone();
                state.identity = conn.prepared().identity().cloned();
                Some(Ok(conn))
            }
            // Of another time: this request opens its own.
            Opened::Failed(_) if orphan => None,
            Opened::Failed(err) => Some(Err(self.fail_queued(mine, err))),
            Opened::Lost => {
                let lost = || io::Error::other("opening the connection failed (no thread)");
                let mut state = self.state.lock();
                fail_unsent(&mut state, mine, &lost().to_string());
                self.pass_driving(&mut state, None);
                Some(Err(RequestError::Failed(Failure::Io(lost()))))
            }
        }
    }

    /// The idle connection, prepared (nothing is sent on one prepared
    /// already; `READONLY` once a cluster master became a replica) within
    /// this request's `timeout`: a failure (the connection is dropped)
    /// costs this request alone, the next driver opens a new one.
    fn prepare_idle<M>(
        &self,
        manager: &M,
        conn: Connection,
        timeout: Option<Duration>,
    ) -> Result<Connection, RequestError<M::Error>>
    where
        M: ManageConnection,
    {
        manager.prepare(conn, timeout, None).map_err(|err| {
            let mut state = self.state.lock();
            self.pass_driving(&mut state, None);
            RequestError::Connect(err)
        })
    }

    /// No connection for the requests queued: they fail with `err` (the
    /// next of them to be retried connects again); this driver's is the
    /// manager's error.
    fn fail_queued<E: fmt::Display>(&self, mine: &Arc<Waiter>, err: E) -> RequestError<E> {
        let mut state = self.state.lock();
        fail_unsent(&mut state, mine, &err.to_string());
        self.pass_driving(&mut state, None);
        RequestError::Connect(err)
    }

    /// This driver's deadline passed while the connection is being
    /// opened: the next worker waiting takes the driving, and waits for
    /// the opening in turn (if none, the next to come).
    fn leave_opening<E: Send + 'static>(&self, mine: &Arc<Waiter>) -> RequestError<E> {
        let mut state = self.state.lock();
        mine.abandon();
        if let Some(opening) = state.opening.as_ref().and_then(Opening::<E>::of) {
            opening.leave();
        }
        self.pass_driving(&mut state, None);
        RequestError::Late(Failure::Timeout)
    }

    /// Writes the requests queued so far, a fence after them (nothing if
    /// none is queued), and returns the state locked again.
    fn write_queued<E>(
        &self,
        conn: &mut Connection,
        mine: &Arc<Waiter>,
        stats: &Stats,
    ) -> Result<MutexGuard<'_, State>, RequestError<E>> {
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
        match written {
            Ok(()) => Ok(state),
            Err(failure) => Err(self.condemn(&mut state, mine, failure)),
        }
    }

    /// This driver's own deadline passed before its reply came: someone
    /// else reads on, with theirs.
    fn stop_at_deadline<E>(
        &self,
        state: &mut State,
        conn: Connection,
        mine: &Arc<Waiter>,
    ) -> RequestError<E> {
        mine.abandon();
        let timed_out = mine.timed_out(state.replies);
        if self.pass_driving(state, Some(conn)) {
            timed_out
        } else {
            // Nobody else waits: the connection, which still owes this
            // reply, was closed.
            RequestError::Failed(Failure::Timeout)
        }
    }

    /// `mine` has its reply (it is among `released`): the replies already
    /// read for others are put in place (each hand-off costs the next
    /// driver a wake-up), then the driving is passed on.
    fn finish<E>(
        &self,
        mut state: MutexGuard<'_, State>,
        mut conn: Connection,
        mine: &Arc<Waiter>,
        mut released: Vec<Arc<Waiter>>,
    ) -> Result<Reply, RequestError<E>> {
        match route_buffered(&mut state, &mut conn, mine, &mut released) {
            Ok(()) => {
                self.pass_driving(&mut state, Some(conn));
            }
            // Its own reply was in step (its fence came back): only the
            // later ones are lost.
            Err(failure) => {
                self.condemn::<E>(&mut state, mine, failure);
            }
        }
        drop(state);
        wake(&mut released);
        mine.take()
            .expect("a released waiter holds its reply")
            .map_err(RequestError::Failed)
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
        for waiter in state.written() {
            let theirs = copy(&failure);
            if Arc::ptr_eq(waiter, mine) {
                mine_failed = Some(theirs);
            } else {
                waiter.fail(theirs);
            }
        }
        state.forget_in_flight();
        self.pass_driving(state, None);
        RequestError::Failed(mine_failed.unwrap_or(failure))
    }

    /// Ends this worker's driving: the oldest worker still waiting drives
    /// next; with nobody waiting the connection goes back idle, unless it
    /// still owes replies to abandoned requests (closed then).
    /// Returns whether the connection stays open.
    pub(super) fn pass_driving(&self, state: &mut State, conn: Option<Connection>) -> bool {
        let next = state
            .written()
            .chain(state.unsent_waiters.iter().map(|(waiter, _)| waiter))
            .find(|waiter| !waiter.abandoned())
            .cloned();
        match next {
            Some(next) => {
                let open = conn.is_some();
                state.conn = conn;
                next.drive_next();
                open
            }
            None => {
                // Only abandoned requests, if any, are left: no reply on
                // this connection is wanted any more.
                let owes = !state.in_flight.is_empty();
                state.forget_in_flight();
                state.unsent_waiters.clear();
                state.unsent.clear();
                state.conn = conn.filter(|_| !owes);
                state.driving = false;
                state.conn.is_some()
            }
        }
    }
}

/// Puts in place the replies already buffered, as far as they go. Only
/// what is buffered: a limit already spent never waits (a buffered RESP3
/// push may be all there is), and running out of buffered bytes is no
/// failure: the next driver reads.
fn route_buffered(
    state: &mut State,
    conn: &mut Connection,
    mine: &Arc<Waiter>,
    released: &mut Vec<Arc<Waiter>>,
) -> Result<(), Failure> {
    let now = Limit::by(Some(Instant::now()));
    while conn.has_buffered_reply() && !state.in_flight.is_empty() {
        let read = match read_next(conn, state.fence_next(), now) {
            Ok(read) => read,
            Err(Failure::Timeout) => break,
            Err(failure) => return Err(failure),
        };
        state.route(read, mine, released)?;
    }
    Ok(())
}

/// Lets the released requests take their replies, and wakes their
/// workers: outside the state lock.
fn wake(released: &mut Vec<Arc<Waiter>>) {
    for waiter in released.drain(..) {
        waiter.wake();
    }
}

/// Reads the next reply, as the fence's if it is in a fence's place.
fn read_next(
    conn: &mut Connection,
    fence_next: Option<FenceToken>,
    limit: Limit,
) -> Result<Read, Failure> {
    match fence_next {
        Some(fence) => conn
            .read_raw_reply(limit, |bytes| fence.judge(bytes))
            .map(Read::Fence),
        None => conn.read_reply(limit).map(Read::Reply),
    }
}

/// Fails the requests queued and not written (but `mine`): no connection
/// could be opened for them (`why`).
fn fail_unsent(state: &mut State, mine: &Arc<Waiter>, why: &str) {
    state.unsent.clear();
    for (waiter, _) in std::mem::take(&mut state.unsent_waiters) {
        if !Arc::ptr_eq(&waiter, mine) {
            let failure = io::Error::new(
                io::ErrorKind::NotConnected,
                format!("connecting failed: {why}"),
            );
            waiter.fail(Failure::Io(failure));
        }
    }
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
