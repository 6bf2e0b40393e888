//! How a connection is opened: the server's address resolved and
//! connected (TCP, UNIX) within the connect timeout, then the handshake
//! on the connected socket (TLS, `HELLO` / `AUTH`) within a bound of its
//! own (a command's timeout, as hiredis). A failure says how far it got
//! ([`OpenFailure`]).
use std::io;
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use super::redact::refusal;
use super::stream::{within, Limit, Stream};
use super::{lookup, ConnectError, Connection, Failure, OpenFailure};
use crate::config::{Location, Protocol};
use crate::protocol::{Command, Reply};
use crate::stats::{Counter, Stats};
use crate::tls::Tls;

/// How to open a connection to one server: address, credentials, protocol
/// and connect timeout, fixed when the database object is created.
#[derive(Clone)]
pub struct Connector {
    /// Where the server is: the one type for it ([`Location`]).
    location: Location,
    /// Its text (`Display`), made once for connection errors.
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
    ) -> Self {
        Connector {
            location: location.clone(),
            name: location.to_string(),
            handshake: handshake(user, password, protocol),
            sends_hello: protocol != Protocol::Default,
            auth_without_hello: handshake(user, password, Protocol::Default),
            connect_timeout,
            tls,
        }
    }

    /// Where the server is.
    pub fn location(&self) -> &Location {
        &self.location
    }

    /// Opens a connection (HELLO / AUTH included), counting the outcome,
    /// all of it within `connection_timeout`.
    pub fn connect(&self, stats: &Stats) -> Result<Connection, ConnectError> {
        self.connect_by(stats, Limit::within(self.connect_timeout))
    }

    /// As [`Connector::connect`], the name lookup and the TCP / UNIX
    /// connect within `connect`, then the handshake on the connected
    /// socket (TLS, `HELLO` / `AUTH`) within `handshake` from when it
    /// starts, as hiredis's socket timeout (the command timeout) bounds it;
    /// all of it by `by` (none: no bound of its own).
    pub(crate) fn connect_staged(
        &self,
        stats: &Stats,
        connect: Option<Duration>,
        handshake: Option<Duration>,
        by: Option<Instant>,
    ) -> Result<Connection, ConnectError> {
        let connect = Limit::within(within(connect, by));
        let opened = self.open(connect, || Limit::within(within(handshake, by)));
        self.counted(stats, opened)
    }

    /// As [`Connector::connect`], all of it within `limit` (which a stop
    /// flag may end: [`Limit::or_stop`]).
    pub(crate) fn connect_by(
        &self,
        stats: &Stats,
        limit: Limit,
    ) -> Result<Connection, ConnectError> {
        let opened = self.open(limit, || limit);
        self.counted(stats, opened)
    }

    /// Counts an opening in `connections.total` / `connections.failed`.
    fn counted(
        &self,
        stats: &Stats,
        opened: Result<Connection, (OpenFailure, String)>,
    ) -> Result<Connection, ConnectError> {
        match opened {
            Ok(conn) => {
                stats.inc(Counter::ConnectionsTotal);
                Ok(conn)
            }
            Err((failure, detail)) => {
                stats.inc(Counter::ConnectionsFailed);
                Err(ConnectError {
                    server: self.name.clone(),
                    detail,
                    failure,
                })
            }
        }
    }

    /// Connects within `connect` (the name lookup and a UNIX connect too),
    /// then does the handshake (TLS, HELLO / AUTH) within the limit
    /// `handshake` gives once the socket is connected.
    fn open<'a>(
        &self,
        connect: Limit<'a>,
        handshake: impl FnOnce() -> Limit<'a>,
    ) -> Result<Connection, (OpenFailure, String)> {
        let unreachable = |detail: String| (OpenFailure::Unreachable, detail);
        let socket = match &self.location {
            Location::Tcp { host, port } => {
                let addrs = resolve(host, *port, connect)
                    .map_err(|err| unreachable(format!("cannot resolve {host}: {err}")))?;
                let tcp = connect_any(&addrs, connect).map_err(|e| unreachable(e.to_string()))?;
                Socket::Tcp(tcp, host)
            }
            Location::Unix(path) => Socket::Unix(connect_unix(path, connect).map_err(unreachable)?),
        };
        self.shake_hands(socket, handshake())
    }

    /// The handshake on a connected socket, within `limit`: TLS, then
    /// HELLO / AUTH. Its error says whether the server answered
    /// (`Refused`) or stayed silent until `limit` (`Silent`), and why.
    fn shake_hands(
        &self,
        socket: Socket<'_>,
        limit: Limit,
    ) -> Result<Connection, (OpenFailure, String)> {
        let refused = |detail: String| (OpenFailure::Refused, detail);
        // The socket timeout the TLS handshake left on the socket.
        let mut armed = None;
        let stream = match socket {
            Socket::Tcp(tcp, host) => {
                // Requests are single writes; never wait for Nagle.
                tcp.set_nodelay(true).map_err(|e| refused(e.to_string()))?;
                keep_alive(&tcp).map_err(|e| refused(format!("TCP keepalive: {e}")))?;
                match &self.tls {
                    Some(tls) => {
                        let (stream, mismatch) = Stream::tls(tls, host, tcp, &mut armed, limit)
                            .map_err(|(timed_out, detail)| (silent_if(timed_out), detail))?;
                        // Taken, as hiredis takes it: said once per server.
                        if let Some(mismatch) = mismatch {
                            tls.name_mismatch_seen(&self.name, &mismatch);
                        }
                        stream
                    }
                    None => Stream::Tcp(tcp),
                }
            }
            Socket::Unix(unix) => Stream::Unix(unix),
        };
        let mut conn = Connection::new(stream, armed);
        if let Some(handshake) = &self.handshake {
            if let Some(text) = shake(&mut conn, handshake, limit)? {
                if !(self.sends_hello && text.starts_with("ERR unknown command")) {
                    return Err(refused(refusal(&text)));
                }
                // No HELLO here: as redis-rs does, AUTH alone and RESP2.
                if let Some(auth) = &self.auth_without_hello {
                    if let Some(text) = shake(&mut conn, auth, limit)? {
                        return Err(refused(refusal(&text)));
                    }
                }
            }
        }
        Ok(conn)
    }
}

