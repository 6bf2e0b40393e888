//! The tracking connections of the near caches of one VCL: one thread per
//! server of each database with a near cache, each holding one RESP3
//! connection with `CLIENT TRACKING ON BCAST`, and one supervisor that
//! follows the databases' servers (added, removed, replaced). Started
//! when the VCL turns warm, stopped (and joined, within about a second)
//! when it cools: only the VCL layer starts them.
//!
//! A thread of its own per server: a server that does not answer (a
//! connect that waits out its timeout) never delays the invalidations of
//! another.
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::NearCache;
use crate::config::Protocol;
use crate::connection::{Connection, Connector, Failure, Limit};
use crate::database::Database;
use crate::protocol::Reply;
use crate::server::Server;
use crate::stats::Stats;

/// How long one wait lasts: the stop flag is seen at least this often,
/// and the supervisor looks at the servers this often.
const SLICE: Duration = Duration::from_millis(100);
/// How often a tracking connection asks `INFO replication`; no answer
/// within [`WAIT`] ends it (a frozen server stops being tracked).
const POLL: Duration = Duration::from_secs(1);
/// Bound of a connect and of a reply on a tracking connection: short,
/// so that stopping never waits long.
const WAIT: Duration = Duration::from_millis(500);
/// Pause after a failed session before the next.
const RETRY_AFTER: Duration = Duration::from_millis(200);

/// Where the threads' messages go (the VSL, outside any transaction).
pub(crate) type Logger = Arc<dyn Fn(&str) + Send + Sync>;

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
        log: Logger,
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
            .spawn(move || supervise(&databases, &flag, &log))?;
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

/// One server's tracking thread.
struct Listener {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<()>,
}

/// Keeps one listener per server of each database, until `stop`. A
/// server is known by its `tracked` flag (one per server, whatever its
/// role): a server replaced by a new one at the same location gets a
/// listener of its own.
fn supervise(databases: &[Arc<Database>], stop: &AtomicBool, log: &Logger) {
    let mut listeners: HashMap<*const AtomicBool, Listener> = HashMap::new();
    while !stop.load(Ordering::Relaxed) {
        let mut current: Vec<*const AtomicBool> = Vec::new();
        for db in databases {
            let Some(cache) = db.near_cache() else {
                continue;
            };
            for server in db.topology().servers.iter() {
                let key = Arc::as_ptr(&server.tracked);
                current.push(key);
                if listeners.contains_key(&key) {
                    continue;
                }
                match spawn(db, cache.clone(), server.clone(), log.clone()) {
                    Ok(listener) => {
                        listeners.insert(key, listener);
                    }
                    Err(err) => log(&format!(
                        "[REDIS] db {}: near cache: cannot start a tracking thread: {err}",
                        db.name()
                    )),
                }
            }
        }
        let gone: Vec<*const AtomicBool> = listeners
            .keys()
            .filter(|key| !current.contains(key))
            .copied()
            .collect();
        // Stopped together, then joined: each ends within a wait.
        let gone: Vec<Listener> = gone
            .into_iter()
            .filter_map(|key| listeners.remove(&key))
            .collect();
        for listener in &gone {
            listener.stop.store(true, Ordering::Relaxed);
        }
        for listener in gone {
            let _ = listener.thread.join();
        }
        std::thread::sleep(SLICE);
    }
    for listener in listeners.values() {
        listener.stop.store(true, Ordering::Relaxed);
    }
    // Stopped together: each ends within a wait.
    for (_, listener) in listeners.drain() {
        let _ = listener.thread.join();
    }
}

fn spawn(
    db: &Database,
    cache: Arc<NearCache>,
    server: Arc<Server>,
    log: Logger,
) -> std::io::Result<Listener> {
    let stop = Arc::new(AtomicBool::new(false));
    let config = db.config();
    let connector = Connector::new(
        server.location(),
        config.user.as_deref(),
        config.password.as_deref(),
        Protocol::Resp3,
        Some(WAIT),
        config.tls.clone(),
    );
    let name = db.name().to_owned();
    let flag = stop.clone();
    let thread = std::thread::Builder::new()
        .name("redis-tracking".into())
        .spawn(move || {
            let tracker = Tracker {
                cache,
                server,
                connector,
                stop: flag,
                log,
                db: name,
            };
            tracker.run();
        })?;
    Ok(Listener { stop, thread })
}

struct Tracker {
    cache: Arc<NearCache>,
    server: Arc<Server>,
    connector: Connector,
    stop: Arc<AtomicBool>,
    log: Logger,
    db: String,
}

