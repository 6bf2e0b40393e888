//! Connections to one Redis server, and the three ways workers hold
//! them: [`private`] (per worker thread, no lock), [`shared`] (one bounded
//! pool, behind a first-come-first-served [`gate`]) and [`multiplexed`]
//! (`pipelining=true`: many workers' requests on one connection).
//!
//! A connection is opened by a [`Connector`] (`connector.rs`: address,
//! connect timeout, `HELLO` / `AUTH`), on a [`stream`] (TCP, UNIX or TLS,
//! every wait bounded by a deadline). The wire protocol is ours
//! ([`crate::protocol`]): plain blocking sockets with timeouts, requests
//! packed once by [`crate::protocol::Command`], replies parsed without
//! recursion and within size limits. What a server's refusal may show in
//! a log is cut in `redact.rs`.
//!
//! How a server's workers hold its connections is one type,
//! [`Connections`] (`modes.rs`). The pools open, check and prepare
//! connections through one trait, [`ManageConnection`] (`manage.rs`),
//! which the server implements: the pools know nothing of databases.
//! What a connection was prepared as is one record kept with it,
//! [`Prepared`] (`prepared.rs`).
//!
//! The layer has its own errors (`error.rs`): [`Failure`] of a request,
//! [`ConnectError`] of an opening, [`PoolTimeout`] of a shared pool's wait,
//! [`RequestError`] of a request on a lease. `crate::error::Error` converts
//! from them; nothing here reads it, and the pools pass on, as it is,
//! whatever error their manager gives.
mod connector;
pub(crate) mod detached;
mod error;
mod gate;
mod lookup;
mod manage;
mod modes;
pub(crate) mod multiplexed;
mod prepared;
pub mod private;
mod redact;
pub mod shared;
mod stream;

use std::io;
use std::time::{Duration, Instant};

pub use connector::Connector;
pub use error::{ConnectError, Failure, OpenFailure, PoolError, PoolTimeout, RequestError};
pub use manage::ManageConnection;
pub(crate) use modes::{Connections, Pipelined};
pub(crate) use prepared::Prepared;
pub(crate) use redact::loggable_error;
use stream::Stream;
pub(crate) use stream::{within, Limit};

use crate::protocol::{resp, Reply};

/// The connection of a lease (private or shared): there until the
/// lease's drop takes it back.
struct Leased(Option<Connection>);

impl Leased {
    fn conn(&mut self) -> &mut Connection {
        self.0.as_mut().expect("a lease holds an open connection")
    }

    fn is_broken(&self) -> bool {
        self.0.as_ref().map_or(true, Connection::is_broken)
    }

    /// The connection, unless it broke: to keep for another command.
    fn take_unbroken(&mut self) -> Option<Connection> {
        self.0.take().filter(|conn| !conn.is_broken())
    }
}

/// One open connection. `broken` is set after any failure so the pool drops
/// it instead of handing it out again (its stream is out of step).
pub struct Connection {
    stream: Stream,
    /// Bytes read but not parsed yet: `buf[start..end]`.
    buf: Vec<u8>,
    start: usize,
    end: usize,
    created: Instant,
    /// When its last reply was read.
    last_used: Instant,
    /// What its server's preparation sent on it (`ROLE`, `READONLY`,
    /// `INFO server`): each once.
    prepared: Prepared,
    /// The socket timeout currently set, to skip setsockopt calls when
    /// consecutive commands use the same timeout.
    armed: Option<Duration>,
    broken: bool,
    /// How far the reply in `buf[start..end]` has been scanned.
    scan: resp::ScanState,
}

/// A connection idle this long is checked for a close by the server before
/// use. Redis closes idle clients after `timeout` whole seconds (at least
/// 1), measured from its own last exchange: a connection used less than
/// half a second ago cannot have been closed for that.
const IDLE_CHECK_AFTER: Duration = Duration::from_millis(500);

/// Bytes read from the socket at a time (and the initial buffer size).
const READ_CHUNK: usize = 16 * 1024;
/// A buffer grown larger than this by a large reply is released once the
/// reply has been read, rather than kept by the idle connection.
const KEEP_BUFFER: usize = 4 * READ_CHUNK;

