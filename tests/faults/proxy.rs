//! A TCP proxy on a loopback port, for the links the staleness trials
//! disturb: it spreads new connections round-robin over its upstreams (a
//! balancer in front of a master and its replica), can delay what the
//! upstream sends by a fixed time (a lagging replication link), and can
//! stop forwarding, without closing them, the connections that carry
//! `CLIENT TRACKING` (a frozen tracking link: the VMOD's other
//! connections through it go on working), and can hold what a client
//! sends that names a command (a `PTTL` that reaches the server late).
use super::*;
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::net::{Shutdown, TcpListener};
use std::sync::atomic::AtomicUsize;

/// How often a pump looks at its socket, the stop flag and the freeze.
const TICK: Duration = Duration::from_millis(5);
/// What a client sends that marks its connection as a tracking link.
const TRACKING: &[u8] = b"TRACKING";

/// What the proxy's threads share.
struct Shared {
    upstreams: Vec<u16>,
    /// Delay of each chunk from an upstream to its client (µs).
    delay_us: std::sync::atomic::AtomicU64,
    stop: AtomicBool,
    /// Tracking links forward nothing, either way, while set.
    frozen: AtomicBool,
    /// Connections accepted, and those that sent `TRACKING`.
    accepted: AtomicUsize,
    tracking: AtomicUsize,
    /// What a client sends that holds its chunk, and for how long;
    /// see [`Proxy::hold_requests`].
    hold: Mutex<Option<(&'static [u8], Duration)>>,
    /// Chunks held so far.
    held: AtomicUsize,
    /// Every socket, shut down on drop (the pumps then end).
    sockets: Mutex<Vec<TcpStream>>,
}

/// A running proxy; dropping it closes every connection through it.
pub(crate) struct Proxy {
    pub(crate) port: u16,
    shared: Arc<Shared>,
    threads: Arc<Mutex<Vec<thread::JoinHandle<()>>>>,
    acceptor: Option<thread::JoinHandle<()>>,
}

impl Proxy {
    /// Forwards each new connection to the next of `upstreams` (ports on
    /// 127.0.0.1) in turn, what they send back `delay` later.
    pub(crate) fn start(upstreams: &[u16], delay: Duration) -> Res<Proxy> {
        let listener =
            TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map_err(|e| format!("proxy: bind: {e}"))?;
        let port = listener.local_addr().map_err(|e| e.to_string())?.port();
        listener
            .set_nonblocking(true)
            .map_err(|e| format!("proxy: {e}"))?;
        let shared = Arc::new(Shared {
            upstreams: upstreams.to_vec(),
            delay_us: (delay.as_micros() as u64).into(),
            stop: AtomicBool::new(false),
            frozen: AtomicBool::new(false),
            accepted: AtomicUsize::new(0),
            tracking: AtomicUsize::new(0),
            hold: Mutex::new(None),
            held: AtomicUsize::new(0),
            sockets: Mutex::new(Vec::new()),
        });
        let threads = Arc::new(Mutex::new(Vec::new()));
        let (s, t) = (shared.clone(), threads.clone());
        let acceptor = thread::Builder::new()
            .name(format!("proxy-{port}"))
            .spawn(move || accept(&listener, &s, &t))
            .map_err(|e| format!("proxy: spawn: {e}"))?;
        Ok(Proxy {
            port,
            shared,
            threads,
            acceptor: Some(acceptor),
        })
    }

    /// What upstreams send is delayed by `delay` from now on.
    pub(crate) fn set_delay(&self, delay: Duration) {
        self.shared
            .delay_us
            .store(delay.as_micros() as u64, Ordering::SeqCst);
    }

    /// Tracking links stop forwarding (`true`) or forward again, what
    /// they held first.
    pub(crate) fn freeze_tracking(&self, frozen: bool) {
        self.shared.frozen.store(frozen, Ordering::SeqCst);
    }

    /// From now on, what a client sends that holds `word` (a command's
    /// name: `PTTL`) reaches the server `hold` late, and what it sends
    /// after waits behind it: the chunk read with the word in it is
    /// held whole, so in a batch of commands the others wait too.
    pub(crate) fn hold_requests(&self, word: &'static [u8], hold: Duration) {
        *self.shared.hold.lock() = Some((word, hold));
    }

    /// The chunks held so far ([`Proxy::hold_requests`]).
    pub(crate) fn held(&self) -> usize {
        self.shared.held.load(Ordering::Relaxed)
    }