/// A handshake that got no answer: `Silent` when its limit ran out.
fn silent_if(timed_out: bool) -> OpenFailure {
    if timed_out {
        OpenFailure::Silent
    } else {
        OpenFailure::Refused
    }
}

/// A connected socket, before its handshake.
enum Socket<'h> {
    /// With the host name it was reached by (TLS's SNI and name check).
    Tcp(TcpStream, &'h str),
    Unix(UnixStream),
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

/// One handshake request: `Ok(None)` when accepted, `Ok(Some(text))` for
/// an error reply, `Err` (no server text) when it got no reply.
fn shake(
    conn: &mut Connection,
    packed: &[u8],
    limit: Limit,
) -> Result<Option<String>, (OpenFailure, String)> {
    match conn.request_by(packed, limit) {
        Ok(Reply::Error(text)) => Ok(Some(text)),
        Ok(_) => Ok(None),
        Err(failure) => Err((
            silent_if(matches!(failure, Failure::Timeout)),
            format!("handshake failed: {failure}"),
        )),
    }
}

/// The addresses of `host`: an IP address as it is, a name looked up
/// within `limit` ([`lookup`]).
pub(super) fn resolve(host: &str, port: u16, limit: Limit) -> io::Result<Vec<SocketAddr>> {
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
fn connect_unix(path: &Path, limit: Limit) -> Result<UnixStream, String> {
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

/// Seconds of silence before the first TCP keepalive probe, as hiredis's
/// `REDIS_KEEPALIVE_INTERVAL`, which the C VMOD enables on every
/// connection (its servers' and Sentinels').
pub(crate) const KEEPALIVE_IDLE: Duration = Duration::from_secs(15);

/// TCP keepalive as hiredis's `redisKeepAlive` sets it: probes after
/// [`KEEPALIVE_IDLE`] of silence, every third of it, 3 unanswered ones
/// closing the connection. An idle connection to a server that vanished
/// (a host gone, a NAT or firewall that forgot the flow) is then found
/// dead in about 30 s instead of at the next command's timeout.
fn keep_alive(tcp: &TcpStream) -> io::Result<()> {
    let keepalive = socket2::TcpKeepalive::new()
        .with_time(KEEPALIVE_IDLE)
        .with_interval(KEEPALIVE_IDLE / 3)
        .with_retries(3);
    socket2::SockRef::from(tcp).set_tcp_keepalive(&keepalive)
}

fn connect_any(addrs: &[SocketAddr], limit: Limit) -> io::Result<TcpStream> {
    let mut last = io::Error::new(io::ErrorKind::NotFound, "no address");
    for addr in addrs {
        let attempt = match limit.wait() {
            Ok(Some(_)) if limit.sliced() => connect_sliced(addr, limit),
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

/// Shortest pause between two `connect` calls of [`connect_sliced`] on a
/// system where a `connect` in progress does not wait.
const CONNECT_SLICE_PAUSE: Duration = Duration::from_millis(10);

/// A TCP connect within a limit that a stop flag may end, one slice at a
/// time: a blocking `connect` waits at most the socket's send timeout
/// (then fails with `EINPROGRESS`, the attempt going on), and on Linux a
/// `connect` again waits on for the same attempt (failing with `EALREADY`
/// after the timeout), until it succeeds, fails, or the limit is spent.
fn connect_sliced(addr: &SocketAddr, limit: Limit) -> io::Result<TcpStream> {
    use socket2::{Domain, Protocol, SockAddr, Socket, Type};
    let socket = Socket::new(
        Domain::for_address(*addr),
        Type::STREAM,
        Some(Protocol::TCP),
    )?;
    let target = SockAddr::from(*addr);
    loop {
        let wait = limit.wait()?;
        socket.set_write_timeout(wait)?;
        let started = std::time::Instant::now();
        match socket.connect(&target) {
            Ok(()) => break,
            Err(err) if err.raw_os_error() == Some(libc::EISCONN) => break,
            Err(err)
                if matches!(err.raw_os_error(), Some(libc::EINPROGRESS | libc::EALREADY))
                    || err.kind() == io::ErrorKind::WouldBlock
                    || err.kind() == io::ErrorKind::Interrupted =>
            {
                // A `connect` that returned at once does not wait here:
                // no spinning.
                if started.elapsed() < CONNECT_SLICE_PAUSE {
                    std::thread::sleep(CONNECT_SLICE_PAUSE);
                }
            }
            Err(err) => return Err(err),
        }
    }
    socket.set_write_timeout(None)?;
    Ok(socket.into())
}
