//! Scenario 11: the near cache is never stale past the invalidation delay.
//!
//! Writers change a few hot keys, each write a new version of its key (a
//! per-key counter), half of them directly in Redis and half through
//! Varnish, while 100 clients read the keys through Varnish with the
//! near cache on. Mid-run Redis is flushed (`FLUSHALL`) and the tracking
//! connection killed (`CLIENT KILL`), or Redis is SIGKILLed and restarted
//! (no persistence: it comes back empty, like a flush). Every read is
//! logged with its start, end and value, every write with its start and
//! acknowledgement; then each read is checked against the history.
use super::staleness_history::{
    check_history, checker_self_test, expiry_bound, key_set, staleness_bound, History, Read, Reset,
    Write, ALL_KEYS,
};
use super::*;
use parking_lot::Mutex;

const READERS: usize = 100;
const WRITERS: usize = 4;
pub(crate) const KEYS: usize = 40;
/// A writer's pause between two writes: each key changes about every
/// `KEYS / WRITERS` x this (1 s), much longer than the bound, so that an
/// invalidation lost would leave its key stale past the bound (the next
/// write's would end it), and most reads between are hits.
const WRITE_SPACING: Duration = Duration::from_millis(100);

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum StaleEvent {
    /// `FLUSHALL`, then the tracking connection killed (`CLIENT KILL`).
    FlushAndKillTracking,
    /// Redis SIGKILLed, restarted 1 s later (empty).
    Restart,
}

pub(crate) struct Clock(Instant);

impl Clock {
    pub(crate) fn now(&self) -> u64 {
        self.0.elapsed().as_micros() as u64
    }
}

/// The keys of the standalone trials (`fault:` added).
pub(crate) fn key_names() -> Vec<String> {
    (0..KEYS).map(|key| format!("st{key}")).collect()
}

/// A write straight to Redis: `SET fault:<key> <value>` (with `PX` when
/// given a TTL), true when Redis said OK. Each writer keeps its own state
/// (a connection).
pub(crate) type DirectWrite = Box<dyn FnMut(&str, &str, Option<Duration>) -> bool + Send>;

/// `SET fault:<key> <value>`, and `PX <ms>` for a TTL.
pub(crate) fn set_args(key: &str, value: &str, ttl: Option<Duration>) -> Vec<String> {
    let mut args = vec!["SET".to_string(), format!("fault:{key}"), value.to_string()];
    if let Some(ttl) = ttl {
        args.extend(["PX".to_string(), ttl.as_millis().to_string()]);
    }
    args
}

/// The TTLs of [`StaleTarget::expiring`] writes: 50 to 500 ms, both
/// sides of the tracking heartbeat (50 ms) and of the bound on an
/// unproven link (250 ms).
const TTLS_MS: std::ops::RangeInclusive<u64> = 50..=500;

/// Where the load of a staleness trial goes.
pub(crate) struct StaleTarget {
    /// varnishd's port.
    pub(crate) port: u16,
    /// The [`KEYS`] keys, without `fault:`.
    pub(crate) keys: Vec<String>,
    /// What reader `r` asks for (`/db/get/`, `/db/rget/`), the key after.
    pub(crate) read_path: fn(usize) -> &'static str,
    /// A direct writer, for each writer thread.
    pub(crate) direct: Box<dyn Fn() -> DirectWrite>,
    /// Keys (indexes in `keys`) that do not exist when the load begins
    /// (readers get nil) and are not written before
    /// [`StaleLoad::write_absent`]; then only directly, as by clients of
    /// another Varnish: a write through this one would tell it where the
    /// key lives now (`MOVED`), which the cache must know without.
    pub(crate) absent: Vec<usize>,
    /// Every write (version 0 too) gives its key a TTL within [`TTLS_MS`],
    /// and goes straight to Redis: the key expires with no write.
    pub(crate) expiring: bool,
}