impl Tracker {
    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// [`WAIT`], ended early by the stop flag.
    fn limit(&self) -> Limit<'_> {
        Limit::within(Some(WAIT)).or_stop(&self.stop)
    }

    fn run(&self) {
        let mut last_error = String::new();
        while !self.stopped() {
            let result = self.session();
            // Tracking is over, whatever ended it: nothing kept may be
            // served, and no read in flight may fill.
            if self.server.tracked.swap(false, Ordering::AcqRel) {
                self.cache.clear();
            }
            if let Err(err) = result {
                // Logged once per kind of failure, not every retry.
                if err != last_error {
                    (self.log)(&format!(
                        "[REDIS] db {}: near cache: {}: {err}",
                        self.db,
                        self.server.location()
                    ));
                    last_error = err;
                }
            }
            self.pause(RETRY_AFTER);
        }
        if self.server.tracked.swap(false, Ordering::AcqRel) {
            self.cache.clear();
        }
    }

    fn pause(&self, how_long: Duration) {
        let until = Instant::now() + how_long;
        while !self.stopped() && Instant::now() < until {
            std::thread::sleep(SLICE.min(until.saturating_duration_since(Instant::now())));
        }
    }

    /// One tracking connection, until it fails or the thread stops.
    fn session(&self) -> Result<(), String> {
        let mut conn = self
            .connector
            .connect_by(&Stats::default(), self.limit())
            .map_err(|err| err.to_string())?;
        // The replication state before tracking starts: a sync that ends
        // later (which may replace the data with no invalidation) shows
        // as a change of it.
        let info = conn
            .request_by(INFO_REPLICATION, self.limit())
            .map_err(|failure| format!("INFO replication: {failure}"))?;
        let Some(replication) = replication_state(&info) else {
            return Err("INFO replication: no role in the reply".into());
        };
        let reply = conn
            .request_by(TRACKING_ON, self.limit())
            .map_err(|failure| format!("CLIENT TRACKING: {failure}"))?;
        if let Reply::Error(text) = reply {
            return Err(format!(
                "CLIENT TRACKING refused: {}",
                crate::connection::loggable_error(&text)
            ));
        }
        // From here on Redis reports every change: what was kept before
        // (while untracked) cannot be trusted, nor reads in flight.
        self.cache.clear();
        self.server.tracked.store(true, Ordering::Release);
        self.listen(&mut conn, replication)
    }

    /// Invalidations until the connection fails or the thread stops; and
    /// every [`POLL`] `INFO replication` (which also tells a frozen server:
    /// no answer within [`WAIT`] ends the session). A replica that synced
    /// again (its link, its master or its replication id changed) may
    /// have replaced its data without an invalidation (Valkey's diskless
    /// load swaps databases): everything goes.
    fn listen(&self, conn: &mut Connection, mut replication: String) -> Result<(), String> {
        let mut asked: Option<Instant> = None;
        let mut next_ask = Instant::now() + POLL;
        loop {
            if self.stopped() {
                return Ok(());
            }
            match conn.receive(SLICE) {
                Ok(Reply::String(info)) if asked.is_some() => {
                    asked = None;
                    let state = replication_state(&Reply::String(info))
                        .ok_or("INFO replication: no role in the reply")?;
                    if state != replication {
                        self.cache.clear();
                        replication = state;
                    }
                }
                Ok(reply) => self.on_message(&reply)?,
                Err(Failure::Timeout) => {}
                Err(err) => return Err(format!("tracking connection: {err}")),
            }
            let now = Instant::now();
            match asked {
                Some(sent) if now.duration_since(sent) > WAIT => {
                    return Err(format!("no answer to INFO replication within {WAIT:?}"));
                }
                Some(_) => {}
                None if now >= next_ask => {
                    conn.send_by(INFO_REPLICATION, self.limit())
                        .map_err(|err| format!("INFO replication: {err}"))?;
                    asked = Some(now);
                    next_ask = now + POLL;
                }
                None => {}
            }
        }
    }

    /// An invalidation push (`["invalidate", [key...]]`, or `nil` for a
    /// flush); anything else (`PONG`) is dropped. An error reply ends
    /// the session.
    fn on_message(&self, reply: &Reply) -> Result<(), String> {
        match invalidated(reply) {
            Some(Invalidated::Keys(keys)) => {
                for key in keys {
                    self.cache.invalidate(key);
                }
            }
            Some(Invalidated::All) => self.cache.clear(),
            None => {
                if let Reply::Error(text) = reply {
                    return Err(format!(
                        "error on the tracking connection: {}",
                        crate::connection::loggable_error(text)
                    ));
                }
            }
        }
        Ok(())
    }
}

const TRACKING_ON: &[u8] = b"*4\r\n$6\r\nCLIENT\r\n$8\r\nTRACKING\r\n$2\r\nON\r\n$5\r\nBCAST\r\n";
const INFO_REPLICATION: &[u8] = b"*2\r\n$4\r\nINFO\r\n$11\r\nreplication\r\n";

/// What of `INFO replication` says the data may have been replaced: the
/// role, the master, the link, a sync in progress, the replication id.
/// `None`: not such a reply.
pub(super) fn replication_state(reply: &Reply) -> Option<String> {
    let Reply::String(text) = reply else {
        return None;
    };
    let text = std::str::from_utf8(text).ok()?;
    const FIELDS: &[&str] = &[
        "role",
        "master_host",
        "master_port",
        "master_link_status",
        "master_sync_in_progress",
        "master_replid",
    ];
    let state: Vec<&str> = text
        .lines()
        .filter(|line| {
            line.split_once(':')
                .is_some_and(|(key, _)| FIELDS.contains(&key))
        })
        .collect();
    state
        .iter()
        .any(|line| line.starts_with("role:"))
        .then(|| state.join(","))
}

/// What an invalidation push names.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Invalidated<'r> {
    Keys(Vec<&'r [u8]>),
    /// `FLUSHALL` / `FLUSHDB`, or keys Redis no longer tracks.
    All,
}

/// Reads an invalidation push (RESP3 pushes arrive as arrays).
pub(super) fn invalidated(reply: &Reply) -> Option<Invalidated<'_>> {
    let Reply::Array(items) = reply else {
        return None;
    };
    match items.as_slice() {
        [Reply::String(kind), keys] if kind.eq_ignore_ascii_case(b"invalidate") => match keys {
            Reply::Nil => Some(Invalidated::All),
            // A key that is no string cannot be named: everything goes.
            Reply::Array(keys) => Some(
                keys.iter()
                    .map(|key| match key {
                        Reply::String(key) => Some(key.as_slice()),
                        _ => None,
                    })
                    .collect::<Option<Vec<_>>>()
                    .map_or(Invalidated::All, Invalidated::Keys),
            ),
            _ => None,
        },
        _ => None,
    }
}
