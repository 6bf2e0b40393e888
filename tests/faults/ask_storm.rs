//! Scenario 14: an `ASK` storm to new addresses. A fake cluster node (a
//! real server will not redirect to 200 distinct addresses) owns every
//! slot and answers each `GET` with `ASK <slot> 127.0.0.1:<port>`, a new
//! port each time, each one a further fake node that answers as an empty
//! Redis does (tracking included). 200 `GET`s go through varnishd with
//! `type = cluster` and `near_cache` on: the servers the database holds,
//! the child's threads and fds stay within the bound on learnt servers.
use super::*;

/// Requests, each redirected to a new address.
const REQUESTS: usize = 200;
/// Between two requests: the storm lasts about 4 s, several discovery
/// intervals (1 s).
const PACE: Duration = Duration::from_millis(20);
/// `MAX_LEARNT` of src/database/discovery.rs: the servers learnt from
/// redirections kept besides the map's nodes.
const LEARNT_BOUND: usize = 16;

pub(crate) fn s14_ask_storm(mode: Mode) -> Result<(), Failed> {
    let name = format!("s14-ask-storm-{}", mode.name());
    let dir = support::trial_dir(&name)?;
    let fakes = FakeNodes::start(REQUESTS, Others::AskTargets)?;
    let mut db = DbSpec::new("db", mode);
    db.cluster = true;
    db.near_cache = 1_048_576;
    let so = support::vmod_so()?;
    // The trial's Redis is not used by the VCL: the seed is the fake.
    let redis = Redis::start(&dir)?;
    let text = vcl(&so, fakes.seed_port, std::slice::from_ref(&db), "boot");
    let redis_port = redis.port;
    let mut s = Setup::with_vcl(&name, &dir, redis, &text, &[redis_port])?;
    // The seed's tracking thread up, the pool warm.
    thread::sleep(Duration::from_secs(1));
    let servers_before = server_count(s.varnish.port)?;
    let counters_before = counters(s.varnish.port, "db")?;
    let before = s.snapshot();
    let connects_before = fakes.connects();
    let mut peak = before;
    let mut conn =
        connect(s.varnish.port, Duration::from_secs(10)).map_err(|e| format!("connect: {e}"))?;
    let started = Instant::now();
    let mut not_answered = Vec::new();
    for i in 0..REQUESTS {
        let resp = request(&mut conn, &format!("/db/get/k{i}"))
            .map_err(|e| format!("request {i}: {e}"))?;
        let r = resp.headers.get("x-r").cloned().unwrap_or_default();
        if resp.status != 200 || r != "r1" {
            not_answered.push(format!("{i}: {} {r}", resp.status));
        }
        if i % 10 == 9 {
            let now = s.snapshot();
            peak.threads = peak.threads.max(now.threads);
            peak.fds = peak.fds.max(now.fds);
        }
        thread::sleep(PACE);
    }
    let storm_secs = started.elapsed().as_secs_f64();
    let storm_connects = fakes.connects() - connects_before;
    // The tracking threads follow the servers within a supervisor round.
    thread::sleep(Duration::from_secs(1));
    let after = s.snapshot();
    let servers_after = server_count(s.varnish.port)?;
    let counters_after = counters(s.varnish.port, "db")?;
    let resting = fakes.connects();
    thread::sleep(Duration::from_secs(2));
    let resting_connects = fakes.connects() - resting;
    let delta = |name: &str| counters_after.get(name) - counters_before.get(name);
    let discoveries = delta("cluster.discoveries.total");
    s.say(format!(
        "{REQUESTS} GETs, each redirected by ASK to a new address, in {storm_secs:.1} s"
    ));
    s.say(format!(
        "servers (server_list): {servers_before} before, {servers_after} after (bound: the map's + {LEARNT_BOUND})"
    ));
    s.say_child(&before, &peak, "during the storm", &after);
    s.say(format!(
        "connects to the fake nodes: {storm_connects} during the storm ({:.0}/s), {:.1}/s at rest after it",
        storm_connects as f64 / storm_secs,
        resting_connects as f64 / 2.0
    ));
    s.say(format!(
        "counters during the storm: cluster.replies.ask +{}, cluster.discoveries.total +{discoveries}, commands.total +{}",
        delta("cluster.replies.ask"),
        delta("commands.total")
    ));
    s.check(not_answered.is_empty(), || {
        format!(
            "{} requests not answered r1: {:?}",
            not_answered.len(),
            &not_answered[..not_answered.len().min(10)]
        )
    });
    s.check(servers_before == 1, || {
        format!("{servers_before} servers before the storm, want the seed alone")
    });
    s.check(servers_after <= servers_before + LEARNT_BOUND, || {
        format!("{servers_after} servers after the storm, bound {servers_before} + {LEARNT_BOUND}")
    });
    // One tracking thread per learnt server, a few more while the
    // supervisor replaces them.
    let bound = before.threads + LEARNT_BOUND as u64 + 2;
    s.check(after.threads <= bound, || {
        format!(
            "child threads: {} before, {} after the storm (bound {bound})",
            before.threads, after.threads
        )
    });
    let peak_bound = before.threads + 2 * LEARNT_BOUND as u64 + 4;
    s.check(peak.threads <= peak_bound, || {
        format!(
            "child threads peaked at {} during the storm ({} before, bound {peak_bound})",
            peak.threads, before.threads
        )
    });
    // Per learnt server: a tracking connection and the command's.
    let fd_bound = before.fds + 2 * LEARNT_BOUND + 4;
    s.check(after.fds <= fd_bound, || {
        format!(
            "child fds: {} before, {} after the storm (bound {fd_bound})",
            before.fds, after.fds
        )
    });
    s.check(delta("cluster.replies.ask") == REQUESTS as u64, || {
        format!(
            "cluster.replies.ask +{}, want {REQUESTS}",
            delta("cluster.replies.ask")
        )
    });
    // An ASK to a node the map does not name asks for the map, at most
    // once per discovery interval (1 s).
    let most = storm_secs.ceil() as u64 + 1;
    s.check((2..=most).contains(&discoveries), || {
        format!("{discoveries} discoveries during the {storm_secs:.1} s storm, want 2 to {most}")
    });
    // The fake nodes go after the error log is read: their closing is
    // no part of the storm.
    let result = s.finish();
    drop(fakes);
    result
}

/// The servers the database `db` holds (`server_list` of its extended
/// stats).
pub(crate) fn server_count(port: u16) -> Res<usize> {
    let resp = http_get(port, "/db/server-list").map_err(|e| format!("server-list: {e}"))?;
    if resp.status != 200 {
        return Err(format!("server-list: status {}", resp.status));
    }
    Ok(resp.body.matches("\"location\":").count())
}
