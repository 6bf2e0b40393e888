//! Scenario 13 across topologies: the staleness load of `staleness.rs`
//! through reads served by a replica, a Sentinel failover, and a cluster
//! resharding.
use super::staleness_history::checker_self_test;
use super::*;
use std::sync::atomic::AtomicU16;

/// Load before the failover, and after the writes resumed at least.
const FAILOVER_AT: f64 = 3.0;
const AFTER_FAILOVER: f64 = 3.0;
/// Bound on each step of the failover (Sentinel's `failover-timeout` is
/// 2 s).
const SWITCH_BOUND: Duration = Duration::from_secs(10);
/// The resharding begins this far into the load.
const RESHARD_AT: f64 = 2.0;

/// `GET` calls a server answered (`INFO commandstats`).
pub(crate) fn gets(port: u16) -> u64 {
    let info = redis_cmd(port, None, &["INFO", "commandstats"]).unwrap_or_default();
    info.lines()
        .find_map(|l| {
            l.strip_prefix("cmdstat_get:calls=")?
                .split(',')
                .next()?
                .parse()
                .ok()
        })
        .unwrap_or(0)
}

fn replication(port: u16, field: &str) -> String {
    redis_cmd(port, None, &["INFO", "replication"])
        .ok()
        .and_then(|info| info_field::<String>(&info, field))
        .unwrap_or_default()
}

/// A master and its replica (linked), both syncing a replica at once (no
/// diskless delay: the old master resyncs after the failover).
fn master_and_replica(dir: &Path) -> Result<(Redis, Redis), Failed> {
    let args: Vec<String> = vec!["--repl-diskless-sync-delay".into(), "0".into()];
    let master = Redis::start_with(&dir.join("m"), &args)?;
    let mut replicas = start_replicas(dir, &["r1"], "127.0.0.1", master.port, &args)?;
    Ok((master, replicas.remove(0)))
}

/// Waits up to [`SWITCH_BOUND`] for `done`.
fn within_bound(mut done: impl FnMut() -> bool) -> bool {
    let until = Instant::now() + SWITCH_BOUND;
    while !done() {
        if Instant::now() > until {
            return false;
        }
        thread::sleep(Duration::from_millis(20));
    }
    true
}

/// `.replica`: a master and its replica, every read with `execute(false)`
/// (the replica serves them, tracked on the replica), writes to the
/// master (direct, and through Varnish with `execute()`).
pub(crate) fn s13_near_cache_staleness_replica(mode: Mode) -> Result<(), Failed> {
    let StaleTrial { name, db, so, dir } = StaleTrial::begin("replica", mode)?;
    let (master, replica_server) = master_and_replica(&dir)?;
    let replica = replica_server.port;
    let base = vcl(&so, master.port, std::slice::from_ref(&db), &name);
    let text = vcl_with_servers(&base, master.port, &[], &[replica])?;
    let ports = [master.port, replica];
    let mut s = Setup::with_vcl(&name, &dir, master, &text, &ports)?;
    let master_port = s.redis.port;
    let (on_master, on_replica) = (gets(master_port), gets(replica));
    let load = StaleLoad::start(StaleTarget::one_server(
        s.varnish.port,
        |_| "/db/rget/",
        master_port,
    ))?;
    load.sleep_until(DURATION);
    let (on_master, on_replica) = (gets(master_port) - on_master, gets(replica) - on_replica);
    load.finish(&mut s, true)?;
    s.say(format!(
        "GETs the servers answered: master {on_master}, replica {on_replica}"
    ));
    s.check(on_replica > 0, || "the replica served no read".into());
    s.finish()
}