impl Connection {
    /// A connection on `stream`, just opened: `armed` is the socket
    /// timeout its opening left set.
    fn new(stream: Stream, armed: Option<Duration>) -> Connection {
        let now = Instant::now();
        Connection {
            stream,
            buf: Vec::new(),
            start: 0,
            end: 0,
            created: now,
            last_used: now,
            prepared: Prepared::default(),
            armed,
            broken: false,
            scan: resp::ScanState::default(),
        }
    }

    pub fn created(&self) -> Instant {
        self.created
    }

    pub fn is_broken(&self) -> bool {
        self.broken
    }

    /// Marks the connection as not to be reused: it holds a task's
    /// transaction or a state a command changed (`SELECT`...), so it is
    /// closed when released.
    pub(crate) fn retire(&mut self) {
        self.broken = true;
    }

    /// What it was prepared as.
    pub(crate) fn prepared(&self) -> &Prepared {
        &self.prepared
    }

    pub(crate) fn prepared_mut(&mut self) -> &mut Prepared {
        &mut self.prepared
    }

    /// True when the connection, idle for [`IDLE_CHECK_AFTER`] or more,
    /// was closed by the server meanwhile (Redis `timeout`, a proxy, `CLIENT
    /// KILL`), or holds bytes nobody asked for: a command written to it
    /// would fail. A non-blocking read tells without waiting; connections in
    /// steady use skip it (its cost is three system calls).
    pub(crate) fn closed_while_idle(&mut self, now: Instant) -> bool {
        if now.saturating_duration_since(self.last_used) < IDLE_CHECK_AFTER {
            return false;
        }
        self.last_used = now;
        let mut byte = [0u8; 1];
        let closed = self.stream.set_nonblocking(true).is_err()
            || !matches!(self.stream.read_now(&mut byte), Err(err) if err.kind() == io::ErrorKind::WouldBlock);
        closed || self.stream.set_nonblocking(false).is_err()
    }

    /// True once the connection has lived `ttl`.
    pub fn expired(&self, ttl: Option<Duration>, now: Instant) -> bool {
        ttl.is_some_and(|ttl| now.duration_since(self.created) >= ttl)
    }

    /// Sends one packed request and reads its reply (error replies are
    /// replies, not failures), all of it within `timeout` (none: no
    /// bound). A failure marks the connection broken.
    pub fn request(&mut self, packed: &[u8], timeout: Option<Duration>) -> Result<Reply, Failure> {
        self.request_by(packed, Limit::within(timeout))
    }

    /// As [`Connection::request`], all of it within `limit`.
    pub(crate) fn request_by(&mut self, packed: &[u8], limit: Limit) -> Result<Reply, Failure> {
        if self.broken {
            // Out of step (see `exchange`): what it reads next would not be
            // the reply to `packed`.
            return Err(resp::ProtocolError::Malformed("bytes after the previous reply").into());
        }
        let result = self.exchange(packed, limit);
        if result.is_err() {
            self.broken = true;
        }
        result
    }

    /// Pub/Sub: writes a packed request without reading its reply (a
    /// subscription's acknowledgements come back as messages).
    #[cfg(test)]
    pub(crate) fn send(&mut self, packed: &[u8], timeout: Option<Duration>) -> Result<(), Failure> {
        self.send_by(packed, Limit::within(timeout))
    }

    /// As [`Connection::send`], within `limit`.
    pub(crate) fn send_by(&mut self, packed: &[u8], limit: Limit) -> Result<(), Failure> {
        let sent = self.write_requests(packed, limit);
        if sent.is_err() {
            self.broken = true;
        }
        sent
    }

    /// Pub/Sub: the next message (a RESP3 push included) or reply, waiting
    /// at most `wait`. A timeout is not a failure here: bytes of a message
    /// that has not fully arrived stay buffered for the next call.
    pub(crate) fn receive(&mut self, wait: Duration) -> Result<Reply, Failure> {
        let limit = Limit::within(Some(wait.max(Duration::from_millis(1))));
        let received = self
            .read_next(limit, false, resp::build)
            .and_then(|built| built.map_err(Failure::from));
        match received {
            Err(Failure::Timeout) => Err(Failure::Timeout),
            Err(failure) => {
                self.broken = true;
                Err(failure)
            }
            message => message,
        }
    }