impl StaleTarget {
    /// Varnish at `port` in front of the one server at `redis_port` that
    /// takes the direct writes; every key exists from the start.
    pub(crate) fn one_server(
        port: u16,
        read_path: fn(usize) -> &'static str,
        redis_port: u16,
    ) -> StaleTarget {
        StaleTarget {
            port,
            keys: key_names(),
            read_path,
            direct: direct_to(Arc::new(redis_port.into())),
            absent: Vec::new(),
            expiring: false,
        }
    }
}

/// Direct writes to the Redis at `port` (whichever it is when written:
/// the trial may move it), on one connection kept while it works.
pub(crate) fn direct_to(port: Arc<std::sync::atomic::AtomicU16>) -> Box<dyn Fn() -> DirectWrite> {
    Box::new(move || {
        let port = port.clone();
        let mut conn: Option<(u16, RedisConn)> = None;
        Box::new(move |key, value, ttl| {
            let now = port.load(Ordering::Relaxed);
            let mut this = match conn.take() {
                Some((at, c)) if at == now => c,
                _ => match RedisConn::open(now) {
                    Ok(c) => c,
                    Err(_) => return false,
                },
            };
            let args = set_args(key, value, ttl);
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let ok = this.cmd(&args).ok();
            let acked = ok.as_deref() == Some("+OK");
            if ok.is_some() {
                conn = Some((now, this));
            }
            acked
        })
    })
}

/// The readers and writers of a staleness trial, running; every read and
/// write logged.
pub(crate) struct StaleLoad {
    pub(crate) clock: Arc<Clock>,
    history: Arc<Mutex<History>>,
    stop: Arc<AtomicBool>,
    /// Writers write nothing while set ([`StaleLoad::pause_writes`]).
    paused: Arc<AtomicBool>,
    /// Writes in flight.
    writing: Arc<std::sync::atomic::AtomicUsize>,
    /// The absent keys are written from now on.
    absent_open: Arc<AtomicBool>,
    /// Keys given version 0 before the load.
    preloaded: usize,
    threads: Vec<thread::JoinHandle<()>>,
    port: u16,
    before: HashMap<&'static str, u64>,
    /// What the trial did, said at the end.
    pub(crate) events: Vec<String>,
}

impl StaleLoad {
    /// Version 0 of every key (direct) but the absent ones, then
    /// [`READERS`] readers and [`WRITERS`] writers.
    pub(crate) fn start(target: StaleTarget) -> Res<StaleLoad> {
        let clock = Arc::new(Clock(Instant::now()));
        let history = Arc::new(Mutex::new(History::default()));
        let absent = Arc::new(target.absent);
        {
            let mut direct = (target.direct)();
            let mut h = history.lock();
            if !absent.is_empty() {
                h.resets.push(Reset {
                    start: 0,
                    end: 0,
                    keys: key_set(&absent),
                });
            }
            for (key, name) in target.keys.iter().enumerate() {
                if absent.contains(&key) {
                    continue;
                }
                // An expiring version 0 is judged by when it was written.
                let ttl = target.expiring.then(|| ttl_of(key as u64));
                let start = if ttl.is_some() { clock.now() } else { 0 };
                if !direct(name, "0", ttl) {
                    return Err(format!("SET fault:{name} 0 not acknowledged"));
                }
                h.writes.push(Write {
                    key,
                    version: 0,
                    start,
                    end: if ttl.is_some() { clock.now() } else { 0 },
                    acked: true,
                    ttl: ttl.map(|ttl| ttl.as_micros() as u64),
                });
            }
        }
        let port = target.port;
        let before = near_cache_counters(port)?;
        let keys = Arc::new(target.keys);
        let stop = Arc::new(AtomicBool::new(false));
        let paused = Arc::new(AtomicBool::new(false));
        let writing = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let absent_open = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        for r in 0..READERS {
            let (clock, history, stop, keys) =
                (clock.clone(), history.clone(), stop.clone(), keys.clone());
            let path = (target.read_path)(r);
            threads.push(
                thread::Builder::new()
                    .name(format!("reader-{r}"))
                    .stack_size(256 * 1024)
                    .spawn(move || reader(port, path, &keys, r, &clock, &history, &stop))
                    .expect("spawn reader"),
            );
        }
        for w in 0..WRITERS {
            let (clock, history, stop, keys) =
                (clock.clone(), history.clone(), stop.clone(), keys.clone());
            let (paused, writing) = (paused.clone(), writing.clone());
            let (absent, absent_open) = (absent.clone(), absent_open.clone());
            let direct = (target.direct)();
            let expiring = target.expiring;
            threads.push(
                thread::Builder::new()
                    .name(format!("writer-{w}"))
                    .spawn(move || {
                        let gate = Gate {
                            stop: &stop,
                            paused: &paused,
                            writing: &writing,
                            absent: &absent,
                            absent_open: &absent_open,
                            expiring,
                        };
                        writer(port, direct, &keys, w, &clock, &history, &gate)
                    })
                    .expect("spawn writer"),
            );
        }
        Ok(StaleLoad {
            clock,
            history,
            stop,
            paused,
            writing,
            absent_open,
            preloaded: KEYS - absent.len(),
            threads,
            port,
            before,
            events: Vec::new(),
        })
    }

