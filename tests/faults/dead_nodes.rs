//! Scenario 15: a cluster map of 300 dead masters. A fake seed (the fake
//! nodes of `fake_nodes.rs`) owns every slot at first; then its map gives
//! it a few slots and the rest to 300 masters, each a listener that
//! accepts and closes at once, and a `MOVED` makes varnishd read that
//! map. `type = cluster`, `near_cache` on, a password (so `AUTH` would go
//! on every tracking connect). For 12 s a client reads keys of the seed
//! and of a few dead masters through varnishd: the child's threads and
//! fds stay within a small margin of before (no thread per dead node),
//! the connects a second to the dead nodes stay bounded (the tracking
//! connections' back-off), the seed's keys are answered and no request
//! takes longer than the timeouts.
use super::*;

/// Dead masters in the map.
const DEAD: usize = 300;
/// Length of the run once the map names them; `FAULTS_DEAD_NODES_SECS`
/// makes it longer (or shorter), to see the connects a second settle.
const RUN: Duration = Duration::from_secs(12);
/// The connects a second are also said over windows this long.
const WINDOW: Duration = Duration::from_secs(5);
/// The end of the run over which connects a second are bounded: the
/// back-off (200 ms doubling to 10 s, with jitter) has grown by then.
const STEADY: Duration = Duration::from_secs(4);
/// Connects a second to all the dead nodes over [`STEADY`]: one per node
/// per 10 s is 30/s once every back-off is at its cap, one per node per
/// 2 s would still pass; one per node per 200 ms (1,500/s) fails.
const STEADY_BOUND: f64 = 150.0;
/// A run of at least this long (`FAULTS_DEAD_NODES_SECS`) also checks
/// the connects a second over its last [`SETTLED`], by then made of
/// three bounded streams: the tracking connections (one per node per
/// 10 s, jitter 0.75-1.25: at most [`TRACKING_BOUND`]), the commands'
/// connects to the [`DEAD_KEYS`] masters read (each at most one per
/// 1 s, the command connections' longest spacing) and the discoveries
/// their failures ask for (at most one a second, each asking up to 8
/// nodes, the seed first and then dead masters).
const LONG_RUN: Duration = Duration::from_secs(45);
/// See [`LONG_RUN`].
const SETTLED: Duration = Duration::from_secs(20);
/// Tracking connects a second to the dead nodes once every back-off is
/// at its cap: [`DEAD`] per 10 s x 0.75 (the shortest jitter).
const TRACKING_BOUND: f64 = DEAD as f64 / 7.5;
/// All connects a second to the dead nodes then: the tracking's, one a
/// second to each dead master read, 8 a second of discoveries.
const SETTLED_BOUND: f64 = TRACKING_BOUND + DEAD_KEYS as f64 + 8.0;
/// Threads of the child beyond those before the map grew.
const THREAD_MARGIN: u64 = 10;
/// Fds of the child beyond those before the map grew.
const FD_MARGIN: usize = 20;
/// Keys of dead masters read, each on a different one.
const DEAD_KEYS: usize = 8;
/// Keys of the seed read.
const SEED_KEYS: usize = 4;
/// Between two reads.
const PACE: Duration = Duration::from_millis(50);

/// Counted at one time since the start: connects to the dead nodes that
/// began with `HELLO 3` (the tracking connections'), then the database's
/// `connections.total`, `connections.failed`, `cluster.discoveries.total`.
type Counted = (u64, u64, u64, u64);

/// One read of the client.
struct Read {
    key: String,
    /// Of a key the seed owns.
    seed: bool,
    status: u16,
    /// `x-r`.
    outcome: String,
    took: Duration,
}

