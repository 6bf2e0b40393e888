//! How a command gets a way to run on a server: a lease of a private or
//! pooled connection, or the connection a task keeps between commands.
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use super::{within, Database};
use crate::connection::multiplexed::{Multiplexed, MuxError};
use crate::connection::private::{Owner, PrivateConnections};
use crate::connection::shared::SharedLease;
use crate::connection::{Connection, Failure};
use crate::error::{Error, Result};
use crate::protocol::Reply;
use crate::routing::rotation;
use crate::server::Server;
use crate::session::Session;
use crate::stats::{Counter, Stats};

/// A way to run requests on one server for one command: a whole
/// connection, which goes back to its thread's list or to its pool when
/// dropped, unless it broke or was retired; or, with [ext]
/// `pipelining=true`, a place on a connection many workers share.
/// Execution only talks to the server through these methods, never through
/// the connection itself.
pub(super) enum Lease<'a> {
    Private(PrivateLease<'a>),
    Shared(SharedLease),
    Multiplexed(MuxLease<'a>),
}

/// A command's place on a multiplexed connection: what it needs to open
/// the connection when it is the one to drive and none is open.
pub(super) struct MuxLease<'a> {
    db: &'a Database,
    server: &'a Server,
    mux: &'a Multiplexed,
    /// The end of the whole `execute()`, for connecting.
    deadline: Option<Instant>,
}

/// Why a request on a lease got no reply.
pub(super) enum RequestError {
    /// No connection could be opened (a multiplexed lease connects when it
    /// drives): the connect's own error, already counted.
    Connect(Error),
    /// The request failed. `counted`: the dropped connection it came with
    /// was counted already (by the worker whose read failed, on a
    /// multiplexed connection), or the connection was not dropped.
    Failed { failure: Failure, counted: bool },
}

pub(super) struct PrivateLease<'a> {
    connections: &'a PrivateConnections,
    owner: Owner,
    stats: Weak<Stats>,
    budget: u32,
    conn: Option<Connection>,
}

impl Lease<'_> {
    /// Sends one packed request and reads its reply.
    pub(super) fn request(
        &mut self,
        packed: &[u8],
        timeout: Option<Duration>,
    ) -> std::result::Result<Reply, RequestError> {
        let failed = |failure| RequestError::Failed {
            failure,
            counted: false,
        };
        match self {
            Lease::Private(PrivateLease {
                conn: Some(conn), ..
            }) => conn.request(packed, timeout).map_err(failed),
            Lease::Private(_) => Err(failed(Failure::Io(std::io::ErrorKind::NotConnected.into()))),
            Lease::Shared(lease) => lease.conn().request(packed, timeout).map_err(failed),
            Lease::Multiplexed(lease) => {
                let now = Instant::now();
                let deadline = timeout.map(|timeout| now + timeout);
                let (db, server) = (lease.db, lease.server);
                let mut refresh = |idle: Option<Connection>| {
                    let usable = idle.and_then(|conn| db.still_usable(server, conn, now));
                    let conn = usable.map_or_else(|| db.connect(server, lease.deadline), Ok)?;
                    db.readonly_if_replica(server, conn, timeout)
                };
                lease
                    .mux
                    .request(packed, deadline, &db.stats, &mut refresh)
                    .map_err(|err| match err {
                        MuxError::Connect(err) => RequestError::Connect(err),
                        MuxError::Failed(failure) => failed(failure),
                        MuxError::Collateral(failure) => RequestError::Failed {
                            failure,
                            counted: true,
                        },
                    })
            }
        }
    }

    /// Out of step with the server (a request failed, or stray bytes came
    /// after a reply): closed when released. A multiplexed connection
    /// deals with its failures itself.
    pub(super) fn is_broken(&self) -> bool {
        match self {
            Lease::Private(lease) => lease.conn.as_ref().map_or(true, Connection::is_broken),
            Lease::Shared(lease) => lease.is_broken(),
            Lease::Multiplexed(_) => false,
        }
    }

    /// Closes the connection when released: what is on it must not reach
    /// another command. (Never needed on a multiplexed connection: the
    /// commands that leave something on theirs do not go there.)
    pub(super) fn retire(&mut self) {
        if let Some(conn) = self.conn() {
            conn.retire();
        }
    }

    /// Whether `ROLE` was asked on this connection (once per connection).
    pub(super) fn role_asked(&mut self) -> bool {
        match self {
            Lease::Multiplexed(lease) => lease.mux.role_asked(),
            _ => self.conn().is_some_and(|conn| conn.role_asked()),
        }
    }

    pub(super) fn set_role_asked(&mut self) {
        match self {
            Lease::Multiplexed(lease) => lease.mux.set_role_asked(),
            _ => {
                if let Some(conn) = self.conn() {
                    conn.set_role_asked();
                }
            }
        }
    }

    /// Whether `READONLY` was sent on this connection (cluster replicas).
    /// Always true of a multiplexed connection: the worker that opens or
    /// reuses one while nothing is in flight on it sends `READONLY` first
    /// ([`Database::readonly_if_replica`]), as the mode belongs to the
    /// connection, not to the worker.
    pub(super) fn readonly_sent(&mut self) -> bool {
        self.conn().map_or(true, |conn| conn.readonly_sent())
    }

    pub(super) fn set_readonly_sent(&mut self) {
        if let Some(conn) = self.conn() {
            conn.set_readonly_sent();
        }
    }

    /// The whole connection this lease holds, if it holds one.
    fn conn(&mut self) -> Option<&mut Connection> {
        match self {
            Lease::Private(lease) => lease.conn.as_mut(),
            Lease::Shared(lease) => Some(lease.conn()),
            Lease::Multiplexed(_) => None,
        }
    }

    /// Hands the connection to the task, beyond this command.
    /// `None` for a place on a multiplexed connection, which only takes
    /// commands that leave nothing to keep.
    pub(super) fn pin(self, server: Arc<Server>, stats: &Arc<Stats>) -> Option<Pinned> {
        let held = match self {
            Lease::Private(mut lease) => Held::Private(lease.conn.take()?),
            Lease::Shared(lease) => Held::Shared(lease),
            Lease::Multiplexed(_) => return None,
        };
        Some(Pinned {
            server,
            held: Some(held),
            stats: stats.clone(),
        })
    }
}

