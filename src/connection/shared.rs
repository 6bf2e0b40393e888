//! Shared mode: one bounded r2d2 pool per (database, server) for all
//! workers. Workers are admitted to it in arrival order ([`FairGate`]),
//! the wait is bounded, and a worker that finds every connection in use is
//! counted in `workers.blocked`.
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use parking_lot::RwLock;
use scheduled_thread_pool::ScheduledThreadPool;

use super::gate::{Admission, FairGate, Permit};
use super::{Connection, Connector};
use crate::error::Error;
use crate::server::Health;
use crate::stats::{Counter, Stats};

/// How often a worker waiting for a connection to open looks for it (and
/// for r2d2's attempt having been refused).
const CONNECT_POLL: Duration = Duration::from_millis(2);

/// Opens connections for r2d2 and decides, without network I/O, which idle
/// ones are still good: not broken, not past their TTL, not older than the
/// server's last failure.
pub struct Manager {
    connector: Connector,
    stats: Arc<Stats>,
    health: Arc<Health>,
    ttl: Option<Duration>,
    /// The outcome of the last attempt to open a connection.
    last_connect: Arc<ConnectOutcome>,
}

/// Whether r2d2's last attempt to open a connection failed, and why:
/// shared by a pool and its `Manager` (written only on connect).
#[derive(Default)]
struct ConnectOutcome {
    failing: AtomicBool,
    error: parking_lot::Mutex<String>,
}

impl r2d2::ManageConnection for Manager {
    type Connection = Connection;
    type Error = Error;

    fn connect(&self) -> Result<Connection, Error> {
        let conn = self.connector.connect(&self.stats);
        if let Err(err) = &conn {
            *self.last_connect.error.lock() = err.to_string();
        }
        self.last_connect
            .failing
            .store(conn.is_err(), Ordering::Relaxed);
        if conn.is_err() {
            self.health.mark_failed();
        }
        conn
    }

    fn is_valid(&self, conn: &mut Connection) -> Result<(), Error> {
        if conn.expired(self.ttl, Instant::now()) {
            self.stats.inc(Counter::DroppedTtl);
            return Err(Error::Discarded("connection_ttl reached"));
        }
        if self.health.outdates(conn.created()) {
            self.stats.inc(Counter::DroppedSick);
            return Err(Error::Discarded("older than the server's last failure"));
        }
        Ok(())
    }

    fn has_broken(&self, conn: &mut Connection) -> bool {
        conn.is_broken()
    }
}

/// The pool of one server. It is dropped on VCL cold (closing the idle
/// connections) and built again on the next command.
pub struct SharedPool {
    pool: RwLock<Option<r2d2::Pool<Manager>>>,
    connector: Connector,
    health: Arc<Health>,
    ttl: Option<Duration>,
    max_size: u32,
    wait: Duration,
    /// One permit per connection the pool may hold.
    gate: FairGate,
    threads: Arc<ScheduledThreadPool>,
    /// Shared with the pool's `Manager`: the last connect outcome.
    last_connect: Arc<ConnectOutcome>,
}

/// A pooled connection; returns to the pool when dropped, and only then
/// (fields drop in order) lets the next worker in.
pub struct SharedLease<'a> {
    conn: r2d2::PooledConnection<Manager>,
    _permit: Permit<'a>,
}

impl SharedPool {
    /// `wait` bounds how long a worker waits for a connection;
    /// `threads` runs r2d2's connection openers (one per database).
    pub fn new(
        connector: Connector,
        health: Arc<Health>,
        ttl: Option<Duration>,
        max_size: u32,
        wait: Duration,
        threads: Arc<ScheduledThreadPool>,
    ) -> Self {
        let max_size = max_size.max(1);
        SharedPool {
            pool: RwLock::new(None),
            connector,
            health,
            ttl,
            max_size,
            wait,
            gate: FairGate::new(max_size),
            threads,
            last_connect: Arc::default(),
        }
    }

