//! The tracking connections of the near caches of one VCL: for each server
//! of each database with a near cache, one RESP3 connection with `CLIENT
//! TRACKING ON BCAST`, which keeps that server's [`Promise`]: Redis pushes
//! the name of every key any client changes on that server (and a flush),
//! and a heartbeat proves the link still carries them. Started when the
//! VCL turns warm, stopped (and joined, within about a second) when it
//! cools: only the VCL layer starts them.
//!
//! **Bounded whatever the peers do.** One supervisor thread follows the
//! databases' servers and opens the connections, each within [`WAIT`],
//! spaced per server by a back-off with jitter ([`Backoff`]: from
//! [`FIRST_PAUSE`] doubling to [`MAX_PAUSE`]) after a failed or short
//! session; `AUTH` goes only on a connection just opened (its handshake).
//! A connection that is up gets a listener thread of its own, so that a
//! slow server never delays another's invalidations. So threads count the
//! servers that answer, not the dead nodes of a map: 300 unreachable
//! nodes cost one connect each per [`MAX_PAUSE`], on no thread of their
//! own.
//!
//! **The heartbeat.** Every [`HEARTBEAT`] a listener sends `INFO
//! replication` (and `CLUSTER NODES` on a cluster node): its answer proves
//! the promise until [`PROOF_LASTS`](super::promise::PROOF_LASTS) after it
//! was sent; a change of replication (a role change, a replica re-pointed
//! or synced again, which may replace data without an invalidation)
//! renews the promise; a cluster node's slots are those its own
//! `CLUSTER NODES` line gives, less any being migrated. A link that stops
//! answering stops the hits at once (no proof), and is given up after
//! [`GIVE_UP`]: a slow command on the server (a `DEBUG SLEEP`, a large
//! `KEYS`) costs hits while it runs, not the entries.
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::promise::SlotSet;
use super::replies::{has_field_expiry, invalidated, own_slots, replication_state, Invalidated};
use super::{NearCache, Promise};
use crate::config::Protocol;
use crate::connection::{Connection, Connector, Failure, Limit};
use crate::database::Database;
use crate::error::{Retry, ServerError};
use crate::protocol::Reply;
use crate::server::{run_id, Server, INFO_SERVER};
use crate::stats::Stats;

/// How long one wait of the supervisor lasts: the stop flag and the
/// servers are looked at this often.
const SLICE: Duration = Duration::from_millis(100);
/// How often a listener sends its heartbeat.
const HEARTBEAT: Duration = Duration::from_millis(50);
/// No answer to a heartbeat for this long: the link is given up (and the
/// promise broken, its entries dropped). Hits stopped long before.
const GIVE_UP: Duration = Duration::from_secs(3);
/// A cluster node's heartbeat asks its slots (`CLUSTER NODES`) one time in
/// this many: a slot it loses is seen within 4 x [`HEARTBEAT`] (200 ms).
const SLOTS_EVERY: u64 = 4;
/// Listeners connecting at once, at most: servers that swallow packets
/// (each connect waits out [`WAIT`]) are tried this many at a time, and
/// do not delay the others by more than a few waits.
const CONNECTING: usize = 8;
/// Bound of a connect, and of each reply while a session starts.
const WAIT: Duration = Duration::from_millis(500);
/// The first pause before a server is tried again.
const FIRST_PAUSE: Duration = Duration::from_millis(200);
/// The longest; a session that lasted this long was steady, and its end
/// starts the pauses over.
const MAX_PAUSE: Duration = Duration::from_secs(10);

use crate::logger::Log;

/// The running threads of one VCL; dropping it stops and joins them.
pub(crate) struct Trackers {
    stop: Arc<AtomicBool>,
    supervisor: Option<JoinHandle<()>>,
}

impl Trackers {
    /// Starts tracking for those of `databases` that have a near cache;
    /// `None` when none has.
    pub(crate) fn start(
        databases: Vec<Arc<Database>>,
        log: Log,
    ) -> std::io::Result<Option<Trackers>> {
        let databases: Vec<Arc<Database>> = databases
            .into_iter()
            .filter(|db| db.near_cache().is_some())
            .collect();
        if databases.is_empty() {
            return Ok(None);
        }
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let supervisor = std::thread::Builder::new()
            .name("redis-tracking".into())
            .spawn(move || Supervisor::new(log).run(&databases, &flag))?;
        Ok(Some(Trackers {
            stop,
            supervisor: Some(supervisor),
        }))
    }
}