    /// Seconds since the load began.
    pub(crate) fn at(&self) -> f64 {
        self.clock.0.elapsed().as_secs_f64()
    }

    pub(crate) fn sleep_until(&self, secs: f64) {
        let target = self.clock.0 + Duration::from_secs_f64(secs);
        if let Some(left) = target.checked_duration_since(Instant::now()) {
            thread::sleep(left);
        }
    }

    /// Every key emptied between `start` and `end` (µs of the clock).
    pub(crate) fn reset(&self, start: u64, end: u64) {
        self.reset_keys(start, end, ALL_KEYS);
    }

    /// The keys of `keys` ([`key_set`]) emptied between `start` and `end`.
    pub(crate) fn reset_keys(&self, start: u64, end: u64, keys: u64) {
        self.history.lock().resets.push(Reset { start, end, keys });
    }

    /// The absent keys are written from now on.
    pub(crate) fn write_absent(&self) {
        self.absent_open.store(true, Ordering::SeqCst);
    }

    /// No write begins from now on until [`StaleLoad::resume_writes`];
    /// returns once those in flight are over (5 s at most).
    pub(crate) fn pause_writes(&self) {
        self.paused.store(true, Ordering::SeqCst);
        let until = Instant::now() + Duration::from_secs(5);
        while self.writing.load(Ordering::SeqCst) > 0 && Instant::now() < until {
            thread::sleep(Duration::from_millis(5));
        }
    }

    pub(crate) fn resume_writes(&self) {
        self.paused.store(false, Ordering::SeqCst);
    }

    /// Stops the load, judges every read against the history, and says
    /// it all in `s`. `all_answered`: every read must have got a reply.
    pub(crate) fn finish(self, s: &mut Setup, all_answered: bool) -> Res<()> {
        self.finish_judged(s, all_answered, |_| {})
    }

