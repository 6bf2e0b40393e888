//! `#@ trickle NAME TARGET DELAY_MS [AFTER_MS]`: a TCP proxy on 127.0.0.1
//! in front of TARGET (`HOST:PORT`, e.g. `${main_tls_addr}`) that passes
//! what its clients send at once, and what TARGET sends one byte every
//! DELAY_MS, after the first AFTER_MS (default 0) of each connection at
//! full speed (so that a TLS handshake or a first PING can complete before
//! the replies start to trickle). Its threads stop when the trial ends.
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// How often the threads look at the stop flag.
const POLL: Duration = Duration::from_millis(20);

pub(crate) struct Trickle {
    pub(crate) port: u16,
    stop: Arc<AtomicBool>,
    acceptor: Option<JoinHandle<()>>,
}

impl Trickle {
    pub(crate) fn start(target: &str, delay: Duration, after: Duration) -> Result<Trickle, String> {
        let target: SocketAddr = target
            .parse()
            .map_err(|e| format!("trickle target {target:?}: {e}"))?;
        let listener = TcpListener::bind(("127.0.0.1", 0)).map_err(|e| format!("bind: {e}"))?;
        let port = listener
            .local_addr()
            .map_err(|e| format!("local_addr: {e}"))?
            .port();
        listener
            .set_nonblocking(true)
            .map_err(|e| format!("nonblocking: {e}"))?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let acceptor = thread::spawn(move || {
            while !flag.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((client, _)) => {
                        let flag = flag.clone();
                        thread::spawn(move || relay(client, target, delay, after, &flag));
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => thread::sleep(POLL),
                    Err(_) => thread::sleep(POLL),
                }
            }
        });
        Ok(Trickle {
            port,
            stop,
            acceptor: Some(acceptor),
        })
    }
}

impl Drop for Trickle {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.acceptor.take() {
            let _ = t.join();
        }
    }
}

/// One connection: client to server at once (its own thread), server to
/// client trickled (this thread). Either side closing closes both.
fn relay(
    client: TcpStream,
    target: SocketAddr,
    delay: Duration,
    after: Duration,
    stop: &AtomicBool,
) {
    let _ = client.set_nonblocking(false);
    let Ok(server) = TcpStream::connect_timeout(&target, Duration::from_secs(2)) else {
        return;
    };
    let start = Instant::now();
    let (Ok(mut client_rd), Ok(mut server_wr)) = (client.try_clone(), server.try_clone()) else {
        return;
    };
    let (mut client_wr, mut server_rd) = (client, server);
    let _ = client_rd.set_read_timeout(Some(POLL));
    let _ = server_rd.set_read_timeout(Some(POLL));
    let _ = client_wr.set_nodelay(true);
    let done = AtomicBool::new(false);
    thread::scope(|scope| {
        scope.spawn(|| {
            let mut buf = [0u8; 16384];
            while !stop.load(Ordering::Relaxed) && !done.load(Ordering::Relaxed) {
                match client_rd.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => {
                        if server_wr.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                    Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                    Err(_) => break,
                }
            }
            done.store(true, Ordering::Relaxed);
            let _ = server_wr.shutdown(Shutdown::Both);
        });
        let mut buf = [0u8; 16384];
        'outer: while !stop.load(Ordering::Relaxed) && !done.load(Ordering::Relaxed) {
            let n = match server_rd.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    continue
                }
                Err(_) => break,
            };
            if start.elapsed() < after {
                if client_wr.write_all(&buf[..n]).is_err() {
                    break;
                }
                continue;
            }
            for byte in &buf[..n] {
                if client_wr.write_all(std::slice::from_ref(byte)).is_err() {
                    break 'outer;
                }
                let next = Instant::now() + delay;
                while Instant::now() < next {
                    if stop.load(Ordering::Relaxed) || done.load(Ordering::Relaxed) {
                        break 'outer;
                    }
                    thread::sleep(POLL.min(next.saturating_duration_since(Instant::now())));
                }
            }
        }
        done.store(true, Ordering::Relaxed);
        let _ = client_wr.shutdown(Shutdown::Both);
    });
}