impl Drop for Trackers {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.supervisor.take() {
            let _ = thread.join();
        }
    }
}

/// The pause before a server is tried again: doubled after each failed
/// or short session, with a quarter of jitter (dead nodes of one map are
/// not all tried at once), back to the first after a steady one.
#[derive(Debug)]
pub(super) struct Backoff {
    pause: Duration,
}

impl Backoff {
    pub(super) fn new() -> Self {
        Backoff { pause: FIRST_PAUSE }
    }

    /// The pause after a session that lasted `served` (`None`: it never
    /// began); `jitter` in [0, 1).
    pub(super) fn after(&mut self, served: Option<Duration>, jitter: f64) -> Duration {
        if served.is_some_and(|served| served >= MAX_PAUSE) {
            self.pause = FIRST_PAUSE;
        }
        let pause = self.pause;
        self.pause = (self.pause * 2).min(MAX_PAUSE);
        pause.mul_f64(0.75 + jitter / 2.0)
    }
}

/// A number in [0, 1) that differs from call to call (jitter, not
/// security).
fn jitter() -> f64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(Instant::now().elapsed().as_nanos());
    (hasher.finish() >> 11) as f64 / (1u64 << 53) as f64
}

/// One server followed by the supervisor.
struct Followed {
    db: Arc<Database>,
    server: Arc<Server>,
    cache: Arc<NearCache>,
    backoff: Backoff,
    /// Not tried again before this.
    next_try: Instant,
    listener: Option<Listener>,
    /// The last failure logged, not logged again on every retry.
    last_error: String,
}

/// One server's listener thread: it connects, then keeps the session.
struct Listener {
    stop: Arc<AtomicBool>,
    /// Connected (not counted among the connects in progress).
    connected: Arc<AtomicBool>,
    /// How long the session lasted (`None`: it never began), and why it
    /// ended.
    thread: JoinHandle<(Option<Duration>, Result<(), Ended>)>,
}

struct Supervisor {
    log: Log,
    /// By promise: a server replaced by a new one at the same location
    /// has a promise (and a listener) of its own.
    followed: HashMap<*const Promise, Followed>,
}

impl Supervisor {
    fn new(log: Log) -> Self {
        Supervisor {
            log,
            followed: HashMap::new(),
        }
    }

    fn run(mut self, databases: &[Arc<Database>], stop: &AtomicBool) {
        while !stop.load(Ordering::Relaxed) {
            self.follow(databases);
            // Counted once a round, again only when at the cap (not once
            // per server: 300 servers would make it 90,000 looks a slice).
            let mut connecting = self.connecting();
            let keys: Vec<*const Promise> = self.followed.keys().copied().collect();
            for key in keys {
                self.tend(key, &mut connecting);
            }
            std::thread::sleep(SLICE);
        }
        for followed in self.followed.values() {
            if let Some(listener) = &followed.listener {
                listener.stop.store(true, Ordering::Relaxed);
            }
        }
        // Stopped together: each ends within a slice. Each cache is
        // emptied once, not swept once per server.
        let mut caches: Vec<Arc<NearCache>> = Vec::new();
        for (_, followed) in self.followed.drain() {
            if !caches
                .iter()
                .any(|cache| Arc::ptr_eq(cache, &followed.cache))
            {
                caches.push(followed.cache.clone());
            }
            if let Some(listener) = followed.listener {
                let _ = listener.thread.join();
            }
            followed.server.promise.broken();
        }
        for cache in caches {
            cache.clear();
        }
    }