pub(crate) fn s15_dead_nodes(mode: Mode) -> Result<(), Failed> {
    let name = format!("s15-dead-nodes-{}", mode.name());
    let dir = support::trial_dir(&name)?;
    let fakes = FakeNodes::start(DEAD, Others::DeadMasters)?;
    let mut db = DbSpec::new("db", mode);
    db.cluster = true;
    db.near_cache = 1_048_576;
    db.password = "x";
    let so = support::vmod_so()?;
    // The trial's Redis is not used by the VCL: the seed is the fake.
    let redis = Redis::start(&dir)?;
    let text = vcl(&so, fakes.seed_port, std::slice::from_ref(&db), "boot");
    let redis_port = redis.port;
    let mut s = Setup::with_vcl(&name, &dir, redis, &text, &[redis_port])?;
    let keys = keys(&fakes);
    // The seed's tracking started, the pool warm.
    thread::sleep(Duration::from_secs(1));
    let servers_before = server_count(s.varnish.port)?;
    let before = s.snapshot();
    fakes.grow();
    let run = Duration::from_secs(env_u64("FAULTS_DEAD_NODES_SECS", RUN.as_secs()));
    let started = Instant::now();
    let connects_before = fakes.other_connects();
    let auths_before = fakes.auths();
    let port = s.varnish.port;
    let client = thread::spawn(move || read_for(port, &keys, started + run));
    let mut peak = before;
    // (since the start, connects to the dead nodes so far)
    let mut samples = vec![(Duration::ZERO, connects_before)];
    // (since the start, connects beginning with HELLO 3 (tracking), the
    // database's connections.total, .failed and cluster.discoveries.total)
    let counted = |s: &Setup| -> Counted {
        let c = counters(s.varnish.port, "db").ok();
        let get = |name| c.as_ref().map_or(0, |c| c.get(name));
        (
            fakes.resp3_connects(),
            get("connections.total"),
            get("connections.failed"),
            get("cluster.discoveries.total"),
        )
    };
    let mut series = vec![(Duration::ZERO, counted(&s))];
    while started.elapsed() < run {
        thread::sleep(Duration::from_millis(250));
        let now = s.snapshot();
        peak.threads = peak.threads.max(now.threads);
        peak.fds = peak.fds.max(now.fds);
        samples.push((started.elapsed(), fakes.other_connects()));
        let next = WINDOW * series.len() as u32;
        if started.elapsed() >= next {
            series.push((started.elapsed(), counted(&s)));
        }
    }
    // The last window, shorter when the run is not a multiple of it.
    if series
        .last()
        .is_some_and(|(when, _)| *when + WINDOW / 5 < run)
    {
        series.push((started.elapsed(), counted(&s)));
    }
    let reads = client
        .join()
        .map_err(|_| "the client panicked".to_string())??;
    let after = s.snapshot();
    let servers_after = server_count(s.varnish.port)?;
    let connects = fakes.other_connects() - connects_before;
    let auths = fakes.auths() - auths_before;
    let rate = |from: Duration, to: Duration| {
        let at = |t: Duration| {
            samples
                .iter()
                .rev()
                .find(|(when, _)| *when <= t)
                .copied()
                .unwrap_or(samples[0])
        };
        let ((t0, c0), (t1, c1)) = (at(from), at(to));
        (c1 - c0) as f64 / (t1 - t0).as_secs_f64().max(0.001)
    };
    let end = samples.last().map_or(run, |(when, _)| *when);
    let whole = rate(Duration::ZERO, end);
    let steady = rate(end.saturating_sub(STEADY), end);
    let per_second: Vec<String> = (0..end.as_secs())
        .map(|t| {
            format!(
                "{:.0}",
                rate(Duration::from_secs(t), Duration::from_secs(t + 1))
            )
        })
        .collect();
    let bound = db.command_bound();
    let slow: Vec<&Read> = reads.iter().filter(|read| read.took > bound).collect();
    let seed_not_answered: Vec<&Read> = reads
        .iter()
        .filter(|read| read.seed && (read.status != 200 || read.outcome != "r1"))
        .collect();
    let dead_outcomes = reads.iter().filter(|read| !read.seed).fold(
        HashMap::<&str, usize>::new(),
        |mut seen, read| {
            *seen.entry(read.outcome.as_str()).or_default() += 1;
            seen
        },
    );
    let worst = reads.iter().map(|read| read.took).max().unwrap_or_default();
    s.say(format!(
        "{DEAD} dead masters in the map (each accepts and closes), password set, near_cache on, {:.1} s",
        end.as_secs_f64()
    ));
    s.say(format!(
        "servers (server_list): {servers_before} before, {servers_after} after the map grew"
    ));
    s.say_child(&before, &peak, "over the run", &after);
    s.say(format!(
        "connects to the dead nodes: {connects} ({whole:.0}/s over the run, {steady:.0}/s over the last {} s); per second: {}",
        STEADY.as_secs(),
        per_second.join(" ")
    ));
    let windows: Vec<String> = series
        .windows(2)
        .map(|pair| {
            let ((t0, (r0, tot0, f0, d0)), (t1, (r1, tot1, f1, d1))) = (pair[0], pair[1]);
            let per_second = |n: u64| n as f64 / (t1 - t0).as_secs_f64().max(0.001);
            format!(
                "{:.0}-{:.0} s: {:.0}/s ({:.0}/s HELLO 3; db connections.total {:.0}/s, .failed {:.0}/s; discoveries {:.1}/s)",
                t0.as_secs_f64(),
                t1.as_secs_f64(),
                rate(t0, t1),
                per_second(r1 - r0),
                per_second(tot1 - tot0),
                per_second(f1 - f0),
                per_second(d1 - d0),
            )
        })
        .collect();
    s.say(format!(
        "connects to the dead nodes by {} s window: {}",
        WINDOW.as_secs(),
        windows.join("; ")
    ));
    s.say(format!(
        "AUTH read by the dead nodes: {auths} on {connects} connects"
    ));
    s.say(format!(
        "{} reads (seed's keys and {DEAD_KEYS} dead masters' keys), worst {worst:?}; dead masters' keys answered {dead_outcomes:?}",
        reads.len()
    ));
    s.check(servers_before == 1, || {
        format!("{servers_before} servers before the map grew, want the seed alone")
    });
    s.check(servers_after == DEAD + 1, || {
        format!(
            "{servers_after} servers after the map grew, want {}",
            DEAD + 1
        )
    });
    let thread_bound = before.threads + THREAD_MARGIN;
    s.check(peak.threads <= thread_bound, || {
        format!(
            "child threads: {} before, peak {} (bound {thread_bound}: no thread per dead node)",
            before.threads, peak.threads
        )
    });
    s.check(after.threads <= thread_bound, || {
        format!(
            "child threads: {} before, {} after (bound {thread_bound})",
            before.threads, after.threads
        )
    });
    let fd_bound = before.fds + FD_MARGIN;
    s.check(peak.fds <= fd_bound && after.fds <= fd_bound, || {
        format!(
            "child fds: {} before, peak {}, {} after (bound {fd_bound})",
            before.fds, peak.fds, after.fds
        )
    });
    s.check(steady < STEADY_BOUND, || {
        format!(
            "{steady:.0} connects/s to the dead nodes over the last {} s, bound {STEADY_BOUND}",
            STEADY.as_secs()
        )
    });
    if run >= LONG_RUN {
        let from = end.saturating_sub(SETTLED);
        let settled = rate(from, end);
        // The series is sampled every WINDOW: its samples from `from` on.
        let within: Vec<&(Duration, Counted)> =
            series.iter().filter(|(when, _)| *when >= from).collect();
        let tracking = match (within.first(), within.last()) {
            (Some((t0, (r0, ..))), Some((t1, (r1, ..)))) if t1 > t0 => {
                (r1 - r0) as f64 / (*t1 - *t0).as_secs_f64()
            }
            _ => 0.0,
        };
        s.say(format!(
            "over the last {} s: {settled:.0} connects/s (bound {SETTLED_BOUND:.0}), {tracking:.0}/s of them HELLO 3 (bound {TRACKING_BOUND:.0})",
            SETTLED.as_secs()
        ));
        s.check(settled <= SETTLED_BOUND && tracking <= TRACKING_BOUND, || {
            format!(
                "over the last {} s: {settled:.0} connects/s to the dead nodes (bound {SETTLED_BOUND:.0}), {tracking:.0}/s tracking (bound {TRACKING_BOUND:.0})",
                SETTLED.as_secs()
            )
        });
    }
    s.check(slow.is_empty(), || {
        let some: Vec<String> = slow
            .iter()
            .take(10)
            .map(|read| format!("{} {:?}", read.key, read.took))
            .collect();
        format!("{} reads took longer than {bound:?}: {some:?}", slow.len())
    });
    s.check(seed_not_answered.is_empty(), || {
        let some: Vec<String> = seed_not_answered
            .iter()
            .take(10)
            .map(|read| format!("{} {} {}", read.key, read.status, read.outcome))
            .collect();
        format!(
            "{} reads of the seed's keys not answered r1: {some:?}",
            seed_not_answered.len()
        )
    });
    // The fake nodes go after the error log is read.
    let result = s.finish();
    drop(fakes);
    result
}

