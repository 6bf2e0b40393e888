//! Fake cluster nodes on 127.0.0.1, for what a real cluster will not do:
//! redirect to hundreds of new addresses (`s14`), or name hundreds of
//! masters that are all dead (`s15`). A seed, which the VCL's database is
//! given, and `others` nodes. Each listener has a thread of its own that
//! accepts (blocking: a few hundred idle listeners cost no CPU); a node
//! that answers serves each connection on a thread of its own, until the
//! nodes are dropped.
use super::*;
use std::net::TcpListener;
use std::sync::atomic::{AtomicU64, AtomicUsize};

/// What the nodes besides the seed are, and the map the seed gives.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Others {
    /// The seed owns every slot and answers each `GET` with `ASK` to the
    /// next of the others, a new address each time; those answer as an
    /// empty Redis does (tracking included).
    AskTargets,
    /// Dead masters: each accepts a connection and closes it at once
    /// (after reading what came with it, to see whether `AUTH` did).
    /// The seed owns every slot until [`FakeNodes::grow`]; from then on
    /// its map gives it the first [`SEED_SLOTS`] and the others the
    /// rest in equal ranges, and a `GET` of a key it no longer owns is
    /// answered with `MOVED` to its owner.
    DeadMasters,
}

/// The slots the seed keeps once the map has grown.
pub(crate) const SEED_SLOTS: u16 = 1384;
const SLOTS: u16 = 16384;

/// Counted by the nodes' threads.
#[derive(Default)]
struct Tally {
    /// Connections accepted, by all the nodes.
    connects: AtomicU64,
    /// Of which by the others (not the seed).
    other_connects: AtomicU64,
    /// `AUTH`s (in `HELLO` or alone) read by dead masters.
    auths: AtomicU64,
    /// Connects to dead masters that began with `HELLO 3`: the near
    /// cache's tracking connections (command connections are RESP2 here).
    resp3_connects: AtomicU64,
}

pub(crate) struct FakeNodes {
    pub(crate) seed_port: u16,
    /// The others' ports, in the order of their slot ranges.
    pub(crate) ports: Arc<Vec<u16>>,
    grown: Arc<AtomicBool>,
    tally: Arc<Tally>,
    stop: Arc<AtomicBool>,
    acceptors: Vec<thread::JoinHandle<()>>,
}

/// What a fake node is.
#[derive(Clone)]
enum FakeNode {
    Seed {
        port: u16,
        others: Others,
        /// The others' ports.
        ports: Arc<Vec<u16>>,
        /// `AskTargets`: the next `ASK`'s target.
        next: Arc<AtomicUsize>,
        /// `DeadMasters`: the map names the others.
        grown: Arc<AtomicBool>,
    },
    Target,
    Dead,
}

impl FakeNodes {
    pub(crate) fn start(others: usize, kind: Others) -> Res<FakeNodes> {
        let bind = || -> Res<(TcpListener, u16)> {
            let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
            let port = listener.local_addr().map_err(|e| e.to_string())?.port();
            Ok((listener, port))
        };
        let (seed, seed_port) = bind()?;
        let other = match kind {
            Others::AskTargets => FakeNode::Target,
            Others::DeadMasters => FakeNode::Dead,
        };
        let mut listeners = Vec::new();
        let mut ports = Vec::new();
        for _ in 0..others {
            let (listener, port) = bind()?;
            listeners.push((listener, other.clone()));
            ports.push(port);
        }
        let ports = Arc::new(ports);
        let grown = Arc::new(AtomicBool::new(false));
        let node = FakeNode::Seed {
            port: seed_port,
            others: kind,
            ports: ports.clone(),
            next: Arc::new(AtomicUsize::new(0)),
            grown: grown.clone(),
        };
        listeners.push((seed, node));
        let stop = Arc::new(AtomicBool::new(false));
        let tally = Arc::new(Tally::default());
        let acceptors = listeners
            .into_iter()
            .map(|(listener, node)| {
                let (stop, tally) = (stop.clone(), tally.clone());
                thread::spawn(move || accept(&listener, &node, &stop, &tally))
            })
            .collect();
        Ok(FakeNodes {
            seed_port,
            ports,
            grown,
            tally,
            stop,
            acceptors,
        })
    }

