//! The socket under a connection (TCP, UNIX or TLS: [`tls`]), and the
//! deadline every wait on it is armed with ([`Limit`]).
mod tls;

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use self::tls::TlsStream;
use crate::tls::{NameMismatch, Tls};

/// `timeout` shortened so that it ends by `deadline`, if there is one.
pub(crate) fn within(timeout: Option<Duration>, deadline: Option<Instant>) -> Option<Duration> {
    match deadline {
        None => timeout,
        Some(deadline) => {
            let left = deadline
                .saturating_duration_since(Instant::now())
                .max(Duration::from_millis(1));
            Some(timeout.map_or(left, |timeout| timeout.min(left)))
        }
    }
}

/// When an exchange on a connection (or the opening of one) must be
/// over. Every socket wait is armed with the time left before it, so that
/// neither one wait nor their sum (a reply, a TLS record arriving a byte at
/// a time) ends past it.
///
/// A limit may also end early, when a flag is set ([`Limit::or_stop`]):
/// its waits then last at most [`STOP_SLICE`] each and are resumed while
/// time is left, so that the thread waiting sees the flag within a slice
/// (the Sentinel thread of a VCL turning cold, whatever the Sentinel does).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limit<'a> {
    /// None: no bound (no timeout, or one past what the clock holds).
    pub(super) deadline: Option<Instant>,
    /// Set: the limit is spent (the waiting thread is asked to stop).
    stop: Option<&'a AtomicBool>,
}

/// The longest socket wait of a limit that a stop flag can end.
pub(crate) const STOP_SLICE: Duration = Duration::from_millis(100);

/// A socket already armed with a timeout at most this much longer than the
/// time left keeps it: consecutive commands with the same timeout cost no
/// system call, and a wait ends at most this late.
const REARM_SLACK: Duration = Duration::from_millis(1);

impl<'a> Limit<'a> {
    /// `timeout` from now (none: no bound).
    pub(crate) fn within(timeout: Option<Duration>) -> Limit<'static> {
        Limit {
            deadline: timeout.and_then(|timeout| Instant::now().checked_add(timeout)),
            stop: None,
        }
    }

    pub(crate) fn by(deadline: Option<Instant>) -> Limit<'static> {
        Limit {
            deadline,
            stop: None,
        }
    }

    /// This limit, spent as soon as `stop` is set: its waits are sliced.
    pub(crate) fn or_stop(self, stop: &'a AtomicBool) -> Limit<'a> {
        Limit {
            deadline: self.deadline,
            stop: Some(stop),
        }
    }

    /// Its waits are sliced ([`STOP_SLICE`]): one that times out is
    /// resumed while [`Limit::wait`] allows.
    pub(super) fn sliced(self) -> bool {
        self.stop.is_some()
    }

    /// The socket timeout of the next wait: the time left, at most a slice
    /// when there is a stop flag (`TimedOut` when it is spent or the flag
    /// set), or none.
    pub(super) fn wait(self) -> io::Result<Option<Duration>> {
        let slice = match self.stop {
            Some(stop) if stop.load(Ordering::Relaxed) => {
                return Err(io::ErrorKind::TimedOut.into())
            }
            Some(_) => Some(STOP_SLICE),
            None => None,
        };
        let left = match self.deadline {
            None => return Ok(slice),
            Some(deadline) => deadline.saturating_duration_since(Instant::now()),
        };
        if left.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        Ok(Some(slice.map_or(left, |slice| slice.min(left))))
    }

    /// Whether a wait that failed with `err` is resumed: it timed out at
    /// the end of a slice, and the limit is neither spent nor stopped.
    pub(super) fn again(self, err: &io::Error) -> bool {
        self.sliced()
            && matches!(
                err.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            )
            && self.wait().is_ok()
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

/// The socket of a connection, plain or TLS, every wait bounded by a
/// [`Limit`].
pub(super) enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
    /// Boxed: a TLS session is large, and connections are moved around.
    Tls(Box<TlsStream>),
}

impl Stream {
    /// A TLS session over `tcp`, its handshake done within `limit` (on a
    /// thread of its own: [`tls::handshake`]), with the name mismatch its
    /// verifier let through; `armed` gets the socket timeout it leaves on
    /// the socket. Its error says whether `limit` was spent (the server
    /// stayed silent), and why.
    pub(super) fn tls(
        settings: &Tls,
        host: &str,
        tcp: TcpStream,
        armed: &mut Option<Duration>,
        limit: Limit,
    ) -> Result<(Stream, Option<NameMismatch>), (bool, String)> {
        let mut waits = Armed { armed, limit };
        match tls::handshake(settings, host, tcp, &mut waits) {
            Ok((shaken, mismatch)) => Ok((Stream::Tls(Box::new(shaken)), mismatch)),
            Err(detail) => Err((limit.wait().is_err(), detail)),
        }
    }

    pub(super) fn set_nonblocking(&self, nonblocking: bool) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_nonblocking(nonblocking),
            Stream::Unix(s) => s.set_nonblocking(nonblocking),
            Stream::Tls(s) => s.sock.set_nonblocking(nonblocking),
        }
    }

    /// Writes all of `bytes`, each wait armed to end by `limit`.
    pub(super) fn write_all(
        &mut self,
        bytes: &[u8],
        armed: &mut Option<Duration>,
        limit: Limit,
    ) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => write_all(s, bytes, armed, limit),
            Stream::Unix(s) => write_all(s, bytes, armed, limit),
            Stream::Tls(s) => tls::write_all(s, bytes, &mut Armed { armed, limit }),
        }
    }

    /// Reads some bytes, the wait armed to end by `limit`.
    pub(super) fn read(
        &mut self,
        buf: &mut [u8],
        armed: &mut Option<Duration>,
        limit: Limit,
    ) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => read(s, buf, armed, limit),
            Stream::Unix(s) => read(s, buf, armed, limit),
            Stream::Tls(s) => tls::read(s, buf, &mut Armed { armed, limit }),
        }
    }

    /// Reads what is there without waiting (the socket is non-blocking).
    pub(super) fn read_now(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            Stream::Unix(s) => s.read(buf),
            Stream::Tls(s) => tls::read(s, buf, &mut NoWait),
        }
    }
}

/// The waits of one exchange on a TLS socket: each armed to end by
/// `limit`, and resumed after a slice while it allows.
struct Armed<'w, 'a> {
    armed: &'w mut Option<Duration>,
    limit: Limit<'a>,
}

impl tls::Waits for Armed<'_, '_> {
    fn arm(&mut self, sock: &TcpStream) -> io::Result<()> {
        arm(sock, self.armed, self.limit)
    }

    fn again(&self, err: &io::Error) -> bool {
        self.limit.again(err)
    }
}

/// A non-blocking socket: nothing to arm, nothing resumed.
struct NoWait;

impl tls::Waits for NoWait {
    fn arm(&mut self, _: &TcpStream) -> io::Result<()> {
        Ok(())
    }

    fn again(&self, _: &io::Error) -> bool {
        false
    }
}

/// `read` on a plain socket, armed to end by `limit`.
fn read<S: Timeouts + Read>(
    sock: &mut S,
    buf: &mut [u8],
    armed: &mut Option<Duration>,
    limit: Limit,
) -> io::Result<usize> {
    loop {
        arm(sock, armed, limit)?;
        match sock.read(buf) {
            Err(err) if limit.again(&err) => {}
            done => return done,
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
            Err(err) if limit.again(&err) => {}
            Err(err) => return Err(err),
        }
    }
    Ok(())
}
