//! Connections to one Redis server, and the two ways workers hold them:
//! [`private`] (per worker thread, no lock) and [`shared`] (one bounded pool).
//!
//! The wire protocol is ours ([`resp`]): plain blocking sockets with
//! timeouts, requests packed once by [`crate::protocol::Command`], replies
//! parsed without recursion and within size limits.
mod gate;
pub(crate) mod lookup;
pub(crate) mod multiplexed;
pub mod private;
pub mod shared;
mod tls_stream;

use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use tls_stream::TlsStream;

use crate::config::{Location, Protocol};
use crate::error::{Error, Result};
use crate::protocol::Command;
use crate::protocol::{resp, Reply};
use crate::stats::{Counter, Stats};
use crate::tls::Tls;

/// How to open a connection to one server: address, credentials, protocol
/// and connect timeout, fixed when the database object is created.
#[derive(Clone)]
pub struct Connector {
    /// Where the server is: the one type for it ([`Location`]).
    location: Location,
    /// Its text, as logs and stats show it (made once).
    name: String,
    /// The request sent right after connecting (HELLO / AUTH), if any.
    handshake: Option<Vec<u8>>,
    /// The handshake is `HELLO` (a protocol was asked for).
    sends_hello: bool,
    /// `AUTH`, if there is a password, for a server that does not know
    /// `HELLO` (Redis < 6, or `HELLO` renamed away).
    auth_without_hello: Option<Vec<u8>>,
    connect_timeout: Option<Duration>,
    /// `tls=true`: the session settings every connection starts from.
    tls: Option<Tls>,
}

impl std::fmt::Debug for Connector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // No handshake: it holds the password.
        f.debug_struct("Connector")
            .field("location", &self.name)
            .field("connect_timeout", &self.connect_timeout)
            .finish()
    }
}

impl Connector {
    pub fn new(
        location: &Location,
        user: Option<&str>,
        password: Option<&str>,
        protocol: Protocol,
        connect_timeout: Option<Duration>,
        tls: Option<Tls>,
    ) -> Result<Self> {
        Ok(Connector {
            location: location.clone(),
            name: location.to_string(),
            handshake: handshake(user, password, protocol),
            sends_hello: protocol != Protocol::Default,
            auth_without_hello: handshake(user, password, Protocol::Default),
            connect_timeout,
            tls,
        })
    }

    /// The server's location as logs and stats show it.
    pub fn location(&self) -> &str {
        &self.name
    }

    /// Opens a connection (HELLO / AUTH included), counting the outcome.
    pub fn connect(&self, stats: &Stats) -> Result<Connection> {
        self.connect_within(stats, self.connect_timeout)
    }

    /// As [`Connector::connect`], with `timeout` bounding the connect and
    /// the handshake instead of `connection_timeout`.
    pub(crate) fn connect_within(
        &self,
        stats: &Stats,
        timeout: Option<Duration>,
    ) -> Result<Connection> {
        match self.open(timeout) {
            Ok(conn) => {
                stats.inc(Counter::ConnectionsTotal);
                Ok(conn)
            }
            Err(detail) => {
                stats.inc(Counter::ConnectionsFailed);
                Err(Error::Connect {
                    server: self.name.clone(),
                    detail,
                })
            }
        }
    }