    /// Follows the servers of `databases` as they are now; those gone are
    /// stopped, their promises broken.
    fn follow(&mut self, databases: &[Arc<Database>]) {
        let mut current: HashSet<*const Promise> = HashSet::new();
        let now = Instant::now();
        for db in databases {
            let Some(cache) = db.near_cache() else {
                continue;
            };
            for server in db.topology().servers.iter() {
                let key = Arc::as_ptr(&server.promise);
                current.insert(key);
                self.followed.entry(key).or_insert_with(|| Followed {
                    db: db.clone(),
                    server: server.clone(),
                    cache: cache.clone(),
                    backoff: Backoff::new(),
                    next_try: now,
                    listener: None,
                    last_error: String::new(),
                });
            }
        }
        let gone: Vec<*const Promise> = self
            .followed
            .keys()
            .filter(|key| !current.contains(key))
            .copied()
            .collect();
        let gone: Vec<Followed> = gone
            .into_iter()
            .filter_map(|key| self.followed.remove(&key))
            .collect();
        for followed in &gone {
            if let Some(listener) = &followed.listener {
                listener.stop.store(true, Ordering::Relaxed);
            }
        }
        for followed in gone {
            if let Some(listener) = followed.listener {
                let _ = listener.thread.join();
            }
            followed.server.promise.broken();
            followed.cache.voided(&followed.server.promise);
        }
    }

    /// Listeners still connecting.
    fn connecting(&self) -> usize {
        self.followed
            .values()
            .filter_map(|followed| followed.listener.as_ref())
            .filter(|listener| !listener.connected.load(Ordering::Acquire))
            .count()
    }

    /// Joins a listener that ended, and starts one when it is time and
    /// fewer than [`CONNECTING`] connects are in progress (`connecting`,
    /// counted up as listeners start).
    fn tend(&mut self, key: *const Promise, connecting: &mut usize) {
        if *connecting >= CONNECTING {
            // Some may have connected (or failed) since: counted again.
            *connecting = self.connecting();
        }
        let Some(followed) = self.followed.get_mut(&key) else {
            return;
        };
        let now = Instant::now();
        let ended = followed
            .listener
            .as_ref()
            .is_some_and(|listener| listener.thread.is_finished());
        if ended {
            let listener = followed.listener.take().expect("just seen");
            let (served, result) = listener
                .thread
                .join()
                .unwrap_or_else(|_| (None, Err("the listener panicked".to_string().into())));
            // The session broke its promise as it ended (unless it
            // panicked): done again, harmless.
            followed.server.promise.broken();
            followed.cache.voided(&followed.server.promise);
            if let Err(ended) = result {
                if ended.refused && ended.text != followed.last_error {
                    followed.cache.count_refused();
                }
                report(&self.log, followed, ended.text);
            }
            followed.next_try = now + followed.backoff.after(served, jitter());
        }
        if followed.listener.is_some() || now < followed.next_try || *connecting >= CONNECTING {
            return;
        }
        match spawn(followed) {
            Ok(listener) => {
                followed.listener = Some(listener);
                *connecting += 1;
            }
            Err(err) => {
                report(&self.log, followed, format!("cannot start a thread: {err}"));
                followed.next_try = now + followed.backoff.after(None, jitter());
            }
        }
    }
}

/// Logged once per kind of failure, not on every retry.
fn report(log: &Log, followed: &mut Followed, err: String) {
    if err != followed.last_error {
        log.error(&format!(
            "[REDIS] db {}: near cache: {}: {err}",
            followed.db.name(),
            followed.server.location()
        ));
        followed.last_error = err;
    }
}

/// A listener for the server of `followed`: it connects within [`WAIT`]
/// (ended early by its stop flag), then tracks.
fn spawn(followed: &Followed) -> std::io::Result<Listener> {
    let stop = Arc::new(AtomicBool::new(false));
    let connected = Arc::new(AtomicBool::new(false));
    let config = followed.db.config();
    let connector = Connector::new(
        followed.server.location(),
        config.user.as_deref(),
        config.password.as_deref(),
        Protocol::Resp3,
        Some(WAIT),
        config.tls.clone(),
    );
    let session = Session {
        cache: followed.cache.clone(),
        promise: followed.server.promise.clone(),
        cluster: followed.server.promise.is_cluster_node(),
        stop: stop.clone(),
        asked: VecDeque::new(),
        replication: None,
        migrating: SlotSet::default(),
        beats: 0,
    };
    let flag = connected.clone();
    let thread = std::thread::Builder::new()
        .name("redis-tracking".into())
        .spawn(move || {
            let opened = connector
                .connect_by(&Stats::default(), session.limit())
                .map_err(|err| Ended::from(err.to_string()));
            flag.store(true, Ordering::Release);
            match opened {
                Ok(conn) => {
                    let began = Instant::now();
                    let result = session.run(conn);
                    (Some(began.elapsed()), result)
                }
                Err(ended) => (None, Err(ended)),
            }
        })?;
    Ok(Listener {
        stop,
        connected,
        thread,
    })
}

