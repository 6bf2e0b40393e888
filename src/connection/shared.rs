//! Shared mode: one bounded r2d2 pool per (database, server) for all
//! workers. The pool holds `max_connections` slots; a slot holds an open
//! connection or none. Workers are admitted in arrival order
//! ([`FairGate`], one permit per slot), the wait is bounded, and a worker
//! that finds every slot in use is counted in `workers.blocked`.
//!
//! The worker that takes a slot without a usable connection opens one
//! itself, as in private mode. Slots are reused last in, first out, so
//! sockets are only opened when that many workers need one at the same
//! time, and a reconnect (TTL, failure) delays only the worker doing it,
//! never the others behind a background opener.
use std::convert::Infallible;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::RwLock;
use scheduled_thread_pool::ScheduledThreadPool;

use super::gate::{Admission, FairGate, Permit};
use super::Connection;
use crate::error::Error;
use crate::stats::{Counter, Stats};

/// Where a pooled connection lives between commands. Keeps the pool's
/// count of open connections right however the connection goes (replaced,
/// dropped broken, or the slot dropped with its pool).
pub struct Slot {
    conn: Option<Connection>,
    open: Arc<AtomicU32>,
}

impl Slot {
    fn take(&mut self) -> Option<Connection> {
        let conn = self.conn.take();
        if conn.is_some() {
            self.open.fetch_sub(1, Ordering::Relaxed);
        }
        conn
    }

    fn put(&mut self, conn: Connection) {
        drop(self.take());
        self.conn = Some(conn);
        self.open.fetch_add(1, Ordering::Relaxed);
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        drop(self.take());
    }
}

/// Most slots a pool holds, whatever `max_connections` says. The slots are
/// made up front, and a connection in use is held by a worker thread, of
/// which varnishd runs at most thread_pool_max x thread_pools (5000 x 2 by
/// default): a `max_connections` of millions would cost memory and time
/// for nothing.
pub const MAX_SLOTS: u32 = 10_000;

/// How long r2d2 may take to make a fresh pool's slots (no I/O involved;
/// not `wait`, which may be a millisecond).
const SLOTS_TIMEOUT: Duration = Duration::from_secs(10);

/// Makes empty slots for r2d2; opening connections is the worker's job.
pub struct SlotMaker {
    open: Arc<AtomicU32>,
}

impl r2d2::ManageConnection for SlotMaker {
    type Connection = Slot;
    type Error = Infallible;

    fn connect(&self) -> Result<Slot, Infallible> {
        Ok(Slot {
            conn: None,
            open: self.open.clone(),
        })
    }

    fn is_valid(&self, _: &mut Slot) -> Result<(), Infallible> {
        Ok(())
    }

    fn has_broken(&self, _: &mut Slot) -> bool {
        false
    }
}

/// The pool of one server. It is dropped on VCL cold (closing the idle
/// connections) and built again on the next command.
pub struct SharedPool {
    pool: RwLock<Option<r2d2::Pool<SlotMaker>>>,
    location: String,
    max_size: u32,
    wait: Duration,
    /// One permit per slot.
    gate: Arc<FairGate>,
    threads: Arc<ScheduledThreadPool>,
    /// Connections open in the slots, leased or idle.
    open: Arc<AtomicU32>,
    /// Leases out right now (each holds an open connection).
    leased: Arc<AtomicU32>,
}

/// A slot with an open connection, held for one command (or by a task from
/// `MULTI` to `EXEC`, hence owned). Dropping it puts the slot back (without
/// the connection if it broke), and only then (fields drop in order) lets
/// the next worker in.
pub struct SharedLease {
    slot: r2d2::PooledConnection<SlotMaker>,
    leased: Arc<AtomicU32>,
    _permit: Permit,
}

