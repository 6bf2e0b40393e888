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

/// Opens connections for r2d2 and decides, without network I/O, which idle
/// ones are still good: not broken, not past their TTL, not older than the
/// server's last failure.
pub struct Manager {
    connector: Connector,
    stats: Arc<Stats>,
    health: Arc<Health>,
    ttl: Option<Duration>,
    /// Whether the last attempt to open a connection failed.
    connect_failing: Arc<AtomicBool>,
}

impl r2d2::ManageConnection for Manager {
    type Connection = Connection;
    type Error = Error;

    fn connect(&self) -> Result<Connection, Error> {
        let conn = self.connector.connect(&self.stats);
        self.connect_failing.store(conn.is_err(), Ordering::Relaxed);
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
    /// Shared with the pool's `Manager`: the last connect attempt failed.
    connect_failing: Arc<AtomicBool>,
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
            connect_failing: Arc::new(AtomicBool::new(false)),
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
                    connect_failing: self.connect_failing.clone(),
                })
        })
        .clone()
    }

    /// A connection from the pool, waiting at most `wait`.
    pub fn get(&self, stats: &Arc<Stats>) -> Result<SharedLease<'_>, Error> {
        let pool = self.pool(stats);
        if self.in_use.fetch_add(1, Ordering::Relaxed) >= self.max_size {
            stats.inc(Counter::WorkersBlocked);
        }
        // A sick server with no connection at all that refused the last
        // connection: r2d2 keeps reconnecting in the background, so fail
        // now rather than make every worker wait the full `wait` for it.
        // (A connection that broke also makes the server sick, but then the
        // retry must get the chance of a new connection.)
        let wait = if self.connect_failing.load(Ordering::Relaxed)
            && self.health.is_sick(Instant::now())
            && pool.state().connections == 0
        {
            Duration::ZERO
        } else {
            self.wait
        };
        match pool.get_timeout(wait) {
            Ok(conn) => Ok(SharedLease {
                conn,
                in_use: &self.in_use,
            }),
            Err(err) => {
                self.in_use.fetch_sub(1, Ordering::Relaxed);
                Err(Error::PoolTimeout {
                    server: self.connector.location().to_string(),
                    waited_ms: wait.as_millis(),
                    pool_size: self.max_size,
                    detail: err.to_string(),
                })
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