    /// Connections accepted so far, by all the nodes.
    pub(crate) fn connects(&self) -> u64 {
        self.tally.connects.load(Ordering::Relaxed)
    }

    /// Connections accepted so far by the others (not the seed).
    pub(crate) fn other_connects(&self) -> u64 {
        self.tally.other_connects.load(Ordering::Relaxed)
    }

    /// `AUTH`s the dead masters read so far.
    pub(crate) fn auths(&self) -> u64 {
        self.tally.auths.load(Ordering::Relaxed)
    }

    /// Connects to dead masters that began with `HELLO 3` so far.
    pub(crate) fn resp3_connects(&self) -> u64 {
        self.tally.resp3_connects.load(Ordering::Relaxed)
    }

    /// `DeadMasters`: the seed's map names the others from now on.
    pub(crate) fn grow(&self) {
        self.grown.store(true, Ordering::Relaxed);
    }

    /// `DeadMasters`, grown: the port of the node that owns `slot`.
    pub(crate) fn owner(&self, slot: u16) -> u16 {
        owner(slot, self.seed_port, &self.ports)
    }
}

impl Drop for FakeNodes {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // A connect wakes each acceptor, which then sees `stop`.
        for port in self.ports.iter().chain([&self.seed_port]) {
            let _ = TcpStream::connect((Ipv4Addr::LOCALHOST, *port));
        }
        for acceptor in self.acceptors.drain(..) {
            let _ = acceptor.join();
        }
    }
}

/// The node's accepting thread, until `stop`.
fn accept(listener: &TcpListener, node: &FakeNode, stop: &Arc<AtomicBool>, tally: &Tally) {
    for stream in listener.incoming() {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        let Ok(stream) = stream else {
            continue;
        };
        tally.connects.fetch_add(1, Ordering::Relaxed);
        if !matches!(node, FakeNode::Seed { .. }) {
            tally.other_connects.fetch_add(1, Ordering::Relaxed);
        }
        match node {
            FakeNode::Dead => {
                let came = what_came(stream).to_ascii_uppercase();
                let auths = came.windows(4).filter(|w| w == b"AUTH").count();
                tally.auths.fetch_add(auths as u64, Ordering::Relaxed);
                if came.windows(12).any(|w| w == b"HELLO\r\n$1\r\n3") {
                    tally.resp3_connects.fetch_add(1, Ordering::Relaxed);
                }
            }
            _ => {
                let (node, stop) = (node.clone(), stop.clone());
                thread::spawn(move || serve(stream, &node, &stop));
            }
        }
    }
}

/// What the client sent on `stream` right after connecting (its
/// `HELLO` / `AUTH`, if any, within 20 ms); the stream then closed.
fn what_came(mut stream: TcpStream) -> Vec<u8> {
    let mut buf = vec![0u8; 1024];
    let n = stream
        .set_read_timeout(Some(Duration::from_millis(20)))
        .and_then(|()| stream.read(&mut buf))
        .unwrap_or(0);
    buf.truncate(n);
    buf
}

/// Answers the commands of one connection until it closes or `stop`.
fn serve(stream: TcpStream, node: &FakeNode, stop: &AtomicBool) {
    let setup = stream
        .set_read_timeout(Some(Duration::from_millis(100)))
        .and_then(|()| stream.try_clone());
    let Ok(mut writer) = setup else {
        return;
    };
    let mut reader = BufReader::new(stream);
    while !stop.load(Ordering::Relaxed) {
        let command = match support::read_value(&mut reader) {
            Ok(command) => command,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                continue
            }
            Err(_) => return,
        };
        let args: Vec<&str> = command
            .items()
            .iter()
            .map(|arg| arg.text().unwrap_or_default())
            .collect();
        if writer.write_all(node.answer(&args).as_bytes()).is_err() {
            return;
        }
    }
}

