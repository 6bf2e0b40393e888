//! How a command gets a way to run on a server: a lease of a private or
//! pooled connection, or the connection a task keeps between commands.
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Database;
use crate::connection::multiplexed::Multiplexed;
use crate::connection::private::PrivateLease;
use crate::connection::shared::SharedLease;
use crate::connection::{Connection, Connections, Prepared, RequestError};
use crate::error::{Error, Result};
use crate::near_cache::QueuedWrites;
use crate::protocol::Reply;
use crate::routing::rotation;
use crate::server::{RoleCheck, Server, ROLE};
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
    server: &'a Arc<Server>,
    mux: &'a Multiplexed,
    stats: &'a Stats,
    /// The bound of a new connection's handshake and preparation: the
    /// database's `command_timeout` (`connection_timeout` when that is
    /// 0), not one request's: a silent server never holds the opening
    /// for good while commands have timeouts of their own. With both 0,
    /// the timeout of the command that needs it (none: no bound, as for
    /// the command itself).
    open_timeout: Option<Duration>,
    /// [ext] The server that gave the last reply (`run_id`).
    identity: Option<Arc<str>>,
}

impl Lease<'_> {
    /// Sends one packed request and reads its reply.
    pub(super) fn request(
        &mut self,
        packed: &[u8],
        timeout: Option<Duration>,
    ) -> std::result::Result<Reply, RequestError<Error>> {
        match self {
            Lease::Private(lease) => lease
                .conn()
                .request(packed, timeout)
                .map_err(RequestError::Failed),
            Lease::Shared(lease) => lease
                .conn()
                .request(packed, timeout)
                .map_err(RequestError::Failed),
            Lease::Multiplexed(lease) => {
                let (reply, identity) = lease.mux.request(
                    packed,
                    timeout,
                    lease.open_timeout,
                    lease.server,
                    lease.stats,
                )?;
                lease.identity = identity;
                Ok(reply)
            }
        }
    }

    /// Out of step with the server (a request failed, or stray bytes came
    /// after a reply): closed when released. A multiplexed connection
    /// deals with its failures itself.
    pub(super) fn is_broken(&self) -> bool {
        match self {
            Lease::Private(lease) => lease.is_broken(),
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

    /// [ext] The `run_id` of the server that gave the last reply on this
    /// lease, if known.
    pub(super) fn identity(&mut self) -> Option<Arc<str>> {
        match self {
            Lease::Multiplexed(lease) => lease.identity.clone(),
            _ => self
                .conn()
                .and_then(|conn| conn.prepared().identity().cloned()),
        }
    }

    /// What the connection behind this lease was prepared as, read and
    /// recorded by its server's preparation.
    fn with_prepared<R>(&mut self, f: impl FnOnce(&mut Prepared) -> R) -> R {
        match self {
            Lease::Private(lease) => f(lease.conn().prepared_mut()),
            Lease::Shared(lease) => f(lease.conn().prepared_mut()),
            Lease::Multiplexed(lease) => lease.mux.with_prepared(f),
        }
    }

    /// The whole connection this lease holds, if it holds one.
    fn conn(&mut self) -> Option<&mut Connection> {
        match self {
            Lease::Private(lease) => Some(lease.conn()),
            Lease::Shared(lease) => Some(lease.conn()),
            Lease::Multiplexed(_) => None,
        }
    }

    /// Hands the connection to the task, beyond this command.
    /// `None` for a place on a multiplexed connection, which only takes
    /// commands that leave nothing to keep.
    pub(super) fn pin(self, server: Arc<Server>, stats: &Arc<Stats>) -> Option<Pinned> {
        let held = match self {
            Lease::Private(lease) => Held::Private(lease.into_owned()),
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

/// What one task keeps of a database between its commands: what it left
/// on its connection, and that connection while it matters. Lives in the
/// task's reply slot of the database object and ends with it.
#[derive(Default)]
pub struct TaskConnection {
    pub(super) session: Session,
    pub(super) pinned: Option<Pinned>,
    /// [ext] `near_cache`: the keys its open transaction writes.
    pub(super) queued_writes: QueuedWrites,
}

/// A connection kept by one task, from `MULTI` / `WATCH` to `EXEC`,
/// `DISCARD` or `UNWATCH`, or from a command that changed its state
/// (`SELECT`...) to the end of the task: the task's commands all go there,
/// and no other task gets it meanwhile (in shared mode it keeps its place
/// in the pool). The server is held too: it stays valid whatever the
/// topology becomes meanwhile.
pub(super) struct Pinned {
    pub(super) server: Arc<Server>,
    held: Option<Held>,
    stats: Arc<Stats>,
}

enum Held {
    Private(PrivateLease<'static>),
    Shared(SharedLease),
}

impl Drop for Pinned {
    /// The task ended with the connection pinned: it still holds queued
    /// commands, watched keys or a changed state, so it is closed, never
    /// handed to another task.
    fn drop(&mut self) {
        if let Some(mut held) = self.held.take() {
            match &mut held {
                Held::Private(lease) => lease.conn().retire(),
                Held::Shared(lease) => lease.conn().retire(),
            }
            self.stats.inc(Counter::DroppedState);
        }
    }
}

impl Pinned {
    /// The lease of the pinned connection, to run a command on it and then
    /// release or pin it again.
    pub(super) fn into_lease(mut self) -> Lease<'static> {
        match self.held.take().expect("a pin holds its connection") {
            Held::Private(lease) => Lease::Private(lease),
            Held::Shared(lease) => Lease::Shared(lease),
        }
    }
}

impl Database {
    /// A connection to `server`: this thread's idle one or a new one in
    /// private mode, the one in the pool or a new one in shared mode,
    /// waiting for a pooled one until `deadline` at most; with [ext]
    /// `pipelining=true`, a place on a multiplexed connection when
    /// `shares` (the command may share one, and need not follow another
    /// request on its connection, as after `ASKING`). A connection is
    /// prepared (`READONLY`) with the request `timeout`, by `deadline`.
    pub(super) fn lease<'a>(
        &'a self,
        server: &'a Arc<Server>,
        shares: bool,
        deadline: Option<Instant>,
        timeout: Option<Duration>,
    ) -> Result<Lease<'a>> {
        Ok(match &*server.connections {
            Connections::Private(access) => {
                Lease::Private(access.get(&**server, deadline, timeout)?)
            }
            Connections::Pooled(pool) => {
                Lease::Shared(pool.get(&self.stats, &**server, deadline, timeout)?)
            }
            Connections::Pipelined(pipelined) if shares => Lease::Multiplexed(MuxLease {
                server,
                mux: pipelined.multiplexed(rotation()),
                stats: &self.stats,
                open_timeout: self
                    .config
                    .command_timeout
                    .or(self.config.connection_timeout)
                    .or(timeout),
                identity: None,
            }),
            Connections::Pipelined(pipelined) => Lease::Shared(pipelined.pool.get(
                &self.stats,
                &**server,
                deadline,
                timeout,
            )?),
        })
    }
}

impl Database {
    /// The last step of the preparation of `lease`'s connection, before
    /// an attempt's command (`src/server/prepare.rs`): `ROLE`, if its
    /// server takes it there, within `timeout`; what it said (`None`: not
    /// asked) is recorded in the server. A failure fails the attempt, its
    /// connection dropped (counted).
    pub(super) fn check_role(
        &self,
        lease: &mut Lease<'_>,
        server: &Server,
        timeout: Option<Duration>,
    ) -> Result<Option<RoleCheck>> {
        if !lease.with_prepared(|prepared| server.takes_role(prepared)) {
            return Ok(None);
        }
        let reply = self.request(lease, server, ROLE, timeout)?;
        Ok(Some(server.role_checked(reply)))
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
        let timeout = self.config.command_timeout;
        let Ok(mut lease) = self.lease(server, false, until, timeout) else {
            return;
        };
        if let Some(conn) = lease.conn() {
            // A failure broke the connection: it is closed on release.
            let _ = self.commands.learn(server, conn, until);
        }
    }
}
