//! Scenario 9: a cluster master SIGKILLed under load, its replica promoted
//! by the cluster.
use super::*;

/// Tags of the load on each master.
const TAGS_PER_MASTER: usize = 3;
/// The replica is promoted this long after the kill at the latest
/// (`cluster-node-timeout` 1 s, then the election).
const PROMOTION_BOUND: f64 = 10.0;
/// Requests for the killed master's slots are replied again this long
/// after the promotion at the latest.
const RESUME_WITHIN: f64 = 3.0;
/// Load after the cluster is ok again.
const TAIL: f64 = 4.0;
/// How far the cluster's state may have changed before the test's polling
/// saw it.
const POLL_SLACK: f64 = 0.5;
/// The nodes that stay up.
const LIVE: [&str; 5] = ["m1", "m2", "r0", "r1", "r2"];

/// When the cluster's state changed, on the load clock (s).
#[derive(Default)]
struct Timeline {
    /// A surviving master first reports `cluster_state:fail`.
    down: Option<f64>,
    /// r0 first reports `role:master`.
    promoted: Option<f64>,
    /// Every live node reports `cluster_state:ok` after the promotion.
    ok: Option<f64>,
}

fn state_ok(port: u16) -> Option<bool> {
    let info = cluster::ask(port, &["CLUSTER", "INFO"]).ok()?;
    Some(info.contains("cluster_state:ok"))
}

/// Polls the cluster every 20 ms from the kill on, until it is ok again
/// or [`PROMOTION_BOUND`].
fn follow(load: &Load, nodes: &Nodes, killed: f64) -> Timeline {
    let mut t = Timeline::default();
    while load.at() < killed + PROMOTION_BOUND {
        let now = load.at();
        if t.down.is_none()
            && nodes
                .ports(&["m1", "m2"])
                .into_iter()
                .any(|p| state_ok(p) == Some(false))
        {
            t.down = Some(now);
        }
        if t.promoted.is_none()
            && redis_cmd(nodes.port("r0"), None, &["INFO", "replication"])
                .is_ok_and(|i| i.contains("role:master"))
        {
            t.promoted = Some(now);
        }
        if t.promoted.is_some()
            && nodes
                .ports(&LIVE)
                .into_iter()
                .all(|p| state_ok(p) == Some(true))
        {
            t.ok = Some(now);
            break;
        }
        thread::sleep(Duration::from_millis(20));
    }
    t
}

fn at(t: Option<f64>, from: f64) -> String {
    t.map_or("never".into(), |t| format!("{t:.2} s (+{})", ms(t - from)))
}

