//! The connection layer's own errors. `crate::error::Error` (what VCL
//! logs) converts from them, with the server they concern.
use std::io;

use crate::protocol::resp;

/// How a request on a connection failed at the transport level.
#[derive(Debug, thiserror::Error)]
pub enum Failure {
    /// The server closed the connection (`connections.dropped.hung_up`).
    #[error("connection closed by the server: {0}")]
    HungUp(io::Error),
    /// A timeout expired (`connections.dropped.error`).
    #[error("timeout")]
    Timeout,
    /// Any other I/O error (`connections.dropped.error`).
    #[error("{0}")]
    Io(io::Error),
    /// The reply broke the protocol or its limits (`connections.dropped.error`).
    #[error("{0}")]
    Protocol(#[from] resp::ProtocolError),
}

impl From<io::Error> for Failure {
    fn from(err: io::Error) -> Self {
        match err.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => Failure::Timeout,
            io::ErrorKind::UnexpectedEof
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::BrokenPipe => Failure::HungUp(err),
            _ => Failure::Io(err),
        }
    }
}

/// Why no connection could be opened (resolving, connecting, TLS,
/// `HELLO` / `AUTH`): counted in `connections.failed`.
#[derive(Debug, thiserror::Error)]
#[error("cannot connect to {server}: {detail}")]
pub struct ConnectError {
    /// The server, as logs and stats show it.
    pub(crate) server: String,
    /// What failed; never the server's text of a refused handshake
    /// (`redact.rs`).
    pub(crate) detail: String,
    /// How far the opening got: what tells a dead server from a busy one.
    pub(crate) failure: OpenFailure,
}

/// How far a failed opening got.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpenFailure {
    /// No socket: the name lookup or the TCP / UNIX connect failed
    /// (refused, reset, unreachable, timed out).
    Unreachable,
    /// Connected, and the handshake (TLS, `HELLO` / `AUTH`) ended with an
    /// answer: refused, closed by the server, not TLS, a bad certificate.
    Refused,
    /// Connected, and the server said nothing in time during the
    /// handshake: busy (`DEBUG SLEEP`, a long script) or frozen.
    Silent,
}

/// No connection of a shared pool came free by the caller's deadline.
#[derive(Debug, thiserror::Error)]
#[error("no connection to {server} within {waited_ms} ms (pool of {pool_size}): all {pool_size} connections in use")]
pub struct PoolTimeout {
    pub(crate) server: String,
    pub(crate) waited_ms: u128,
    pub(crate) pool_size: u32,
}

/// Why a shared pool gave no connection: its wait ended, or its manager's
/// checkout (open or prepare a connection) failed with `E`.
#[derive(Debug, thiserror::Error)]
pub enum PoolError<E> {
    #[error("{0}")]
    Timeout(PoolTimeout),
    #[error("{0}")]
    Checkout(E),
}

/// Why a request on a lease of a connection got no reply.
#[derive(Debug)]
pub enum RequestError<E> {
    /// No connection could be opened or prepared (a multiplexed connection
    /// opens when a worker drives it): the manager's error.
    Connect(E),
    /// This worker's own write or read failed, and the connection with
    /// it: count it as dropped.
    Failed(Failure),
    /// No reply, but the connection was not dropped by this worker: its
    /// wait ended at its deadline, or another worker's read failed (and
    /// counted the drop).
    Collateral(Failure),
    /// Its deadline passed while the server was not at fault (a
    /// multiplexed connection): before it was written (queued, or behind
    /// an opening), or while replies to the requests written before it
    /// kept coming. It says nothing of the server's health: the server
    /// is not marked sick for it, and the connection is kept.
    Late(Failure),
}