    fn pool(&self, stats: &Arc<Stats>) -> r2d2::Pool<Manager> {
        if let Some(pool) = self.pool.read().as_ref() {
            return pool.clone();
        }
        let mut slot = self.pool.write();
        slot.get_or_insert_with(|| {
            r2d2::Pool::builder()
                .max_size(self.max_size)
                .min_idle(Some(0))
                .test_on_check_out(true)
                .connection_timeout(self.wait)
                .idle_timeout(None)
                .max_lifetime(None)
                .error_handler(Box::new(r2d2::NopErrorHandler))
                .thread_pool(self.threads.clone())
                .build_unchecked(Manager {
                    connector: self.connector.clone(),
                    stats: stats.clone(),
                    health: self.health.clone(),
                    ttl: self.ttl,
                    last_connect: self.last_connect.clone(),
                })
        })
        .clone()
    }

    /// A connection from the pool, waiting in line at most `wait`, and
    /// failing at once while the server refuses connections and none is
    /// open.
    pub fn get(&self, stats: &Arc<Stats>) -> Result<SharedLease<'_>, Error> {
        let started = Instant::now();
        let deadline = started + self.wait;
        let timeout = |detail: String| Error::PoolTimeout {
            server: self.connector.location().to_string(),
            waited_ms: started.elapsed().as_millis(),
            pool_size: self.max_size,
            detail,
        };
        let Some((permit, admission)) = self.gate.acquire(deadline) else {
            stats.inc(Counter::WorkersBlocked);
            return Err(timeout(format!("all {} connections in use", self.max_size)));
        };
        if admission == Admission::Waited {
            stats.inc(Counter::WorkersBlocked);
        }
        // With a permit, an idle connection is there unless one is still
        // being opened (first use, or a broken one being replaced).
        let pool = self.pool(stats);
        let conn = match pool.try_get() {
            Some(conn) => Ok(conn),
            None => self.wait_for(&pool, deadline),
        };
        conn.map(|conn| SharedLease {
            conn,
            _permit: permit,
        })
        .map_err(timeout)
    }

    /// The slow path of [`get`]: no idle connection although this worker
    /// holds a permit, so the pool is still growing (first use, or broken
    /// connections dropped). Asking r2d2 (`get_timeout`) makes it open one
    /// more connection in the background, below `max_size`, and every
    /// r2d2 wake-up asks again; so a worker asks once per wait, then polls.
    /// That bounds one burst on a fresh pool to a connection per worker;
    /// under sustained load the pool still grows toward `max_size`, since
    /// every wait during growth asks again. While nothing is open, all
    /// give up as soon as the attempt was refused rather than wait the
    /// full `wait` for a server that is down.
    fn wait_for(
        &self,
        pool: &r2d2::Pool<Manager>,
        deadline: Instant,
    ) -> Result<r2d2::PooledConnection<Manager>, String> {
        let mut asked = false;
        loop {
            if pool.state().connections == 0 && self.last_connect.failing.load(Ordering::Relaxed) {
                return Err(self.last_connect.error.lock().clone());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            let conn = if asked {
                let conn = pool.try_get();
                if conn.is_none() {
                    thread::sleep(left.min(CONNECT_POLL));
                }
                conn
            } else {
                asked = true;
                pool.get_timeout(left.min(CONNECT_POLL)).ok()
            };
            if let Some(conn) = conn {
                return Ok(conn);
            }
            if Instant::now() >= deadline {
                return Err("no connection came free or opened in time".to_owned());
            }
        }
    }

    /// Drops the pool and its idle connections (VCL cold); connections in
    /// use close when they come back.
    pub fn close_idle(&self) -> usize {
        self.pool
            .write()
            .take()
            .map_or(0, |pool| pool.state().idle_connections as usize)
    }

    /// Connections open in the pool and idle among them, for stats.
    pub fn state(&self) -> (u32, u32) {
        self.pool.read().as_ref().map_or((0, 0), |pool| {
            let state = pool.state();
            (state.connections, state.idle_connections)
        })
    }
}

impl Deref for SharedLease<'_> {
    type Target = Connection;
    fn deref(&self) -> &Connection {
        &self.conn
    }
}

impl DerefMut for SharedLease<'_> {
    fn deref_mut(&mut self) -> &mut Connection {
        &mut self.conn
    }
}