    /// [`StaleLoad::finish`], the history first given to `judged_as`
    /// (which may say when a write counts as acknowledged for readers
    /// that may read a replica).
    pub(crate) fn finish_judged(
        mut self,
        s: &mut Setup,
        all_answered: bool,
        judged_as: impl FnOnce(&mut History),
    ) -> Res<()> {
        let secs = self.at();
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        let (nc0, nc1) = (&self.before, near_cache_counters(self.port)?);
        let mut history = std::mem::take(&mut *self.history.lock());
        judged_as(&mut history);
        for e in &self.events {
            s.say(e);
        }
        let verdict = check_history(&history);
        let delta = |c: &str| nc1.get(c).copied().unwrap_or(0) - nc0.get(c).copied().unwrap_or(0);
        let hits = delta("hits");
        // The preloaded version 0 of a key is not a write of the load.
        let acked = history.writes.iter().filter(|w| w.acked).count() - self.preloaded;
        s.say(format!(
            "{READERS} readers, {WRITERS} writers, {KEYS} keys, {secs:.0} s: {} reads answered ({} not, {} bad status), {} writes ({acked} acknowledged), {} resets",
            history.reads.len(),
            history.unanswered,
            history.bad_status,
            history.writes.len() - self.preloaded,
            history.resets.len()
        ));
        s.say(format!(
            "near cache: hits {hits}, misses {}, invalidations {}, entries now {}",
            delta("misses"),
            delta("invalidations"),
            nc1.get("entries").copied().unwrap_or(0)
        ));
        s.say(verdict.summary());
        for line in verdict.failures.iter().take(10) {
            s.say(format!("stale: {line}"));
        }
        if !verdict.failures.is_empty() {
            // For a look afterwards (FAULTS_KEEP=1 keeps it).
            let path = s.redis.dir.join("staleness-history.txt");
            let _ = fs::write(&path, history.dump());
            s.say(format!("history written to {}", path.display()));
        }
        s.check(verdict.failures.is_empty(), || {
            format!(
                "{} read(s) stale past {} ms, served past their expiry by more than {} ms, or of a value never written (first: {})",
                verdict.failures.len(),
                staleness_bound().as_millis(),
                expiry_bound().as_millis(),
                verdict.failures.first().cloned().unwrap_or_default()
            )
        });
        s.check(history.bad_status == 0, || {
            format!("{} reads not answered with a 200", history.bad_status)
        });
        // Else the check proves nothing about the cache.
        s.check(hits * 4 > history.reads.len() as u64, || {
            format!(
                "near cache hits {hits} of {} reads: under a quarter",
                history.reads.len()
            )
        });
        if all_answered {
            s.check(history.unanswered == 0, || {
                format!("{} reads got no reply", history.unanswered)
            });
        }
        Ok(())
    }
}