    /// Connects, TLS and HELLO / AUTH included, all of it within
    /// `timeout` (the name lookup and a UNIX connect too).
    fn open(&self, timeout: Option<Duration>) -> std::result::Result<Connection, String> {
        let limit = Limit::within(timeout);
        // The socket timeout the TLS handshake left on the socket.
        let mut armed = None;
        let stream = match &self.location {
            Location::Tcp { host, port } => {
                let addrs = resolve(host, *port, limit)
                    .map_err(|err| format!("cannot resolve {host}: {err}"))?;
                let stream = connect_any(&addrs, limit).map_err(|e| e.to_string())?;
                // Requests are single writes; never wait for Nagle.
                stream.set_nodelay(true).map_err(|e| e.to_string())?;
                match &self.tls {
                    Some(tls) => {
                        let mut arm_tls = |sock: &TcpStream| arm(sock, &mut armed, limit);
                        let shaken = tls_stream::handshake(tls, host, stream, &mut arm_tls)?;
                        Stream::Tls(Box::new(shaken))
                    }
                    None => Stream::Tcp(stream),
                }
            }
            Location::Unix(path) => Stream::Unix(connect_unix(path, limit)?),
        };
        let mut conn = Connection {
            stream,
            buf: Vec::new(),
            start: 0,
            end: 0,
            created: Instant::now(),
            last_used: Instant::now(),
            role_asked: false,
            readonly_sent: false,
            armed,
            broken: false,
            scan: resp::ScanState::default(),
        };
        if let Some(handshake) = &self.handshake {
            // The handshake is bounded by the connect timeout too.
            if let Some(text) = conn.handshake(handshake, limit)? {
                if !(self.sends_hello && text.starts_with("ERR unknown command")) {
                    return Err(refusal(&text));
                }
                // No HELLO here: as redis-rs does, AUTH alone and RESP2.
                if let Some(auth) = &self.auth_without_hello {
                    if let Some(text) = conn.handshake(auth, limit)? {
                        return Err(refusal(&text));
                    }
                }
            }
        }
        Ok(conn)
    }
}

/// Why a handshake was refused, without the server's text: an error reply
/// to `HELLO` or `AUTH` may quote the command, password included (`ERR
/// unknown command 'HELLO', with args beginning with: ...`). Only its code
/// (the first word, when it is one: `WRONGPASS`, `NOAUTH`, `ERR`) is kept.
fn refusal(text: &str) -> String {
    let code = text
        .split(' ')
        .next()
        .filter(|code| (1..=32).contains(&code.len()))
        .filter(|code| code.bytes().all(|b| b.is_ascii_uppercase()))
        .unwrap_or("error");
    let what = if code == "WRONGPASS" || text.contains("invalid password") {
        "authentication failed"
    } else {
        "handshake refused"
    };
    format!("{what} ({code} reply; its text is not shown as it may quote the password)")
}

/// An error reply as it may be logged: Redis quotes the arguments of a
/// command it does not know (`ERR unknown command 'HELLO', with args
/// beginning with: '3' 'AUTH' 'default' '<password>'`), and those may be
/// secrets; the quote is cut.
pub(crate) fn loggable_error(text: &str) -> &str {
    match text.find(", with args beginning with:") {
        Some(at) => &text[..at],
        None => text,
    }
}

/// The first request of a connection: `HELLO <2|3> [AUTH user pass]` when a
/// protocol is asked for, else `AUTH [user] pass` when there is a password.
fn handshake(user: Option<&str>, password: Option<&str>, protocol: Protocol) -> Option<Vec<u8>> {
    let explicit_user = user;
    let user = user.unwrap_or("default");
    let mut command = match protocol {
        Protocol::Resp2 | Protocol::Resp3 => {
            let mut hello = Command::new(b"HELLO");
            hello.push(if protocol == Protocol::Resp3 {
                b"3"
            } else {
                b"2"
            });
            if let Some(password) = password {
                hello.push(b"AUTH");
                hello.push(user.as_bytes());
                hello.push(password.as_bytes());
            }
            hello
        }
        Protocol::Default => {
            let password = password?;
            let mut auth = Command::new(b"AUTH");
            if let Some(user) = explicit_user {
                auth.push(user.as_bytes());
            }
            auth.push(password.as_bytes());
            auth
        }
    };
    Some(command.packed().to_vec())
}

/// When an exchange on a connection (or the opening of one) must be
/// over. Every socket wait is armed with the time left before it, so that
/// neither one wait nor their sum (a reply, a TLS record arriving a byte at
/// a time) ends past it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limit {
    /// None: no bound (no timeout, or one past what the clock holds).
    deadline: Option<Instant>,
}

