//! Scenario 13 through links that lie to the near cache: a tracking
//! connection that stops forwarding without closing, a location that
//! balances connections over a master and its lagging replica, and a
//! lagging replica listed as a server of its own. The links are the
//! proxies of `proxy.rs`.
use super::proxy::Proxy;
use super::staleness::{near_cache_counters, Clock};
use super::staleness_history::{staleness_bound, History, ReplicaPoll};
use super::*;
use parking_lot::Mutex;

/// The frozen link: from this far into the load, for this long.
const FREEZE_AT: f64 = 3.0;
const FREEZE_FOR: f64 = 3.0;
/// The replication link's delay: past the bound, so that a read of the
/// replica without a cache is stale by the master's writes.
const LAG: Duration = Duration::from_millis(400);
/// Load of the lagging replica trials.
const LAG_LOAD: f64 = 8.0;
/// Spacing of the polls of the replica.
const POLL: Duration = Duration::from_millis(10);

/// `.frozen-link`: the location is a proxy to Redis; at 3 s it stops
/// forwarding the tracking connection (either way, without closing it,
/// and any new one once it sends `CLIENT TRACKING`) while writers go on,
/// directly and through the proxy's other connections; 3 s later it
/// forwards again. Besides the staleness check: no hit from the bound
/// (and 100 ms for the counters' read) after the freeze until it ends,
/// and hits again from 1 s after.
pub(crate) fn s13_near_cache_staleness_frozen_link(mode: Mode) -> Result<(), Failed> {
    let StaleTrial { name, db, so, dir } = StaleTrial::begin("frozen-link", mode)?;
    let redis = Redis::start(&dir)?;
    let redis_port = redis.port;
    let proxy = Proxy::start(&[redis_port], Duration::ZERO)?;
    let text = vcl(&so, proxy.port, std::slice::from_ref(&db), &name);
    let mut s = Setup::with_vcl(&name, &dir, redis, &text, &[redis_port])?;
    let port = s.varnish.port;
    let hits = || near_cache_counters(port).map(|c| c["hits"]);
    let mut load = StaleLoad::start(StaleTarget::one_server(port, |_| "/db/get/", redis_port))?;
    load.sleep_until(FREEZE_AT);
    let frozen_at = load.at();
    proxy.freeze_tracking(true);
    load.sleep_until(frozen_at + staleness_bound().as_secs_f64() + 0.1);
    let (from, hits_from) = (load.at(), hits()?);
    load.sleep_until(frozen_at + FREEZE_FOR);
    let hits_frozen = hits()? - hits_from;
    let thawed = load.at();
    proxy.freeze_tracking(false);
    load.sleep_until(thawed + 1.0);
    let hits_back = hits()?;
    load.sleep_until(DURATION);
    let hits_after = hits()? - hits_back;
    let (connections, tracking) = proxy.connections();
    load.events.push(format!(
        "tracking link frozen from {frozen_at:.2} s to {thawed:.2} s: {hits_frozen} hits from {from:.2} s until then, {hits_after} from {:.2} s on; {connections} connections through the proxy, {tracking} of them tracking links",
        thawed + 1.0
    ));
    load.finish(&mut s, true)?;
    s.check(hits_frozen == 0, || {
        format!("{hits_frozen} near cache hits while the tracking link was frozen")
    });
    s.check(hits_after > 0, || {
        "no near cache hit once the tracking link was back".into()
    });
    s.finish()
}

/// A master, and its replica whose replication link goes through a proxy
/// that delays the master's stream by [`LAG`] (once in sync).
fn lagging_replica(dir: &Path) -> Result<(Redis, Proxy, Redis), Failed> {
    let args: Vec<String> = vec!["--repl-diskless-sync-delay".into(), "0".into()];
    let master = Redis::start_with(&dir.join("m"), &args)?;
    let link = Proxy::start(&[master.port], Duration::ZERO)?;
    let mut replicas = start_replicas(dir, &["r1"], "127.0.0.1", link.port, &args)?;
    link.set_delay(LAG);
    Ok((master, link, replicas.remove(0)))
}

/// Reads every key on a replica every [`POLL`] (`MGET`), for
/// [`History::as_replica_held`].
struct ReplicaWatch {
    stop: Arc<AtomicBool>,
    thread: thread::JoinHandle<Vec<ReplicaPoll>>,
}

impl ReplicaWatch {
    fn start(port: u16, keys: &[String], clock: Arc<Clock>) -> ReplicaWatch {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let mut mget = vec!["MGET".to_string()];
        mget.extend(keys.iter().map(|k| format!("fault:{k}")));
        let thread = thread::spawn(move || {
            let args: Vec<&str> = mget.iter().map(String::as_str).collect();
            let mut polls = Vec::new();
            let mut conn = None;
            while !flag.load(Ordering::Relaxed) {
                if conn.is_none() {
                    conn = RedisConn::open(port).ok();
                }
                if let Some(c) = conn.as_mut() {
                    match c.value(&args) {
                        Ok(reply) => polls.push(ReplicaPoll {
                            at: clock.now(),
                            versions: reply
                                .items()
                                .iter()
                                .map(|v| v.text().and_then(|t| t.parse().ok()))
                                .collect(),
                        }),
                        Err(_) => conn = None,
                    }
                }
                thread::sleep(POLL);
            }
            polls
        });
        ReplicaWatch { stop, thread }
    }

