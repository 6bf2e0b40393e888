//! Shared mode: one bounded r2d2 pool per (database, server) for all
//! workers. The wait for a pooled connection is bounded, and a worker that
//! finds every connection in use is counted in `workers.blocked`.
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::RwLock;
use scheduled_thread_pool::ScheduledThreadPool;

use super::{Connection, Connector};
use crate::error::Error;
use crate::server::Health;
use crate::stats::{Counter, Stats};

/// How often a worker waiting for the first connection of a pool checks
/// whether r2d2's attempt was refused.
const CONNECT_POLL: Duration = Duration::from_millis(5);

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
    in_use: AtomicU32,
    threads: Arc<ScheduledThreadPool>,
    /// Shared with the pool's `Manager`: the last connect outcome.
    last_connect: Arc<ConnectOutcome>,
}

/// A pooled connection; returns to the pool when dropped.
pub struct SharedLease<'a> {
    conn: r2d2::PooledConnection<Manager>,
    in_use: &'a AtomicU32,
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
        SharedPool {
            pool: RwLock::new(None),
            connector,
            health,
            ttl,
            max_size: max_size.max(1),
            wait,
            in_use: AtomicU32::new(0),
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

    /// A connection from the pool, waiting at most `wait`, and failing at
    /// once while the server refuses connections and none is open.
    pub fn get(&self, stats: &Arc<Stats>) -> Result<SharedLease<'_>, Error> {
        let pool = self.pool(stats);
        if self.in_use.fetch_add(1, Ordering::Relaxed) >= self.max_size {
            stats.inc(Counter::WorkersBlocked);
        }
        let started = Instant::now();
        let conn = match pool.try_get() {
            Some(conn) => Ok(conn),
            None => self.wait_for(&pool, started + self.wait),
        };
        match conn {
            Ok(conn) => Ok(SharedLease {
                conn,
                in_use: &self.in_use,
            }),
            Err(detail) => {
                self.in_use.fetch_sub(1, Ordering::Relaxed);
                Err(Error::PoolTimeout {
                    server: self.connector.location().to_string(),
                    waited_ms: started.elapsed().as_millis(),
                    pool_size: self.max_size,
                    detail,
                })
            }
        }
    }

    /// The slow path of [`get`]: no idle connection. While nothing is open
    /// r2d2 is connecting in the background, so wait in short slices and
    /// give up as soon as its attempt was refused, rather than make every
    /// worker wait the full `wait` for a server that is down.
    fn wait_for(
        &self,
        pool: &r2d2::Pool<Manager>,
        deadline: Instant,
    ) -> Result<r2d2::PooledConnection<Manager>, String> {
        loop {
            let nothing_open = pool.state().connections == 0;
            if nothing_open && self.last_connect.failing.load(Ordering::Relaxed) {
                return Err(self.last_connect.error.lock().clone());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            let slice = if nothing_open {
                left.min(CONNECT_POLL)
            } else {
                left
            };
            match pool.get_timeout(slice) {
                Ok(conn) => return Ok(conn),
                Err(err) if Instant::now() >= deadline => return Err(err.to_string()),
                Err(_) => {}
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

impl Drop for SharedLease<'_> {
    fn drop(&mut self) {
        self.in_use.fetch_sub(1, Ordering::Relaxed);
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