/// A socket already armed with a timeout at most this much longer than the
/// time left keeps it: consecutive commands with the same timeout cost no
/// system call, and a wait ends at most this late.
const REARM_SLACK: Duration = Duration::from_millis(1);

impl Limit {
    /// `timeout` from now (none: no bound).
    pub(crate) fn within(timeout: Option<Duration>) -> Limit {
        Limit {
            deadline: timeout.and_then(|timeout| Instant::now().checked_add(timeout)),
        }
    }

    pub(crate) fn by(deadline: Option<Instant>) -> Limit {
        Limit { deadline }
    }

    /// The socket timeout of the next wait: the time left (`TimedOut` when
    /// it is spent), or none.
    fn wait(self) -> io::Result<Option<Duration>> {
        match self.deadline {
            None => Ok(None),
            Some(deadline) => {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    Err(io::ErrorKind::TimedOut.into())
                } else {
                    Ok(Some(left))
                }
            }
        }
    }
}

/// A blocking socket whose waits take a timeout.
trait Timeouts {
    fn set_timeouts(&self, timeout: Option<Duration>) -> io::Result<()>;
}

impl Timeouts for TcpStream {
    fn set_timeouts(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.set_read_timeout(timeout)
            .and_then(|()| self.set_write_timeout(timeout))
    }
}

impl Timeouts for UnixStream {
    fn set_timeouts(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.set_read_timeout(timeout)
            .and_then(|()| self.set_write_timeout(timeout))
    }
}

/// Arms `sock` for one wait that must end by `limit`; `armed` is the
/// timeout the socket has now (kept when close enough: no system call).
fn arm(sock: &impl Timeouts, armed: &mut Option<Duration>, limit: Limit) -> io::Result<()> {
    let wait = limit.wait()?;
    let close_enough = match (*armed, wait) {
        (Some(armed), Some(wait)) => armed >= wait && armed - wait <= REARM_SLACK,
        (armed, wait) => armed == wait,
    };
    if !close_enough {
        sock.set_timeouts(wait)?;
        *armed = wait;
    }
    Ok(())
}

/// The addresses of `host`: an IP address as it is, a name looked up
/// within `limit` ([`lookup`]).
fn resolve(host: &str, port: u16, limit: Limit) -> io::Result<Vec<SocketAddr>> {
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(vec![SocketAddr::new(ip, port)]);
    }
    let mut addrs = lookup::lookup(host, limit)?;
    for addr in &mut addrs {
        addr.set_port(port);
    }
    Ok(addrs)
}

/// Longest pause between two attempts of a UNIX connect to a full accept
/// queue.
const UNIX_RETRY_MAX: Duration = Duration::from_millis(10);

/// A UNIX-socket connect within `limit`, on this thread. A blocking
/// connect waits while the server's accept queue is full (a frozen
/// server), with no timeout; a non-blocking one fails at once (`EAGAIN`)
/// instead: it is tried again after short pauses until `limit`, then the
/// socket is made blocking again.
fn connect_unix(path: &Path, limit: Limit) -> std::result::Result<UnixStream, String> {
    if limit.deadline.is_none() {
        return UnixStream::connect(path).map_err(|e| e.to_string());
    }
    let addr = socket2::SockAddr::unix(path).map_err(|e| e.to_string())?;
    let socket = socket2::Socket::new(socket2::Domain::UNIX, socket2::Type::STREAM, None)
        .map_err(|e| e.to_string())?;
    socket.set_nonblocking(true).map_err(|e| e.to_string())?;
    let mut pause = Duration::from_millis(1);
    loop {
        match socket.connect(&addr) {
            Ok(()) => break,
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            Err(err) if err.kind() == io::ErrorKind::WouldBlock => {
                let left = limit.wait().map_err(|_| "timeout".to_string())?;
                std::thread::sleep(pause.min(left.unwrap_or(pause)));
                pause = (pause * 2).min(UNIX_RETRY_MAX);
            }
            Err(err) => return Err(err.to_string()),
        }
    }
    socket.set_nonblocking(false).map_err(|e| e.to_string())?;
    Ok(UnixStream::from(std::os::fd::OwnedFd::from(socket)))
}

