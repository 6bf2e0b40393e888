//! What the pools need from whoever owns a server's connections, as one
//! trait (r2d2's `ManageConnection`): open one, judge an idle one, and
//! make one ready for the server's commands. The pools know nothing of
//! databases, counters or server health; the implementation
//! (`crate::server::Server`) does, and its errors pass through the pools
//! as they are.
use std::fmt;
use std::time::{Duration, Instant};

use super::Connection;

/// Opens, checks and prepares the connections of one server.
pub trait ManageConnection {
    /// What a failed open or preparation gives.
    type Error: fmt::Display;

    /// A new connection for a command whose requests have `timeout`, open
    /// by `deadline` (none: the connector's own timeouts only).
    fn connect(
        &self,
        deadline: Option<Instant>,
        timeout: Option<Duration>,
    ) -> Result<Connection, Self::Error>;

    /// Fails at once, with the error a connect would give, when no
    /// connection may be opened now (the reconnect spacing after a
    /// failure): checked before a thread is started to open one.
    fn may_open(&self) -> Result<(), Self::Error> {
        Ok(())
    }

    /// Whether an idle connection may take commands again at `now` (not
    /// too old, not from before a failure of its server, not closed by
    /// the server meanwhile). One that may not is dropped.
    fn is_usable(&self, conn: &mut Connection, now: Instant) -> bool;

    /// Makes a connection ready for the server's commands before it takes
    /// any (e.g. `READONLY` on a cluster replica, once per connection),
    /// each request bounded by `timeout` and by `deadline`, taken when it
    /// is sent. A failure drops it.
    fn prepare(
        &self,
        conn: Connection,
        timeout: Option<Duration>,
        deadline: Option<Instant>,
    ) -> Result<Connection, Self::Error>;

    /// The first of the `idle` connections still usable (the others are
    /// dropped on the way), else a new one opened by `deadline`; prepared
    /// with `timeout`, by `deadline`.
    fn checkout(
        &self,
        idle: &mut dyn Iterator<Item = Connection>,
        deadline: Option<Instant>,
        timeout: Option<Duration>,
    ) -> Result<Connection, Self::Error> {
        let now = Instant::now();
        let mut usable = None;
        for mut conn in idle {
            if self.is_usable(&mut conn, now) {
                usable = Some(conn);
                break;
            }
        }
        let conn = match usable {
            Some(conn) => conn,
            None => self.connect(deadline, timeout)?,
        };
        self.prepare(conn, timeout, deadline)
    }
}