impl Drop for PrivateLease<'_> {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take().filter(|conn| !conn.is_broken()) {
            self.connections.give_back(
                self.owner,
                std::mem::take(&mut self.stats),
                conn,
                self.budget,
            );
        }
    }
}

/// What one task keeps of a database between its commands: what it left
/// on its connection, and that connection while it matters. Lives in the
/// task's slot of the database object and ends with it.
#[derive(Default)]
pub struct TaskConnection {
    pub(super) session: Session,
    pub(super) pinned: Option<Pinned>,
}

/// A connection kept by one task, from `MULTI` / `WATCH` to `EXEC`,
/// `DISCARD` or `UNWATCH`, or from a command that changed its state
/// (`SELECT`...) to the end of the task: the task's commands all go there,
/// and no other task gets it meanwhile (in shared mode it keeps its pool
/// slot). The server is held too: it stays valid whatever the topology
/// becomes meanwhile.
pub(super) struct Pinned {
    pub(super) server: Arc<Server>,
    held: Option<Held>,
    stats: Arc<Stats>,
}

enum Held {
    Private(Connection),
    Shared(SharedLease),
}

impl Drop for Pinned {
    /// The task ended with the connection pinned: it still holds queued
    /// commands, watched keys or a changed state, so it is closed, never
    /// handed to another task.
    fn drop(&mut self) {
        if let Some(mut held) = self.held.take() {
            match &mut held {
                Held::Private(conn) => conn.retire(),
                Held::Shared(lease) => lease.conn().retire(),
            }
            self.stats.inc(Counter::DroppedState);
        }
    }
}