fn connect_any(addrs: &[SocketAddr], limit: Limit) -> io::Result<TcpStream> {
    let mut last = io::Error::new(io::ErrorKind::NotFound, "no address");
    for addr in addrs {
        let attempt = match limit.wait() {
            Ok(Some(left)) => TcpStream::connect_timeout(addr, left),
            Ok(None) => TcpStream::connect(addr),
            Err(_) if last.kind() != io::ErrorKind::NotFound => return Err(last),
            Err(spent) => return Err(spent),
        };
        match attempt {
            Ok(stream) => return Ok(stream),
            Err(err) => last = err,
        }
    }
    Err(last)
}

enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
    /// Boxed: a TLS session is large, and connections are moved around.
    Tls(Box<TlsStream>),
}

impl Stream {
    fn set_nonblocking(&self, nonblocking: bool) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_nonblocking(nonblocking),
            Stream::Unix(s) => s.set_nonblocking(nonblocking),
            Stream::Tls(s) => s.sock.set_nonblocking(nonblocking),
        }
    }

    /// Writes all of `bytes`, each wait armed to end by `limit`.
    fn write_all(
        &mut self,
        bytes: &[u8],
        armed: &mut Option<Duration>,
        limit: Limit,
    ) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => write_all(s, bytes, armed, limit),
            Stream::Unix(s) => write_all(s, bytes, armed, limit),
            Stream::Tls(s) => tls_stream::write_all(s, bytes, &mut |sock| arm(sock, armed, limit)),
        }
    }

    /// Reads some bytes, the wait armed to end by `limit`.
    fn read(
        &mut self,
        buf: &mut [u8],
        armed: &mut Option<Duration>,
        limit: Limit,
    ) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => arm(s, armed, limit).and_then(|()| s.read(buf)),
            Stream::Unix(s) => arm(s, armed, limit).and_then(|()| s.read(buf)),
            Stream::Tls(s) => tls_stream::read(s, buf, &mut |sock| arm(sock, armed, limit)),
        }
    }

    /// Reads what is there without waiting (the socket is non-blocking).
    fn read_now(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            Stream::Unix(s) => s.read(buf),
            Stream::Tls(s) => tls_stream::read(s, buf, &mut |_| Ok(())),
        }
    }
}