/// `.sentinel-failover`: a master, a replica and three Sentinels; half
/// the readers read with `execute(false)`, half through the master. At
/// 3 s the writes pause (those in flight end, the replica catches up:
/// `WAIT`), `SENTINEL FAILOVER`, and once the old master follows the new
/// one the writes resume there: a write acknowledged by the old master
/// after the switch would be lost by replication, not by the cache.
pub(crate) fn s13_near_cache_staleness_failover(mode: Mode) -> Result<(), Failed> {
    let StaleTrial { name, db, so, dir } = StaleTrial::begin("sentinel-failover", mode)?;
    let (master, replica_server) = master_and_replica(&dir)?;
    let watched = Watched {
        name: MASTER,
        host: "127.0.0.1",
        port: master.port,
        replicas: 1,
    };
    let sentinels = start_sentinels(&dir, &[watched], &[])?;
    let base = vcl(&so, master.port, std::slice::from_ref(&db), &name);
    let replica = replica_server.port;
    let text = vcl_with_servers(&base, master.port, &sentinels.ports(), &[replica])?;
    let old = master.port;
    let mut s = Setup::with_vcl(&name, &dir, master, &text, &[old, replica])?;
    let direct_port = Arc::new(AtomicU16::new(old));
    let mut load = StaleLoad::start(StaleTarget {
        port: s.varnish.port,
        keys: key_names(),
        read_path: |r| if r % 2 == 0 { "/db/get/" } else { "/db/rget/" },
        direct: direct_to(direct_port.clone()),
        absent: Vec::new(),
        expiring: false,
    })?;
    load.sleep_until(FAILOVER_AT);
    load.pause_writes();
    let paused = load.at();
    let waited = redis_cmd(old, None, &["WAIT", "1", "2000"]);
    let asked = load.at();
    let reply = redis_cmd(
        sentinels.ports()[0],
        None,
        &["SENTINEL", "FAILOVER", MASTER],
    );
    let named = within_bound(|| sentinels.master_port().is_some_and(|p| p != old));
    let named_at = load.at();
    let new = sentinels.master_port().unwrap_or(old);
    // Sentinel turns the old master into a replica at its next `INFO` of
    // it, up to 10 s later; until then it is a master of its own, whose
    // data a write to the new one does not reach (stale with or without
    // a cache). Done here at once, as Sentinel will.
    let demoted =
        named.then(|| redis_cmd(old, None, &["REPLICAOF", "127.0.0.1", &new.to_string()]));
    let followed = named
        && within_bound(|| {
            replication(old, "role") == "slave"
                && replication(old, "master_port") == new.to_string()
                && replication(old, "master_link_status") == "up"
        });
    let followed_at = load.at();
    let roles = format!(
        "old: {} of {} link {}, new: {}",
        replication(old, "role"),
        replication(old, "master_port"),
        replication(old, "master_link_status"),
        replication(new, "role")
    );
    let (old_gets, new_gets) = (gets(old), gets(new));
    direct_port.store(new, Ordering::Relaxed);
    load.resume_writes();
    load.events.push(format!(
        "writes paused at {paused:.2} s (WAIT: {waited:?}); SENTINEL FAILOVER at {asked:.2} s ({reply:?}); new master 127.0.0.1:{new} named at {named_at:.2} s; the old one made its replica ({demoted:?}), in sync at {followed_at:.2} s; writes resumed"
    ));
    load.sleep_until(DURATION.max(followed_at + AFTER_FAILOVER));
    load.events.push(format!(
        "{roles}; GETs after the writes resumed: old {}, new {}",
        gets(old) - old_gets,
        gets(new) - new_gets
    ));
    load.finish(&mut s, false)?;
    s.check(named && followed, || {
        format!("the failover did not complete within {SWITCH_BOUND:?} a step")
    });
    s.finish()
}

/// Direct writes to a cluster, from `seed`, following `MOVED` and `ASK`
/// (a connection per write).
pub(crate) fn cluster_direct(seed: u16) -> Box<dyn Fn() -> DirectWrite> {
    Box::new(move || {
        Box::new(move |key, value, ttl| {
            let set = set_args(key, value, ttl);
            let set: Vec<&str> = set.iter().map(String::as_str).collect();
            let (mut port, mut asking) = (seed, false);
            for _ in 0..5 {
                let Ok(mut conn) = RedisConn::open(port) else {
                    return false;
                };
                if asking && conn.cmd(&["ASKING"]).is_err() {
                    return false;
                }
                let reply = match conn.cmd(&set) {
                    Ok(reply) => reply,
                    Err(_) => return false,
                };
                if reply == "+OK" {
                    return true;
                }
                asking = reply.starts_with("-ASK ");
                if !asking && !reply.starts_with("-MOVED ") {
                    return false;
                }
                match reply.rsplit(':').next().and_then(|p| p.trim().parse().ok()) {
                    Some(to) => port = to,
                    None => return false,
                }
            }
            false
        })
    })
}

/// `.resharding`: the cluster of s10, its keys in slots moved from m0 to
/// m1 (most of them) and elsewhere; slots 0-99 moved at 2 s as s10 moves
/// them (`MIGRATE`) while the load runs.
pub(crate) fn s13_near_cache_staleness_resharding(mode: Mode) -> Result<(), Failed> {
    checker_self_test()?;
    let name = format!("s13-resharding-{}", mode.name());
    let (mut s, nodes, _db) = cluster_trial::start_with(&name, stale_db(mode), &[])?;
    let map = nodes.map_seen_by("m0")?;
    let [m0, m1, m2] = [nodes.port("m0"), nodes.port("m1"), nodes.port("m2")];
    let mut tags = Vec::new();
    pick_tags(6, |slot| MOVED.contains(&slot), &mut tags);
    pick_tags(
        2,
        |slot| !MOVED.contains(&slot) && map.owner(slot) == Some(m0),
        &mut tags,
    );
    pick_tags(1, |slot| map.owner(slot) == Some(m1), &mut tags);
    pick_tags(1, |slot| map.owner(slot) == Some(m2), &mut tags);
    check_tags(m0, &tags)?;
    let keys: Vec<String> = (0..KEYS)
        .map(|key| format!("{{{}}}st{key}", tags[key % tags.len()].tag))
        .collect();
    let mut load = StaleLoad::start(StaleTarget {
        port: s.varnish.port,
        keys,
        read_path: |_| "/db/get/",
        direct: cluster_direct(m0),
        absent: Vec::new(),
        expiring: false,
    })?;
    load.sleep_until(RESHARD_AT);
    let started = load.at();
    let mut resharding = Resharding::open(&nodes)?;
    let moved = MOVED
        .clone()
        .try_for_each(|slot| resharding.move_slot(slot, "m0", "m1"));
    let ended = load.at();
    load.events.push(format!(
        "slots {}-{} moved from m0 to m1 from {started:.2} s to {ended:.2} s: {} keys in {} MIGRATE batches ({moved:?})",
        MOVED.start,
        MOVED.end - 1,
        resharding.keys,
        resharding.batches
    ));
    drop(resharding);
    load.sleep_until(DURATION.max(ended + 2.0));
    load.finish(&mut s, false)?;
    moved?;
    s.finish()
}