impl Database {
    /// A connection to `server`: this thread's idle one or a new one in
    /// private mode, the one in a pool slot or a new one in shared mode,
    /// waiting for a pooled one until `deadline` at most; with [ext]
    /// `pipelining=true`, a place on a multiplexed connection when
    /// `shares` (the command may share one, and need not follow another
    /// request on its connection, as after `ASKING`).
    pub(super) fn lease<'a>(
        &'a self,
        server: &'a Server,
        shares: bool,
        deadline: Option<Instant>,
    ) -> Result<Lease<'a>> {
        let now = Instant::now();
        if let Some(pool) = &server.pool {
            let multiplexed = pool.multiplexed(rotation()).filter(|_| shares);
            if let Some(mux) = multiplexed {
                return Ok(Lease::Multiplexed(MuxLease {
                    db: self,
                    server,
                    mux,
                    deadline,
                }));
            }
            return pool
                .get(&self.stats, deadline, |idle| {
                    let usable = idle.and_then(|conn| self.still_usable(server, conn, now));
                    usable.map_or_else(|| self.connect(server, deadline), Ok)
                })
                .map(Lease::Shared)
                .map_err(Error::from);
        }
        let connections = self
            .private
            .as_deref()
            .expect("a database without pools has private connections");
        let owner = Owner {
            db: self.id,
            server: server.id,
        };
        let usable = std::iter::from_fn(|| connections.take(owner))
            .find_map(|conn| self.still_usable(server, conn, now));
        let conn = usable.map_or_else(|| self.connect(server, deadline), Ok)?;
        Ok(Lease::Private(self.private_lease(
            connections,
            server,
            conn,
        )))
    }

    fn private_lease<'a>(
        &'a self,
        connections: &'a PrivateConnections,
        server: &Server,
        conn: Connection,
    ) -> PrivateLease<'a> {
        PrivateLease {
            connections,
            owner: Owner {
                db: self.id,
                server: server.id,
            },
            stats: Arc::downgrade(&self.stats),
            budget: self.config.max_connections,
            conn: Some(conn),
        }
    }

    /// The lease of a pinned connection, to run a command on it and then
    /// release or pin it again.
    pub(super) fn unpin(&self, mut pinned: Pinned) -> Lease<'_> {
        let held = pinned.held.take().expect("a pin holds its connection");
        match (held, self.private.as_deref()) {
            (Held::Shared(lease), _) => Lease::Shared(lease),
            (Held::Private(conn), Some(connections)) => {
                Lease::Private(self.private_lease(connections, &pinned.server, conn))
            }
            (Held::Private(_), None) => {
                unreachable!("a private pin comes from a private database")
            }
        }
    }

    /// `conn` unless it is past `connection_ttl`, older than the server's
    /// last failure, or closed by the server while idle (then dropped and
    /// counted).
    fn still_usable(
        &self,
        server: &Server,
        mut conn: Connection,
        now: Instant,
    ) -> Option<Connection> {
        if conn.expired(self.config.connection_ttl, now) {
            self.stats.inc(Counter::DroppedTtl);
            None
        } else if server.health.outdates(conn.created()) {
            self.stats.inc(Counter::DroppedSick);
            None
        } else if conn.closed_while_idle(now) {
            // Redis `timeout`, a proxy, CLIENT KILL: found before a command
            // is written to it and fails.
            self.stats.inc(Counter::DroppedHungUp);
            None
        } else {
            Some(conn)
        }
    }

    /// A new connection to `server`; a failure makes the server sick and
    /// spaces the next attempts, which fail at once until then.
    pub(super) fn connect(&self, server: &Server, deadline: Option<Instant>) -> Result<Connection> {
        if let Err(wait) = server.health.may_connect() {
            return Err(Error::Backoff {
                server: server.location().to_string(),
                retry_in_ms: wait.as_millis().max(1),
            });
        }
        // With connection_timeout=0 (none), a server that accepts and never
        // answers the handshake would hold the worker for good: the
        // command timeout bounds it then.
        let timeout = self
            .config
            .connection_timeout
            .or(self.config.command_timeout);
        let timeout = within(timeout, deadline);
        match server.connector.connect_within(&self.stats, timeout) {
            Ok(conn) => {
                server.health.connect_succeeded();
                Ok(conn)
            }
            Err(err) => {
                server.health.mark_failed();
                server.health.connect_failed();
                Err(err.into())
            }
        }
    }
}

impl Database {
    /// Reads a server's own command table (`src/commands/learn.rs`) for a
    /// command the model does not know, on an ordinary connection of this
    /// database to the first server that is not sick and was not asked
    /// since its last failure, by `until`. Nothing is learnt when no
    /// server qualifies or no connection comes in time: the command then
    /// goes as one the model does not know.
    pub(super) fn learn_commands(&self, until: Option<Instant>) {
        let topology = self.topology();
        let now = Instant::now();
        let Some(server) = topology
            .servers
            .iter()
            .find(|server| !server.health.is_sick(now) && self.commands.should_ask(server))
        else {
            return;
        };
        let Ok(mut lease) = self.lease(server, false, until) else {
            return;
        };
        if let Some(conn) = lease.conn() {
            // A failure broke the connection: it is closed on release.
            let _ = self.commands.learn(server, conn, until);
        }
    }
}