/// `write_all` on a plain socket, each write armed to end by `limit`.
fn write_all<S: Timeouts + Write>(
    sock: &mut S,
    mut bytes: &[u8],
    armed: &mut Option<Duration>,
    limit: Limit,
) -> io::Result<()> {
    while !bytes.is_empty() {
        arm(sock, armed, limit)?;
        match sock.write(bytes) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(written) => bytes = &bytes[written..],
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            Err(err) => return Err(err),
        }
    }
    Ok(())
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
    /// `ROLE` was sent on it (`type=auto`): never twice per connection.
    role_asked: bool,
    /// `READONLY` was sent on it (a cluster replica serving reads): once
    /// per connection, as the mode lasts as long as the connection.
    readonly_sent: bool,
    /// The socket timeout currently set, to skip setsockopt calls when
    /// consecutive commands use the same timeout.
    armed: Option<Duration>,
    broken: bool,
    /// How far the reply in `buf[start..end]` has been scanned.
    scan: resp::ScanState,
}

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

    pub(crate) fn role_asked(&self) -> bool {
        self.role_asked
    }

    pub(crate) fn set_role_asked(&mut self) {
        self.role_asked = true;
    }

    pub(crate) fn readonly_sent(&self) -> bool {
        self.readonly_sent
    }

    pub(crate) fn set_readonly_sent(&mut self) {
        self.readonly_sent = true;
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

    /// One handshake request: `Ok(None)` when accepted, `Ok(Some(text))`
    /// for an error reply, `Err` (no server text) when it got no reply.
    fn handshake(
        &mut self,
        packed: &[u8],
        limit: Limit,
    ) -> std::result::Result<Option<String>, String> {
        match self.request_by(packed, limit) {
            Ok(Reply::Error(text)) => Ok(Some(text)),
            Ok(_) => Ok(None),
            Err(failure) => Err(format!("handshake failed: {failure}")),
        }
    }

    /// Sends one packed request and reads its reply (error replies are
    /// replies, not failures), all of it within `timeout` (none: no
    /// bound). A failure marks the connection broken.
    pub fn request(
        &mut self,
        packed: &[u8],
        timeout: Option<Duration>,
    ) -> std::result::Result<Reply, Failure> {
        self.request_by(packed, Limit::within(timeout))
    }

    fn request_by(&mut self, packed: &[u8], limit: Limit) -> std::result::Result<Reply, Failure> {
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
    pub(crate) fn send(
        &mut self,
        packed: &[u8],
        timeout: Option<Duration>,
    ) -> std::result::Result<(), Failure> {
        let sent = self.write_requests(packed, Limit::within(timeout));
        if sent.is_err() {
            self.broken = true;
        }
        sent
    }

    /// Pub/Sub: the next message (a RESP3 push included) or reply, waiting
    /// at most `wait`. A timeout is not a failure here: bytes of a message
    /// that has not fully arrived stay buffered for the next call.
    pub(crate) fn receive(&mut self, wait: Duration) -> std::result::Result<Reply, Failure> {
        let limit = Limit::within(Some(wait.max(Duration::from_millis(1))));
        loop {
            let scanned = resp::scan_from(&self.buf[self.start..self.end], &mut self.scan);
            match scanned {
                Ok(Some(len)) => {
                    let built = resp::build(&self.buf[self.start..self.start + len]);
                    self.start += len;
                    if self.start == self.end {
                        self.start = 0;
                        self.end = 0;
                    }
                    return built.map_err(|err| {
                        self.broken = true;
                        err.into()
                    });
                }
                Ok(None) => {}
                Err(err) => {
                    self.broken = true;
                    return Err(err.into());
                }
            }
            match self.fill(limit) {
                Ok(()) => {}
                Err(Failure::Timeout) => return Err(Failure::Timeout),
                Err(failure) => {
                    self.broken = true;
                    return Err(failure);
                }
            }
        }
    }

    fn exchange(&mut self, packed: &[u8], limit: Limit) -> std::result::Result<Reply, Failure> {
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
    pub(crate) fn write_requests(
        &mut self,
        packed: &[u8],
        limit: Limit,
    ) -> std::result::Result<(), Failure> {
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
    pub(crate) fn read_reply(&mut self, limit: Limit) -> std::result::Result<Reply, Failure> {
        self.read_raw_reply(limit, resp::build)?
            .map_err(Failure::from)
    }

    /// Reads the next reply, skipping RESP3 pushes, by `limit`, and gives
    /// its bytes (the whole RESP value) to `take`.
    pub(crate) fn read_raw_reply<R>(
        &mut self,
        limit: Limit,
        mut take: impl FnMut(&[u8]) -> R,
    ) -> std::result::Result<R, Failure> {
        loop {
            if let Some(len) = resp::scan_from(&self.buf[self.start..self.end], &mut self.scan)? {
                let bytes = &self.buf[self.start..self.start + len];
                // An out-of-band push (RESP3) is not a reply.
                let push = resp::is_push(bytes);
                let taken = (!push).then(|| take(bytes));
                self.start += len;
                if self.start == self.end {
                    self.start = 0;
                    self.end = 0;
                    if self.buf.len() > KEEP_BUFFER {
                        self.buf = Vec::new();
                    }
                }
                if let Some(taken) = taken {
                    self.last_used = Instant::now();
                    return Ok(taken);
                }
                continue;
            }
            self.fill(limit)?;
        }
    }

    /// Reads more bytes into the buffer (at least one, or an error).
    fn fill(&mut self, limit: Limit) -> std::result::Result<(), Failure> {
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