/// The keys read (without the VCL's `fault:` prefix), with whether the
/// seed owns them: [`SEED_KEYS`] of the seed, [`DEAD_KEYS`] each of a
/// different dead master.
fn keys(fakes: &FakeNodes) -> Vec<(String, bool)> {
    let mut keys = Vec::new();
    let mut owners = Vec::new();
    let (mut seed, mut dead) = (0, 0);
    for i in 0.. {
        if seed == SEED_KEYS && dead == DEAD_KEYS {
            break;
        }
        let key = format!("k{i}");
        let owner = fakes.owner(crc16(format!("fault:{key}").as_bytes()) % 16384);
        if owner == fakes.seed_port && seed < SEED_KEYS {
            seed += 1;
            keys.push((key, true));
        } else if owner != fakes.seed_port && dead < DEAD_KEYS && !owners.contains(&owner) {
            dead += 1;
            owners.push(owner);
            keys.push((key, false));
        }
    }
    keys
}

/// Reads `keys` in turn through varnishd on `port`, one every [`PACE`],
/// until `until`.
fn read_for(port: u16, keys: &[(String, bool)], until: Instant) -> Res<Vec<Read>> {
    let mut conn = connect(port, Duration::from_secs(10)).map_err(|e| format!("connect: {e}"))?;
    let mut reads = Vec::new();
    for (key, seed) in keys.iter().cycle() {
        if Instant::now() >= until {
            break;
        }
        let sent = Instant::now();
        let resp =
            request(&mut conn, &format!("/db/get/{key}")).map_err(|e| format!("GET {key}: {e}"))?;
        reads.push(Read {
            key: key.clone(),
            seed: *seed,
            status: resp.status,
            outcome: resp.headers.get("x-r").cloned().unwrap_or_default(),
            took: sent.elapsed(),
        });
        thread::sleep(PACE);
    }
    Ok(reads)
}
