//! Shared mode: one bounded pool per (database, server) for all workers.
//! At most `max_connections` workers hold a connection at once: they are
//! admitted in arrival order ([`FairGate`], one permit per connection), the
//! wait is bounded by the caller's deadline (none: as long as it takes, as
//! in the C VMOD), and a worker that finds every connection in use is
//! counted in `workers.blocked`.
//!
//! The worker admitted takes the most recently used idle connection, or
//! opens one itself when there is none (or it is past `connection_ttl` or
//! broken), as in private mode. Reusing last in, first out means sockets
//! are only opened when that many workers need one at the same time, and a
//! reconnect delays only the worker doing it.
//!
//! No thread of its own: the pool is a list behind a lock, so dropping it
//! (`vcl.discard`) closes its connections at once and leaves nothing
//! running the module's code. (r2d2, used before, always makes its pool's
//! entries on a background thread pool, which discard had to wait for.)
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::gate::{Admission, FairGate, Permit};
use super::{Connection, Leased, ManageConnection, PoolError, PoolTimeout};
use crate::stats::{Counter, Stats};

/// Most connections a pool holds: [`MAX_SHARED_POOL`], which the
/// configuration already applied (and said) to `max_connections`.
pub const MAX_SLOTS: u32 = crate::config::MAX_SHARED_POOL;

/// The pool of one server. `close_idle` (VCL cold) closes the idle
/// connections; connections in use then close when they come back.
pub struct SharedPool {
    /// Idle connections, the most recently used last.
    idle: Mutex<Vec<Connection>>,
    /// Bumped by `close_idle`: a lease from before it closes its connection
    /// instead of putting it back.
    generation: AtomicU64,
    location: String,
    max_size: u32,
    /// One permit per connection.
    gate: Arc<FairGate>,
    /// Connections open, leased or idle.
    open: AtomicU32,
    /// Leases out right now (each holds an open connection).
    leased: AtomicU32,
}

/// An open connection held for one command (or by a task across VCL
/// calls, e.g. from `MULTI` to `EXEC`, hence owned). Dropping it puts the
/// connection back (unless it broke), and only then (fields drop after
/// `drop`) lets the next worker in.
pub struct SharedLease {
    pool: Arc<SharedPool>,
    conn: Leased,
    generation: u64,
    _permit: Permit,
}

impl SharedPool {
    /// At most `max_size` connections (1 to [`MAX_SLOTS`]).
    pub fn new(location: String, max_size: u32) -> Self {
        let max_size = max_size.clamp(1, MAX_SLOTS);
        SharedPool {
            idle: Mutex::new(Vec::new()),
            generation: AtomicU64::new(0),
            location,
            max_size,
            gate: Arc::new(FairGate::new(max_size)),
            open: AtomicU32::new(0),
            leased: AtomicU32::new(0),
        }
    }

    /// The most connections it holds.
    pub(crate) fn max_size(&self) -> u32 {
        self.max_size
    }

    /// A usable connection, waiting in line until `deadline` at most:
    /// `manager` checks out the most recently used idle connection (if
    /// any) or opens one by `deadline`, and prepares it with `timeout`
    /// (also ending by `deadline`).
    /// When that fails, its error is returned and the worker's place goes
    /// to the next one.
    pub fn get<M: ManageConnection + ?Sized>(
        self: &Arc<Self>,
        stats: &Stats,
        manager: &M,
        deadline: Option<Instant>,
        timeout: Option<Duration>,
    ) -> Result<SharedLease, PoolError<M::Error>> {
        let started = Instant::now();
        let Some((permit, admission)) = self.gate.acquire(deadline) else {
            stats.inc(Counter::WorkersBlocked);
            return Err(PoolError::Timeout(PoolTimeout {
                server: self.location.clone(),
                waited_ms: started.elapsed().as_millis(),
                pool_size: self.max_size,
            }));
        };
        if admission == Admission::Waited {
            stats.inc(Counter::WorkersBlocked);
        }
        // Both under the lock, as in `close_idle` and the lease's drop: a
        // `close_idle` from now on closes this connection when it comes back.
        let (generation, idle) = {
            let mut idle = self.idle.lock();
            (self.generation.load(Ordering::Relaxed), idle.pop())
        };
        if idle.is_some() {
            self.open.fetch_sub(1, Ordering::Relaxed);
        }
        let conn = manager
            .checkout(&mut idle.into_iter(), deadline, timeout)
            .map_err(PoolError::Checkout)?;
        self.open.fetch_add(1, Ordering::Relaxed);
        self.leased.fetch_add(1, Ordering::Relaxed);
        Ok(SharedLease {
            pool: Arc::clone(self),
            conn: Leased(Some(conn)),
            generation,
            _permit: permit,
        })
    }

    /// Closes the idle connections (VCL cold); connections in use close
    /// when they come back.
    pub fn close_idle(&self) -> usize {
        let closed = {
            let mut idle = self.idle.lock();
            self.generation.fetch_add(1, Ordering::Relaxed);
            std::mem::take(&mut *idle)
        };
        self.open.fetch_sub(closed.len() as u32, Ordering::Relaxed);
        closed.len()
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
        self.conn.conn()
    }

    pub fn is_broken(&self) -> bool {
        self.conn.is_broken()
    }
}

impl Drop for SharedLease {
    fn drop(&mut self) {
        let pool = &self.pool;
        if let Some(conn) = self.conn.take_unbroken() {
            let mut idle = pool.idle.lock();
            if pool.generation.load(Ordering::Relaxed) == self.generation {
                idle.push(conn);
                drop(idle);
                pool.leased.fetch_sub(1, Ordering::Relaxed);
                return;
            }
        }
        pool.open.fetch_sub(1, Ordering::Relaxed);
        pool.leased.fetch_sub(1, Ordering::Relaxed);
    }
}