/// Why a tracking session ended.
#[derive(Debug)]
pub(super) struct Ended {
    text: String,
    /// The server refused what tracking needs (an ACL user without
    /// `CLIENT TRACKING` or `INFO`, a server that does not track): counted
    /// in `ext.near_cache.refused`, the cache cannot work there.
    refused: bool,
}

impl Ended {
    fn refused(what: &str, text: &str) -> Ended {
        Ended {
            text: format!(
                "{what} refused: {}: nothing from this server is cached",
                crate::connection::loggable_error(text)
            ),
            refused: true,
        }
    }
}

impl From<String> for Ended {
    fn from(text: String) -> Ended {
        Ended {
            text,
            refused: false,
        }
    }
}

/// What a heartbeat asks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Asked {
    Replication,
    Nodes,
}

/// One tracking connection's life, on its listener thread.
struct Session {
    cache: Arc<NearCache>,
    promise: Arc<Promise>,
    /// A cluster node: `CLUSTER NODES` in each heartbeat.
    cluster: bool,
    stop: Arc<AtomicBool>,
    /// The heartbeat requests not answered yet, with when they were sent;
    /// the last of a heartbeat is marked.
    asked: VecDeque<(Asked, Instant, bool)>,
    /// What of `INFO replication` tells a change, as last answered.
    replication: Option<String>,
    /// The slots this node is migrating or importing (counted in the
    /// cache while the session lasts).
    migrating: SlotSet,
    /// Heartbeats sent.
    beats: u64,
}