pub(crate) fn s9_cluster_failover(mode: Mode) -> Result<(), Failed> {
    let name = format!("s9-{}", mode.name());
    let (mut s, nodes, db) =
        cluster_trial::start(&name, mode, &["--cluster-node-timeout", "1000"])?;
    let node_timeout = RedisConn::open(nodes.port("m1"))
        .and_then(|mut c| c.cmd_array(&["CONFIG", "GET", "cluster-node-timeout"]))
        .map_err(|e| format!("CONFIG GET: {e}"))?;
    if node_timeout.get(1).map(String::as_str) != Some("1000") {
        return Err(format!("cluster-node-timeout not overridden: {node_timeout:?}").into());
    }
    let map = nodes.map_seen_by("m0")?;
    let mut tags = Vec::new();
    let mut per_master = Vec::new();
    for m in ["m0", "m1", "m2"] {
        let port = nodes.port(m);
        per_master.push(pick_tags(
            TAGS_PER_MASTER,
            |slot| map.owner(slot) == Some(port),
            &mut tags,
        ));
    }
    check_tags(s.redis.port, &tags)?;
    let (m0_tags, other_tags) = (
        per_master[0].clone(),
        [&per_master[1][..], &per_master[2][..]].concat(),
    );
    let live = nodes.ports(&LIVE);
    let clients = 20;
    let kill_at = 2.0;
    let (load, before, killed) = load_until(&s, clients, &tags, kill_at, &live);
    s.redis.kill9();
    let t = follow(&load, &nodes, killed);
    if let Some(ok) = t.ok {
        load.sleep_until(ok + TAIL);
    }
    load.stop.store(true, Ordering::Relaxed);
    let report = load.finish();
    s.say(format!(
        "{clients} clients, {:.1} s of SET / GET / EVAL on {} tags ({TAGS_PER_MASTER} per master); m0 SIGKILLed at {killed:.2} s; cluster_state:fail first seen at {}, r0 promoted at {}, cluster ok at {}",
        report.secs,
        tags.len(),
        at(t.down, killed),
        at(t.promoted, killed),
        at(t.ok, killed),
    ));
    let (Some(promoted), Some(ok)) = (t.promoted, t.ok) else {
        s.check(false, || {
            format!("r0 not promoted, or the cluster not ok again, within {PROMOTION_BOUND} s")
        });
        return s.finish();
    };
    thread::sleep(Duration::from_millis(300));
    let after = settled_all(&s.varnish, &live);
    let counters = counters(s.varnish.port, "db")?;
    let pid = s.varnish.varnishd.child_pid;
    let to_dead = tcp_inodes_count(pid, s.redis.port);
    let to_promoted = tcp_inodes_count(pid, nodes.port("r0"));

    let all = report.all();
    let pre = figures(&report.ended_before(killed));
    let m0_samples = on_tags(&report, &tags, &m0_tags);
    let others = on_tags(&report, &tags, &other_tags);
    let in_window = |samples: &[Sample], from: f64, to: f64| -> Vec<Sample> {
        samples
            .iter()
            .filter(|x| (from * 1e6) as u64 <= x.start_us && x.start_us < (to * 1e6) as u64)
            .copied()
            .collect()
    };
    let m0_down = figures(&in_window(&m0_samples, killed, promoted));
    let m0_post = figures(&in_window(&m0_samples, promoted + RESUME_WITHIN, f64::MAX));
    let others_all = figures(&others);
    let others_down = figures(&in_window(&others, killed, ok));
    let end_s = |x: &Sample| x.end_us() as f64 / 1e6;
    let m0_resumed = m0_samples
        .iter()
        .filter(|x| x.outcome == Outcome::Ok && end_s(x) >= promoted)
        .map(end_s)
        .reduce(f64::min);
    let m0_last_bad = m0_samples
        .iter()
        .filter(|x| x.outcome != Outcome::Ok)
        .map(end_s)
        .reduce(f64::max);
    let others_bad: Vec<&Sample> = others.iter().filter(|x| x.outcome != Outcome::Ok).collect();
    let others_bad_span = others_bad
        .iter()
        .map(|x| (x.start_us as f64 / 1e6, end_s(x)))
        .reduce(|(a, b), (c, d)| (a.min(c), b.max(d)));
    s.say(format!("all: {all}"));
    s.say(format!("before the kill: {pre}"));
    s.say(format!("m0's slots, kill to promotion: {m0_down}"));
    s.say(format!(
        "m0's slots: first reply {} after the promotion, last failure answered {} after it (limit {})",
        m0_resumed.map_or("never".into(), |r| ms(r - promoted)),
        m0_last_bad.map_or("never".into(), |r| ms(r - promoted)),
        ms(RESUME_WITHIN)
    ));
    s.say(format!(
        "m0's slots from promotion + {RESUME_WITHIN:.0} s on: {m0_post}"
    ));
    s.say(format!("m1's and m2's slots, all: {others_all}"));
    s.say(format!(
        "m1's and m2's slots, kill to cluster ok: {others_down}"
    ));
    s.say(format!(
        "m1's and m2's slots not fully answered: {} (sent {} to answered {})",
        others_bad.len(),
        others_bad_span.map_or("-".into(), |(a, _)| at(Some(a), killed)),
        others_bad_span.map_or("-".into(), |(_, b)| at(Some(b), killed)),
    ));
    s.say_worst(&report, db.command_bound());
    s.say(format!("counters: {counters}"));
    s.say(format!("child before the kill: {before}"));
    s.say(format!(
        "child after: {after}; sockets to the dead m0 {to_dead}, to the promoted r0 {to_promoted}"
    ));
    check_status(&all, &mut s.failures);
    check_worst(&all, db.command_bound(), "", &mut s.failures);
    s.check(pre.requests > 0 && pre.ok == pre.requests, || {
        format!("not every request replied before the kill: {pre}")
    });
    s.check(m0_down.fallback > 0, || {
        format!("no fallback for m0's slots while it was down: {m0_down}")
    });
    s.check(
        m0_last_bad.map_or(true, |t| t <= promoted + RESUME_WITHIN),
        || format!("m0's slots failed later than {RESUME_WITHIN} s after the promotion"),
    );
    s.check(
        m0_post.requests > 0 && m0_post.ok == m0_post.requests,
        || format!("m0's slots not all replied from promotion + {RESUME_WITHIN} s on: {m0_post}"),
    );
    s.check(others_all.fallback == 0, || {
        format!("m1's and m2's slots fell back: {others_all}")
    });
    // Error replies: CLUSTERDOWN from m1 and m2 while the cluster is down
    // (`cluster-require-full-coverage`), not outside the time the test saw
    // it down, give or take its polling.
    let busy_replies = check_cluster_counters(&mut s, &all, &counters, &live)?;
    s.say(format!(
        "TRYAGAIN / CLUSTERDOWN sent by the nodes: {busy_replies}, of which {} were the reply",
        all.error_reply
    ));
    let down_from = t.down.map_or(f64::MAX, |d| d - POLL_SLACK);
    s.check(
        others_bad.iter().all(|x| {
            x.outcome == Outcome::ErrorReply
                && x.start_us as f64 / 1e6 >= down_from
                && end_s(x) <= ok + POLL_SLACK
        }),
        || {
            format!(
                "m1's and m2's slots: failures other than error replies while the cluster was down ({} from {} to {})",
                others_bad.len(),
                at(t.down, killed),
                at(Some(ok), killed)
            )
        },
    );
    // The first discovery, then failed attempts read the map again at
    // most once a second (FAILURE_REFRESH_INTERVAL), one more the next
    // second at most.
    let discoveries = counters.get("cluster.discoveries.total");
    let failing = m0_last_bad.map_or(0.0, |t| t - killed);
    let discovery_bound = 2 + failing.ceil() as u64;
    s.say(format!(
        "discoveries {discoveries} (bound {discovery_bound} for {} of failures)",
        ms(failing)
    ));
    s.check((2..=discovery_bound).contains(&discoveries), || {
        format!(
            "{discoveries} discoveries: none after the failover, or more than {discovery_bound}"
        )
    });
    s.check(to_dead == 0, || {
        format!("the child still holds {to_dead} sockets to the dead m0")
    });
    s.check(to_promoted > 0, || {
        "no connection to the promoted r0".into()
    });
    s.check_leaks(&after, cluster_connection_bound(&db, LIVE.len()));
    s.check_lone_client("db")?;
    let result = s.finish();
    drop(nodes);
    result
}