impl Drop for StaleLoad {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

pub(crate) fn s13_near_cache_staleness(mode: Mode, event: StaleEvent) -> Result<(), Failed> {
    checker_self_test()?;
    let db = stale_db(mode);
    let label = match event {
        StaleEvent::FlushAndKillTracking => "",
        StaleEvent::Restart => "-restart",
    };
    let mut s = Setup::start(
        &format!("s13-{}{label}", mode.name()),
        std::slice::from_ref(&db),
    )?;
    let redis_port = s.redis.port;
    let mut load = StaleLoad::start(StaleTarget::one_server(
        s.varnish.port,
        |_| "/db/get/",
        redis_port,
    ))?;
    match event {
        StaleEvent::FlushAndKillTracking => {
            load.sleep_until(3.5);
            let start = load.clock.now();
            let reply = redis_cmd(redis_port, None, &["FLUSHALL"]);
            load.reset(start, load.clock.now());
            load.events.push(format!(
                "FLUSHALL at {:.2} s: {reply:?}",
                start as f64 / 1e6
            ));
            load.sleep_until(6.5);
            let killed = kill_tracking_connections(redis_port);
            load.events.push(format!(
                "tracking connection(s) killed at {:.2} s: {killed:?}",
                load.at()
            ));
        }
        StaleEvent::Restart => {
            load.sleep_until(4.0);
            let start = load.clock.now();
            s.redis.kill9();
            load.reset(start, load.clock.now());
            load.sleep_until(5.0);
            let restarted = s.redis.spawn();
            load.events.push(format!(
                "Redis SIGKILLed at {:.2} s, restarted at {:.2} s ({restarted:?})",
                start as f64 / 1e6,
                load.at()
            ));
            restarted?;
        }
    }
    load.sleep_until(DURATION);
    load.finish(&mut s, event == StaleEvent::FlushAndKillTracking)?;
    s.finish()
}

/// The database of the staleness trials.
pub(crate) fn stale_db(mode: Mode) -> DbSpec {
    let mut db = DbSpec::new("db", mode);
    db.near_cache = 16 << 20;
    db.connection_timeout = 200;
    db
}

/// What an s13 trial on servers of its own begins with, once the
/// checker passed its self-test: its name (`s13-<label>-<mode>`), its
/// database, the module and its directory.
pub(crate) struct StaleTrial {
    pub(crate) name: String,
    pub(crate) db: DbSpec,
    pub(crate) so: PathBuf,
    pub(crate) dir: PathBuf,
}

impl StaleTrial {
    pub(crate) fn begin(label: &str, mode: Mode) -> Res<StaleTrial> {
        checker_self_test()?;
        let name = format!("s13-{label}-{}", mode.name());
        Ok(StaleTrial {
            db: stale_db(mode),
            so: support::vmod_so()?,
            dir: support::trial_dir(&name)?,
            name,
        })
    }
}

/// Seconds of load of a staleness trial.
pub(crate) const DURATION: f64 = 10.0;

fn reader(
    port: u16,
    path: &str,
    keys: &[String],
    r: usize,
    clock: &Clock,
    history: &Mutex<History>,
    stop: &AtomicBool,
) {
    let mut reads = Vec::with_capacity(8192);
    let (mut unanswered, mut bad_status) = (0, 0);
    let mut conn: Option<BufReader<TcpStream>> = None;
    let any_server = path.contains("/rget/");
    let mut rng = 0x9e37_79b9_7f4a_7c15_u64 ^ (r as u64).wrapping_mul(0x2545_f491_4f6c_dd1d);
    while !stop.load(Ordering::Relaxed) {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let key = (rng % KEYS as u64) as usize;
        let path = format!("{path}{}", keys[key]);
        let start = clock.now();
        let result = match conn.as_mut() {
            Some(c) => request(c, &path),
            None => connect(port, Duration::from_secs(5)).and_then(|mut c| {
                let resp = request(&mut c, &path);
                conn = Some(c);
                resp
            }),
        };
        let end = clock.now();
        match result {
            Ok(resp) if resp.status == 200 => {
                let replied = resp.headers.get("x-r").is_some_and(|r| r == "r1");
                let value = resp.headers.get("x-v").map(String::as_str);
                match (replied, value) {
                    (true, Some("(nil)")) => reads.push(Read {
                        key,
                        start,
                        end,
                        value: None,
                        any_server,
                    }),
                    (true, Some(v)) if v.parse::<u64>().is_ok() => reads.push(Read {
                        key,
                        start,
                        end,
                        value: v.parse().ok(),
                        any_server,
                    }),
                    _ => unanswered += 1,
                }
            }
            Ok(_) => bad_status += 1,
            Err(_) => {
                bad_status += 1;
                conn = None;
                thread::sleep(Duration::from_millis(10));
            }
        }
    }
    let mut h = history.lock();
    h.reads.extend(reads);
    h.unanswered += unanswered;
    h.bad_status += bad_status;
}

/// When and how a writer writes.
struct Gate<'a> {
    stop: &'a AtomicBool,
    paused: &'a AtomicBool,
    /// Writes in flight, for [`StaleLoad::pause_writes`].
    writing: &'a std::sync::atomic::AtomicUsize,
    /// Keys not written until `absent_open`, then only directly.
    absent: &'a [usize],
    absent_open: &'a AtomicBool,
    /// [`StaleTarget::expiring`].
    expiring: bool,
}

/// A TTL within [`TTLS_MS`], spread by `seed`.
fn ttl_of(seed: u64) -> Duration {
    let span = TTLS_MS.end() - TTLS_MS.start() + 1;
    Duration::from_millis(TTLS_MS.start() + seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) % span)
}