    fn exchange(&mut self, packed: &[u8], limit: Limit) -> Result<Reply, Failure> {
        self.write_requests(packed, limit)?;
        let reply = self.read_reply(limit)?;
        // Bytes after the reply, unless a RESP3 push, answer no request of
        // ours: the stream is out of step, and the next command must not
        // read them as its reply.
        if self.start != self.end && !resp::is_push(&self.buf[self.start..self.end]) {
            self.broken = true;
        }
        Ok(reply)
    }

    /// Writes packed requests (one or several), done by `limit`.
    pub(crate) fn write_requests(&mut self, packed: &[u8], limit: Limit) -> Result<(), Failure> {
        Ok(self.stream.write_all(packed, &mut self.armed, limit)?)
    }

    /// Whether a whole reply (or push) is already buffered: reading it
    /// costs no system call.
    pub(crate) fn has_buffered_reply(&mut self) -> bool {
        matches!(
            resp::scan_from(&self.buf[self.start..self.end], &mut self.scan),
            Ok(Some(_))
        )
    }

    /// Reads the next reply, skipping RESP3 pushes, by `limit`. Bytes
    /// after it stay buffered for the next read: the replies of later
    /// requests when several were written.
    pub(crate) fn read_reply(&mut self, limit: Limit) -> Result<Reply, Failure> {
        self.read_raw_reply(limit, resp::build)?
            .map_err(Failure::from)
    }

    /// Reads the next reply, skipping RESP3 pushes, by `limit`, and gives
    /// its bytes (the whole RESP value) to `take`.
    pub(crate) fn read_raw_reply<R>(
        &mut self,
        limit: Limit,
        take: impl FnMut(&[u8]) -> R,
    ) -> Result<R, Failure> {
        let taken = self.read_next(limit, true, take)?;
        self.last_used = Instant::now();
        Ok(taken)
    }

    /// The one read path: the next RESP value (reading more by `limit` until
    /// it is whole) given to `take`, RESP3 pushes passed over when
    /// `skip_pushes` (they answer no request). Bytes after it stay
    /// buffered: the replies of later requests when several were written.
    fn read_next<R>(
        &mut self,
        limit: Limit,
        skip_pushes: bool,
        mut take: impl FnMut(&[u8]) -> R,
    ) -> Result<R, Failure> {
        loop {
            if let Some(len) = resp::scan_from(&self.buf[self.start..self.end], &mut self.scan)? {
                let bytes = &self.buf[self.start..self.start + len];
                let skipped = skip_pushes && resp::is_push(bytes);
                let taken = (!skipped).then(|| take(bytes));
                self.start += len;
                if self.start == self.end {
                    self.start = 0;
                    self.end = 0;
                    if self.buf.len() > KEEP_BUFFER {
                        self.buf = Vec::new();
                    }
                }
                if let Some(taken) = taken {
                    return Ok(taken);
                }
                continue;
            }
            self.fill(limit)?;
        }
    }

    /// Reads more bytes into the buffer (at least one, or an error).
    fn fill(&mut self, limit: Limit) -> Result<(), Failure> {
        if self.start > 0 && self.buf.len() - self.end < READ_CHUNK {
            // Move the unparsed bytes to the front before growing.
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.buf.len() - self.end < READ_CHUNK {
            if self.end > resp::MAX_REPLY_BYTES + READ_CHUNK {
                return Err(resp::ProtocolError::TooLarge.into());
            }
            // Never more than a reply of the largest size needs.
            let grown = (self.buf.len() * 2)
                .max(self.end + READ_CHUNK)
                .min(resp::MAX_REPLY_BYTES + 2 * READ_CHUNK);
            self.buf.resize(grown, 0);
        }
        match self
            .stream
            .read(&mut self.buf[self.end..], &mut self.armed, limit)
        {
            Ok(0) => Err(Failure::HungUp(io::ErrorKind::UnexpectedEof.into())),
            Ok(read) => {
                self.end += read;
                Ok(())
            }
            Err(err) if err.kind() == io::ErrorKind::Interrupted => Ok(()),
            Err(err) => Err(err.into()),
        }
    }
}

#[cfg(test)]
mod tests;