    fn stop(self) -> Vec<ReplicaPoll> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap_or_default()
    }
}

/// How late the replica held the acknowledged writes (p50, worst), as
/// the polls saw it.
fn replica_lag(history: &History, polls: &[ReplicaPoll]) -> String {
    let mut held = History {
        writes: history.writes.clone(),
        ..History::default()
    };
    held.as_replica_held(polls);
    let mut lags: Vec<u64> = history
        .writes
        .iter()
        .zip(&held.writes)
        .filter(|(w, h)| w.acked && w.end > 0 && h.end != u64::MAX)
        .map(|(w, h)| h.end - w.end)
        .collect();
    lags.sort_unstable();
    let never = held
        .writes
        .iter()
        .filter(|w| w.acked && w.end == u64::MAX)
        .count();
    format!(
        "replica lag behind the master's acknowledgements ({} polls): p50 {:.0} ms, worst {:.0} ms, {never} writes never seen there (overwritten between polls, or too late)",
        polls.len(),
        lags.get(lags.len() / 2).copied().unwrap_or(0) as f64 / 1000.0,
        lags.last().copied().unwrap_or(0) as f64 / 1000.0
    )
}

/// Which of the two trials on a lagging replica.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Lagging {
    /// One location, a balancer over the master and the replica.
    Balanced,
    /// The master and the replica, each a server of the database.
    Listed,
}

/// `.balanced` and `.replica-lag`: a master, and a replica [`LAG`]
/// behind (its replication link through a delaying proxy); every read
/// with `execute(false)`, the writes on the master (direct, and through
/// Varnish: behind the balancer, those that reach the replica are
/// refused, `READONLY`). `Balanced`: the database's one location is a
/// proxy spreading connections over the master and the replica in turn.
/// `Listed`: the VCL lists both (`type = auto`), reads go to the replica.
/// A read of the replica without a cache is as stale as the replica:
/// each write counts as acknowledged once a poll of the replica (every
/// 10 ms) saw it, so the bound is on how much staler than the replica a
/// read is (`History::as_replica_held`).
pub(crate) fn s13_near_cache_staleness_lagging(mode: Mode, lagging: Lagging) -> Result<(), Failed> {
    let label = match lagging {
        Lagging::Balanced => "balanced",
        Lagging::Listed => "replica-lag",
    };
    let StaleTrial { name, db, so, dir } = StaleTrial::begin(label, mode)?;
    let (master, _link, replica) = lagging_replica(&dir)?;
    let (master_port, replica_port) = (master.port, replica.port);
    let balancer = match lagging {
        Lagging::Balanced => Some(Proxy::start(&[master_port, replica_port], Duration::ZERO)?),
        Lagging::Listed => None,
    };
    let text = match &balancer {
        Some(b) => vcl(&so, b.port, std::slice::from_ref(&db), &name),
        None => {
            let base = vcl(&so, master_port, std::slice::from_ref(&db), &name);
            vcl_with_servers(&base, master_port, &[], &[replica_port])?
        }
    };
    let mut s = Setup::with_vcl(&name, &dir, master, &text, &[master_port, replica_port])?;
    let gets_before = (gets(master_port), gets(replica_port));
    let mut load = StaleLoad::start(StaleTarget::one_server(
        s.varnish.port,
        |_| "/db/rget/",
        master_port,
    ))?;
    let watch = ReplicaWatch::start(replica_port, &key_names(), load.clock.clone());
    load.sleep_until(LAG_LOAD);
    let polls = watch.stop();
    let served = (
        gets(master_port) - gets_before.0,
        gets(replica_port) - gets_before.1,
    );
    load.events.push(format!(
        "replication link delayed {} ms; GETs the servers answered: master {}, replica {}{}",
        LAG.as_millis(),
        served.0,
        served.1,
        balancer.as_ref().map_or(String::new(), |b| format!(
            "; {} connections through the balancer, {} of them tracking links",
            b.connections().0,
            b.connections().1
        ))
    ));
    let lag = Mutex::new(String::new());
    load.finish_judged(&mut s, true, |h| {
        *lag.lock() = replica_lag(h, &polls);
        h.as_replica_held(&polls);
    })?;
    s.say(lag.into_inner());
    s.check(served.1 > 0, || "the replica served no read".into());
    // Behind the balancer, the replies of the server the tracking
    // connection did not reach are not kept, and that is said once:
    // logged and counted in `refused`. Listed, each server vouches for
    // its own.
    let refused = near_cache_counters(s.varnish.port)?["refused"];
    let expected = u64::from(lagging == Lagging::Balanced);
    s.check(refused == expected, || {
        format!("ext.near_cache.refused {refused}, expected {expected}")
    });
    if lagging == Lagging::Balanced {
        s.check(served.0 > 0, || "the master served no read".into());
    }
    drop(replica);
    s.finish()
}