/// The port of the node that owns `slot` in the grown map.
fn owner(slot: u16, seed_port: u16, ports: &[u16]) -> u16 {
    if slot < SEED_SLOTS || ports.is_empty() {
        return seed_port;
    }
    let per_node = (SLOTS - SEED_SLOTS).div_ceil(ports.len() as u16);
    ports[usize::from((slot - SEED_SLOTS) / per_node)]
}

/// A `CLUSTER SLOTS` reply: `ranges` of (first slot, last slot, port).
fn slots_reply(ranges: &[(u16, u16, u16)]) -> String {
    let mut reply = format!("*{}\r\n", ranges.len());
    for (first, last, port) in ranges {
        reply.push_str(&format!(
            "*3\r\n:{first}\r\n:{last}\r\n*2\r\n$9\r\n127.0.0.1\r\n:{port}\r\n"
        ));
    }
    reply
}

impl FakeNode {
    /// The reply to `args`, packed.
    fn answer(&self, args: &[&str]) -> String {
        let word = |at: usize| {
            args.get(at)
                .map_or(String::new(), |w| w.to_ascii_uppercase())
        };
        let info = "# Replication\r\nrole:master\r\nconnected_slaves:0\r\n";
        match (word(0).as_str(), word(1).as_str(), self) {
            // HELLO 3 of the tracking connection: any reply but an error.
            ("HELLO", _, _) => "*0\r\n".into(),
            ("PING", _, _) => "+PONG\r\n".into(),
            ("AUTH" | "ASKING" | "READONLY", _, _) | ("CLIENT", "TRACKING", _) => "+OK\r\n".into(),
            ("INFO", _, _) => format!("${}\r\n{info}\r\n", info.len()),
            ("PTTL", _, _) => ":-2\r\n".into(),
            (
                "CLUSTER",
                "SLOTS",
                FakeNode::Seed {
                    port, ports, grown, ..
                },
            ) => {
                if !grown.load(Ordering::Relaxed) {
                    return slots_reply(&[(0, SLOTS - 1, *port)]);
                }
                let mut ranges = vec![(0, SEED_SLOTS - 1, *port)];
                let mut first = SEED_SLOTS;
                while first < SLOTS {
                    let node = owner(first, *port, ports);
                    let mut last = first;
                    while last + 1 < SLOTS && owner(last + 1, *port, ports) == node {
                        last += 1;
                    }
                    ranges.push((first, last, node));
                    first = last + 1;
                }
                slots_reply(&ranges)
            }
            (
                "GET",
                _,
                FakeNode::Seed {
                    port,
                    others,
                    ports,
                    next,
                    grown,
                },
            ) => {
                let slot = crc16(args.get(1).unwrap_or(&"").as_bytes()) % SLOTS;
                match others {
                    Others::AskTargets => {
                        let at = next.fetch_add(1, Ordering::Relaxed) % ports.len();
                        format!("-ASK {slot} 127.0.0.1:{}\r\n", ports[at])
                    }
                    Others::DeadMasters if grown.load(Ordering::Relaxed) => {
                        match owner(slot, *port, ports) {
                            owner if owner == *port => "$-1\r\n".into(),
                            owner => format!("-MOVED {slot} 127.0.0.1:{owner}\r\n"),
                        }
                    }
                    Others::DeadMasters => "$-1\r\n".into(),
                }
            }
            ("GET", _, _) => "$-1\r\n".into(),
            // CLUSTER SHARDS too: the map is read with CLUSTER SLOTS.
            _ => "-ERR unknown command\r\n".into(),
        }
    }
}
