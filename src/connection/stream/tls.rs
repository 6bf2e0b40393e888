//! TLS over a blocking TCP socket, every socket wait bounded by the
//! deadline of the exchange it serves.
//!
//! rustls's own `Stream` reads until a whole TLS record has arrived: each
//! socket read is bounded by the socket timeout, but not their sum, so a
//! peer trickling a record one byte at a time held a worker for minutes.
//! Here every socket read and write is preceded by `arm`, which sets the
//! socket timeout to the time left (or fails with `TimedOut` when it is
//! spent); bytes of a partial record stay in rustls for the next call. A
//! wait that a stop flag may end is sliced, and resumed after each slice
//! while its limit allows ([`Waits::again`]).
use std::io::{self, Read, Write};
use std::net::TcpStream;

use crate::tls::{take_let_through, NameMismatch, Tls};

pub(super) type TlsStream = rustls::StreamOwned<rustls::ClientConnection, TcpStream>;

/// How the socket waits of one call are bounded.
pub(super) trait Waits {
    /// Sets the socket timeout before one wait (`TimedOut` when spent).
    fn arm(&mut self, sock: &TcpStream) -> io::Result<()>;
    /// Whether a wait that failed with `err` is resumed.
    fn again(&self, err: &io::Error) -> bool;
}

/// Stack of the thread that runs a TLS handshake.
const TLS_HANDSHAKE_STACK: usize = 1 << 20;

/// The TLS handshake on a fresh TCP connection, each wait armed by
/// `waits`, with the name mismatch the verifier let through, if any
/// (`tls/name.rs`). The error says why (e.g. `invalid peer certificate:
/// UnknownIssuer`).
pub(super) fn handshake(
    tls: &Tls,
    host: &str,
    tcp: TcpStream,
    waits: &mut (dyn Waits + Send),
) -> Result<(TlsStream, Option<NameMismatch>), String> {
    let name = tls
        .server_name(host)
        .ok_or_else(|| format!("TLS: {host:?} is no valid server name (set tls_sni)"))?;
    // Building the session (its ClientHello, key shares) and verifying the
    // server's certificate need more stack than a Varnish worker has
    // (thread_pool_stack, 80 KiB by default: a debug build overflowed it in
    // `ClientConnection::new` on a pipelined connect). Both run on a thread
    // of its own, once per connection; the worker only gets the finished
    // stream.
    let shaken = std::thread::scope(|scope| {
        std::thread::Builder::new()
            .name("vredis-tls".into())
            .stack_size(TLS_HANDSHAKE_STACK)
            .spawn_scoped(scope, move || {
                let session = tls
                    .session(name)
                    .map_err(|e| Shake::Setup(format!("TLS: {e}")))?;
                let mut stream = rustls::StreamOwned::new(session, tcp);
                // The verifier runs here, within the handshake's reads.
                drive_handshake(&mut stream, waits)
                    .map(|()| (stream, take_let_through()))
                    .map_err(Shake::Io)
            })
            .map_err(|e| {
                Shake::Io(io::Error::other(format!(
                    "cannot start the handshake thread: {e}"
                )))
            })?
            .join()
            .unwrap_or_else(|_| Err(Shake::Io(io::Error::other("the handshake thread panicked"))))
    });
    match shaken {
        Ok(shaken) => Ok(shaken),
        Err(Shake::Setup(e)) => Err(e),
        Err(Shake::Io(e))
            if matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ) =>
        {
            Err("TLS handshake: timeout".into())
        }
        Err(Shake::Io(e)) => Err(format!("TLS handshake failed: {e}")),
    }
}

/// Why a handshake thread gave no stream.
enum Shake {
    /// The session could not be set up (nothing was sent).
    Setup(String),
    Io(io::Error),
}

fn drive_handshake(stream: &mut TlsStream, waits: &mut dyn Waits) -> io::Result<()> {
    while stream.conn.is_handshaking() {
        flush(stream, waits)?;
        if !stream.conn.is_handshaking() {
            break;
        }
        if !stream.conn.wants_read() {
            return Err(io::Error::other("the TLS handshake stalled"));
        }
        read_records(stream, waits)?;
    }
    // The client's last flight (TLS 1.3 Finished) may still be buffered.
    flush(stream, waits)
}

/// One socket read into rustls, and the records it completed processed.
fn read_records(stream: &mut TlsStream, waits: &mut dyn Waits) -> io::Result<()> {
    let read = loop {
        waits.arm(&stream.sock)?;
        match stream.conn.read_tls(&mut stream.sock) {
            Err(err) if waits.again(&err) => {}
            read => break read?,
        }
    };
    if let Err(err) = stream.conn.process_new_packets() {
        // Tell the server why (an alert), as far as the time allows.
        let _ = flush(stream, waits);
        return Err(io::Error::new(io::ErrorKind::InvalidData, err));
    }
    if read == 0 && stream.conn.is_handshaking() {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    Ok(())
}

/// Sends every TLS byte rustls holds.
fn flush(stream: &mut TlsStream, waits: &mut dyn Waits) -> io::Result<()> {
    while stream.conn.wants_write() {
        waits.arm(&stream.sock)?;
        match stream.conn.write_tls(&mut stream.sock) {
            Err(err) if waits.again(&err) => {}
            written => {
                written?;
            }
        }
    }
    Ok(())
}

/// Reads plaintext: at least one byte, `Ok(0)` at a clean close, or an
/// error (`TimedOut` / `WouldBlock` once `waits` says the time is spent).
pub(super) fn read(
    stream: &mut TlsStream,
    buf: &mut [u8],
    waits: &mut dyn Waits,
) -> io::Result<usize> {
    loop {
        match stream.conn.reader().read(buf) {
            Err(err) if err.kind() == io::ErrorKind::WouldBlock => {}
            done => return done,
        }
        // Anything rustls must answer (an alert, a key update) goes first.
        flush(stream, waits)?;
        read_records(stream, waits)?;
    }
}

/// Encrypts and sends all of `bytes`.
pub(super) fn write_all(
    stream: &mut TlsStream,
    bytes: &[u8],
    waits: &mut dyn Waits,
) -> io::Result<()> {
    let mut rest = bytes;
    while !rest.is_empty() {
        // rustls takes what its buffer holds: sent before it takes more.
        flush(stream, waits)?;
        let taken = stream.conn.writer().write(rest)?;
        if taken == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        rest = &rest[taken..];
    }
    flush(stream, waits)
}