/// Writes the keys `w`, `w + WRITERS`... in turn, each a new version,
/// one write in two through Varnish and the other directly (the absent
/// keys, and expiring ones, only directly; the absent once they may be
/// written).
fn writer(
    port: u16,
    mut direct: DirectWrite,
    names: &[String],
    w: usize,
    clock: &Clock,
    history: &Mutex<History>,
    gate: &Gate,
) {
    let keys: Vec<usize> = (w..KEYS).step_by(WRITERS).collect();
    let mut versions = vec![0u64; keys.len()];
    let mut writes = Vec::new();
    let mut through: Option<BufReader<TcpStream>> = None;
    let mut turn = 0usize;
    while !gate.stop.load(Ordering::Relaxed) {
        gate.writing.fetch_add(1, Ordering::SeqCst);
        if gate.paused.load(Ordering::SeqCst) {
            gate.writing.fetch_sub(1, Ordering::SeqCst);
            thread::sleep(Duration::from_millis(10));
            continue;
        }
        let i = turn % keys.len();
        let key = keys[i];
        let absent = gate.absent.contains(&key);
        if absent && !gate.absent_open.load(Ordering::SeqCst) {
            gate.writing.fetch_sub(1, Ordering::SeqCst);
            turn += 1;
            // Not a spin should a writer have absent keys only.
            thread::sleep(Duration::from_millis(1));
            continue;
        }
        versions[i] += 1;
        let version = versions[i];
        let ttl = gate
            .expiring
            .then(|| ttl_of(key as u64 * 1_000_003 + version));
        let start = clock.now();
        let acked = if turn % 2 == 0 || absent || ttl.is_some() {
            direct(&names[key], &version.to_string(), ttl)
        } else {
            let path = format!("/db/put/{}/{version}", names[key]);
            let result = match through.as_mut() {
                Some(c) => request(c, &path),
                None => connect(port, Duration::from_secs(5)).and_then(|mut c| {
                    let resp = request(&mut c, &path);
                    through = Some(c);
                    resp
                }),
            };
            match result {
                Ok(resp) => {
                    resp.status == 200 && resp.headers.get("x-r").is_some_and(|r| r == "r1")
                }
                Err(_) => {
                    through = None;
                    false
                }
            }
        };
        let end = clock.now();
        gate.writing.fetch_sub(1, Ordering::SeqCst);
        writes.push(Write {
            key,
            version,
            start,
            end,
            acked,
            ttl: ttl.map(|ttl| ttl.as_micros() as u64),
        });
        turn += 1;
        // After a failure, a pause: a write that may still be applied
        // is not overtaken by the next version of its key.
        thread::sleep(if acked {
            WRITE_SPACING
        } else {
            Duration::from_millis(100)
        });
    }
    history.lock().writes.extend(writes);
}

/// `CLIENT KILL` of the connections in tracking mode.
fn kill_tracking_connections(port: u16) -> Res<usize> {
    let ids = tracking_connections(port)?;
    for id in &ids {
        redis_cmd(port, None, &["CLIENT", "KILL", "ID", id]).map_err(|e| e.to_string())?;
    }
    Ok(ids.len())
}

/// The ids of the connections in tracking mode (flag `t`).
pub(crate) fn tracking_connections(port: u16) -> Res<Vec<String>> {
    let list = redis_cmd(port, None, &["CLIENT", "LIST"]).map_err(|e| e.to_string())?;
    Ok(list
        .lines()
        .filter(|l| {
            l.split_whitespace()
                .find_map(|f| f.strip_prefix("flags="))
                .is_some_and(|f| f.contains('t'))
        })
        .filter_map(|l| {
            l.split_whitespace()
                .find_map(|f| f.strip_prefix("id="))
                .map(str::to_string)
        })
        .collect())
}

/// The near cache's counters (`/db/near-cache`).
pub(crate) fn near_cache_counters(port: u16) -> Res<HashMap<&'static str, u64>> {
    let resp = http_get(port, "/db/near-cache").map_err(|e| format!("/db/near-cache: {e}"))?;
    Ok(NEAR_CACHE_COUNTERS
        .iter()
        .map(|c| {
            let value = resp
                .headers
                .get(&format!("x-nc-{c}"))
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            (*c, value)
        })
        .collect())
}

pub(crate) const NEAR_CACHE_COUNTERS: &[&str] = &[
    "hits",
    "misses",
    "invalidations",
    "evictions",
    "entries",
    "refused",
];