impl Session {
    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    fn limit(&self) -> Limit<'_> {
        Limit::within(Some(WAIT)).or_stop(&self.stop)
    }

    fn run(mut self, mut conn: Connection) -> Result<(), Ended> {
        let result = self.track(&mut conn);
        // Whatever ended it, at once (not when the supervisor comes by):
        // the promise is broken, and no slot is being moved by this node
        // any more, as far as this session can tell.
        self.promise.broken();
        self.cache.voided(&self.promise);
        let migrating = std::mem::take(&mut self.migrating);
        self.cache.set_migrating(&migrating, &SlotSet::default());
        result
    }

    fn track(&mut self, conn: &mut Connection) -> Result<(), Ended> {
        let info = conn
            .request_by(INFO_SERVER, self.limit())
            .map_err(|failure| format!("INFO server: {failure}"))?;
        if let Reply::Error(text) = &info {
            return Err(Ended::refused("INFO server", text));
        }
        let identity = run_id(&info).ok_or("INFO server: no run_id in the reply".to_string())?;
        let field_expiry = has_field_expiry(&info);
        let reply = conn
            .request_by(TRACKING_ON, self.limit())
            .map_err(|failure| format!("CLIENT TRACKING: {failure}"))?;
        if let Reply::Error(text) = reply {
            return Err(Ended::refused("CLIENT TRACKING", &text));
        }
        // From here on Redis reports every change: what was kept before
        // cannot be trusted, nor reads in flight. Served once the first
        // heartbeat is answered.
        self.promise.made(Some(identity.into()), field_expiry);
        self.cache.voided(&self.promise);
        self.listen(conn)
    }

    /// Invalidations and heartbeats until the connection fails, goes
    /// silent for [`GIVE_UP`], or the thread stops.
    fn listen(&mut self, conn: &mut Connection) -> Result<(), Ended> {
        let mut next_beat = Instant::now();
        loop {
            if self.stopped() {
                return Ok(());
            }
            let now = Instant::now();
            if let Some(&(_, sent, _)) = self.asked.front() {
                if now.duration_since(sent) > GIVE_UP {
                    return Err(format!("no answer to the heartbeat within {GIVE_UP:?}").into());
                }
            } else if now >= next_beat {
                // A cluster node's slots are asked every
                // [`SLOTS_EVERY`]th heartbeat: its `CLUSTER NODES` reply
                // grows with the cluster.
                let slots = self.cluster && self.beats % SLOTS_EVERY == 0;
                self.beats += 1;
                let mut beat = INFO_REPLICATION.to_vec();
                self.asked.push_back((Asked::Replication, now, !slots));
                if slots {
                    beat.extend_from_slice(CLUSTER_NODES);
                    self.asked.push_back((Asked::Nodes, now, true));
                }
                conn.send_by(&beat, self.limit())
                    .map_err(|err| format!("heartbeat: {err}"))?;
                next_beat = now + HEARTBEAT;
            }
            // Waiting for an answer: until it comes (or a slice, for the
            // stop flag and the give-up); else until the next heartbeat.
            let wait = if self.asked.is_empty() {
                next_beat
                    .saturating_duration_since(Instant::now())
                    .clamp(Duration::from_millis(1), SLICE)
            } else {
                SLICE
            };
            match conn.receive(wait) {
                // Pushes are arrays; the heartbeat's replies are strings.
                Ok(reply @ Reply::Array(_)) => self.on_push(&reply),
                // An error reply answers a heartbeat (pushes are arrays):
                // `INFO` or `CLUSTER NODES` refused to this user, or a
                // server busy (`BUSY`, `LOADING`: not a refusal).
                Ok(Reply::Error(text)) => {
                    return Err(match ServerError::of(&text).retry() {
                        Retry::Refused => Ended::refused("the heartbeat", &text),
                        _ => format!(
                            "the heartbeat: {}",
                            crate::connection::loggable_error(&text)
                        )
                        .into(),
                    })
                }
                Ok(reply) => self.on_answer(&reply)?,
                Err(Failure::Timeout) => {}
                Err(err) => return Err(format!("tracking connection: {err}").into()),
            }
        }
    }

    /// An invalidation push (`["invalidate", [key...]]`, or `nil` for a
    /// flush); anything else is dropped.
    fn on_push(&self, reply: &Reply) {
        match invalidated(reply) {
            Some(Invalidated::Keys(keys)) => {
                for key in keys {
                    self.cache.invalidate(key);
                }
            }
            Some(Invalidated::All) => {
                self.promise.renewed();
                self.cache.voided(&self.promise);
            }
            None => {}
        }
    }

    /// The answer to the oldest heartbeat request; the last of a
    /// heartbeat proves the promise as of when it was sent.
    fn on_answer(&mut self, reply: &Reply) -> Result<(), String> {
        let Some((asked, sent, last)) = self.asked.pop_front() else {
            return Err("a reply nobody asked for".into());
        };
        match asked {
            Asked::Replication => {
                let state = replication_state(reply).ok_or("INFO replication: no role")?;
                if self
                    .replication
                    .as_ref()
                    .is_some_and(|before| *before != state)
                {
                    self.promise.renewed();
                    self.cache.voided(&self.promise);
                }
                self.replication = Some(state);
            }
            Asked::Nodes => {
                let view = own_slots(reply).ok_or("CLUSTER NODES: no line of its own")?;
                // Migrations first: a slot on its way leaves every node's
                // entries, then what this node no longer serves.
                self.cache.set_migrating(&self.migrating, &view.migrating);
                self.migrating = view.migrating;
                let lost = self.promise.set_slots(&view.serves);
                if !lost.is_empty() {
                    self.cache.slots_lost(&self.promise, &lost);
                }
            }
        }
        if last {
            self.promise.proven(sent);
        }
        Ok(())
    }
}

const TRACKING_ON: &[u8] = b"*4\r\n$6\r\nCLIENT\r\n$8\r\nTRACKING\r\n$2\r\nON\r\n$5\r\nBCAST\r\n";
const INFO_REPLICATION: &[u8] = b"*2\r\n$4\r\nINFO\r\n$11\r\nreplication\r\n";
const CLUSTER_NODES: &[u8] = b"*2\r\n$7\r\nCLUSTER\r\n$5\r\nNODES\r\n";

#[cfg(test)]
mod tests;