impl SharedPool {
    /// `max_size` slots (1 to [`MAX_SLOTS`]); `wait` bounds how long a
    /// worker waits for one; `threads` fills r2d2's pool with empty slots
    /// (one thread per database).
    pub fn new(
        location: String,
        max_size: u32,
        wait: Duration,
        threads: Arc<ScheduledThreadPool>,
    ) -> Self {
        let max_size = max_size.clamp(1, MAX_SLOTS);
        SharedPool {
            pool: RwLock::new(None),
            location,
            max_size,
            wait,
            gate: Arc::new(FairGate::new(max_size)),
            threads,
            open: Arc::default(),
            leased: Arc::default(),
        }
    }

    /// The pool, made on first use with all its slots: a slot r2d2 added
    /// later would go on top of the idle ones and be taken (empty) before
    /// those holding a connection.
    fn pool(&self) -> Result<r2d2::Pool<SlotMaker>, r2d2::Error> {
        if let Some(pool) = self.pool.read().as_ref() {
            return Ok(pool.clone());
        }
        let mut slot = self.pool.write();
        if let Some(pool) = slot.as_ref() {
            return Ok(pool.clone());
        }
        let pool = r2d2::Pool::builder()
            .max_size(self.max_size)
            .min_idle(Some(self.max_size))
            .test_on_check_out(false)
            .connection_timeout(SLOTS_TIMEOUT)
            .idle_timeout(None)
            .max_lifetime(None)
            .thread_pool(self.threads.clone())
            .build(SlotMaker {
                open: self.open.clone(),
            })?;
        Ok(slot.insert(pool).clone())
    }

    /// A slot, waiting in line at most `wait`, with a usable connection:
    /// `refresh` gets the slot's connection (if any) and returns it if it
    /// is still good, else a new one. When `refresh` fails the slot goes
    /// back empty and its error is returned.
    pub fn get(
        &self,
        stats: &Stats,
        refresh: impl FnOnce(Option<Connection>) -> Result<Connection, Error>,
    ) -> Result<SharedLease, Error> {
        let started = Instant::now();
        let deadline = started + self.wait;
        let timeout = |detail: &str| Error::PoolTimeout {
            server: self.location.clone(),
            waited_ms: started.elapsed().as_millis(),
            pool_size: self.max_size,
            detail: detail.to_owned(),
        };
        let Some((permit, admission)) = self.gate.acquire(deadline) else {
            stats.inc(Counter::WorkersBlocked);
            return Err(timeout(&format!(
                "all {} connections in use",
                self.max_size
            )));
        };
        if admission == Admission::Waited {
            stats.inc(Counter::WorkersBlocked);
        }
        // With a permit, a slot is idle.
        let mut slot = self
            .pool()
            .ok()
            .and_then(|pool| pool.try_get())
            .ok_or_else(|| timeout("the pool's slots were not ready in time"))?;
        let conn = refresh(slot.take())?;
        slot.put(conn);
        self.leased.fetch_add(1, Ordering::Relaxed);
        Ok(SharedLease {
            slot,
            leased: self.leased.clone(),
            _permit: permit,
        })
    }

    /// Drops the pool and its idle connections (VCL cold); connections in
    /// use close when they come back.
    pub fn close_idle(&self) -> usize {
        let idle = self.state().1;
        drop(self.pool.write().take());
        idle as usize
    }

    /// Connections open to the server, and idle among them, for stats.
    pub fn state(&self) -> (u32, u32) {
        let open = self.open.load(Ordering::Relaxed);
        let leased = self.leased.load(Ordering::Relaxed);
        (open, open.saturating_sub(leased))
    }
}

impl SharedLease {
    pub fn conn(&mut self) -> &mut Connection {
        self.slot
            .conn
            .as_mut()
            .expect("a lease holds an open connection")
    }
}

impl Drop for SharedLease {
    fn drop(&mut self) {
        if self.slot.conn.as_ref().is_some_and(Connection::is_broken) {
            drop(self.slot.take());
        }
        self.leased.fetch_sub(1, Ordering::Relaxed);
    }
}