    /// Connections accepted so far, and how many of them were tracking
    /// links.
    pub(crate) fn connections(&self) -> (usize, usize) {
        (
            self.shared.accepted.load(Ordering::Relaxed),
            self.shared.tracking.load(Ordering::Relaxed),
        )
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.acceptor.take() {
            let _ = t.join();
        }
        for s in self.shared.sockets.lock().drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
        for t in self.threads.lock().drain(..) {
            let _ = t.join();
        }
    }
}

fn accept(
    listener: &TcpListener,
    shared: &Arc<Shared>,
    threads: &Mutex<Vec<thread::JoinHandle<()>>>,
) {
    while !shared.stop.load(Ordering::SeqCst) {
        let client = match listener.accept() {
            Ok((client, _)) => client,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                thread::sleep(TICK);
                continue;
            }
            Err(_) => {
                thread::sleep(TICK);
                continue;
            }
        };
        let n = shared.accepted.fetch_add(1, Ordering::SeqCst);
        let upstream = shared.upstreams[n % shared.upstreams.len()];
        let Ok(server) = TcpStream::connect((Ipv4Addr::LOCALHOST, upstream)) else {
            continue;
        };
        let _ = client.set_nonblocking(false);
        let link = Arc::new(AtomicBool::new(false));
        let mut pumps = Vec::new();
        for (from, to, to_client) in [(&client, &server, false), (&server, &client, true)] {
            let (Ok(from), Ok(to)) = (from.try_clone(), to.try_clone()) else {
                continue;
            };
            shared.sockets.lock().push(from.try_clone().unwrap());
            let (shared, link) = (shared.clone(), link.clone());
            let pump = Pump {
                from,
                to,
                delayed: to_client,
                sniff: !to_client,
                link,
                shared,
            };
            if let Ok(t) = thread::Builder::new()
                .name(format!("proxy-pump-{upstream}"))
                .stack_size(128 * 1024)
                .spawn(move || pump.run())
            {
                pumps.push(t);
            }
        }
        threads.lock().extend(pumps);
    }
}

/// One direction of one connection.
struct Pump {
    from: TcpStream,
    to: TcpStream,
    /// The upstream's direction: delayed by the proxy's delay.
    delayed: bool,
    /// The client's direction: looks for `TRACKING`.
    sniff: bool,
    /// This connection is a tracking link (both pumps share it).
    link: Arc<AtomicBool>,
    shared: Arc<Shared>,
}

impl Pump {
    /// Reads chunks as they come and writes each once `delay` old, unless
    /// the link is a frozen tracking link; ends both ways on EOF or error.
    fn run(self) {
        let mut queue: VecDeque<(Instant, Vec<u8>)> = VecDeque::new();
        let mut tail: Vec<u8> = Vec::new();
        let mut buf = vec![0u8; 64 * 1024];
        let mut open = true;
        while !self.shared.stop.load(Ordering::Relaxed) {
            let delay = if self.delayed {
                Duration::from_micros(self.shared.delay_us.load(Ordering::Relaxed))
            } else {
                Duration::ZERO
            };
            let held =
                self.link.load(Ordering::SeqCst) && self.shared.frozen.load(Ordering::SeqCst);
            let now = Instant::now();
            if !held {
                while queue.front().is_some_and(|(at, _)| *at + delay <= now) {
                    let (_, chunk) = queue.pop_front().expect("a chunk");
                    if (&self.to).write_all(&chunk).is_err() {
                        open = false;
                        queue.clear();
                    }
                }
            }
            if !open {
                // What was read is written; the other side may go too.
                let _ = self.to.shutdown(Shutdown::Write);
                if queue.is_empty() {
                    break;
                }
                thread::sleep(TICK);
                continue;
            }
            let wait = queue
                .front()
                .map(|(at, _)| (*at + delay).saturating_duration_since(now))
                .unwrap_or(TICK)
                .clamp(Duration::from_millis(1), TICK);
            let _ = self.from.set_read_timeout(Some(wait));
            match (&self.from).read(&mut buf) {
                Ok(0) => open = false,
                Ok(n) => {
                    let chunk = buf[..n].to_vec();
                    if self.sniff && !self.link.load(Ordering::SeqCst) {
                        tail.extend_from_slice(&chunk);
                        if tail.windows(TRACKING.len()).any(|w| w == TRACKING) {
                            self.link.store(true, Ordering::SeqCst);
                            self.shared.tracking.fetch_add(1, Ordering::Relaxed);
                        }
                        let keep = tail.len().saturating_sub(TRACKING.len());
                        tail.drain(..keep);
                    }
                    let mut at = Instant::now();
                    if self.sniff {
                        if let Some((word, hold)) = *self.shared.hold.lock() {
                            if chunk.windows(word.len()).any(|w| w == word) {
                                self.shared.held.fetch_add(1, Ordering::Relaxed);
                                at += hold;
                            }
                        }
                    }
                    queue.push_back((at, chunk));
                }
                Err(e)
                    if e.kind() == io::ErrorKind::WouldBlock
                        || e.kind() == io::ErrorKind::TimedOut => {}
                Err(_) => open = false,
            }
        }
        let _ = self.to.shutdown(Shutdown::Write);
        let _ = self.from.shutdown(Shutdown::Read);
    }
}
