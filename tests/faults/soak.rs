//! Scenario 7: soak.
use super::*;

pub(crate) fn s7_soak(mode: Mode, duration: Duration) -> Result<(), Failed> {
    let mut db = DbSpec::new("db", mode);
    db.connection_timeout = 1000;
    db.command_timeout = 1000;
    let mut s = Setup::start(&format!("s7-{}", mode.name()), std::slice::from_ref(&db))?;
    let clients = 16;
    let secs = duration.as_secs_f64();
    let warmup = (secs / 5.0).min(60.0);
    let every = (secs / 60.0).clamp(1.0, 10.0);
    let load = Load::start(LoadSpec {
        port: s.varnish.port,
        clients,
        duration,
        paths: vec!["/db/mix/c{c}".into()],
        deadline: Duration::from_secs(5),
    });
    let mut samples: Vec<(f64, Snapshot, u64)> = Vec::new();
    let mut t = every;
    while t < secs - 0.5 {
        load.sleep_until(t);
        let threads = s.varnish.stat("MAIN.threads").unwrap_or(0);
        samples.push((load.at(), s.snapshot(), threads));
        t += every;
    }
    let report = load.finish();
    thread::sleep(Duration::from_millis(500));
    let after = s.settled_snapshot();
    let counters = counters(s.varnish.port, "db")?;
    let all = report.all();
    let steady: Vec<&(f64, Snapshot, u64)> =
        samples.iter().filter(|(at, _, _)| *at >= warmup).collect();
    s.say(format!(
        "{clients} clients, {:.0} s of /db/mix (SET, GET, EVAL per request), {} mode; warm-up {warmup:.0} s",
        report.secs,
        mode.name()
    ));
    s.say(format!(
        "all: {all}; {:.0} requests/s",
        all.requests as f64 / report.secs
    ));
    s.say(format!("counters: {counters}"));
    for (at, snap, _) in &samples {
        s.say(format!("t={at:>5.0} s: {snap}"));
    }
    s.say(format!("idle after: {after}"));
    check_answers(&all, &mut s.failures);
    s.check(all.fallback == 0, || {
        format!("{} fallbacks during the soak", all.fallback)
    });
    if steady.len() >= 2 {
        // `from`: the samples from that one on; growth of the largest over
        // the first of them.
        let flat = |name: &str, from: usize, value: fn(&Snapshot) -> f64| -> (String, bool) {
            let window = &steady[from..];
            let base = value(&window[0].1);
            let values = window.iter().map(|(_, snap, _)| value(snap));
            let max = values.clone().fold(base, f64::max);
            let min = values.fold(base, f64::min);
            let growth = (max - base) / base.max(1.0) * 100.0;
            (
                format!(
                    "{name} from t={:.0} s: first {base:.0}, min {min:.0}, max {max:.0} (+{growth:.1} %)",
                    window[0].0
                ),
                growth <= 5.0,
            )
        };
        // VmRSS and fds: flat after the warm-up (the criterion).
        // The heap alone (RssAnon, a smaller base) may take a few more
        // allocator extents early on (varnishd runs on jemalloc): it must be
        // flat over the second half, where a leak would keep it growing.
        let half = steady.len() / 2;
        for (line, ok) in [
            flat("rss kB", 0, |s| s.rss_kb as f64),
            flat("fds", 0, |s| s.fds as f64),
            flat("rss anon kB", half, |s| s.anon_kb as f64),
        ] {
            s.say(&line);
            s.check(ok, || format!("not flat within 5 %: {line}"));
        }
        let anon = flat("rss anon kB", 0, |s| s.anon_kb as f64).0;
        s.say(format!("(reported) {anon}"));
    } else {
        s.failures
            .push("fewer than two samples after the warm-up".into());
    }
    let max_redis = samples
        .iter()
        .map(|(_, snap, _)| snap.redis_fds)
        .max()
        .unwrap_or(0);
    let max_clients = samples
        .iter()
        .filter_map(|(_, snap, _)| snap.redis_clients)
        .max()
        .unwrap_or(0);
    let bound = match mode {
        Mode::Shared | Mode::Pipelined => connection_bound(&db) as u64,
        Mode::Private => {
            samples.iter().map(|(_, _, t)| *t).min().unwrap_or(0) * u64::from(db.max_connections)
        }
    };
    s.say(format!(
        "Redis connections: at most {max_redis} held by the child, {max_clients} seen by Redis; bound {bound} ({})",
        match mode {
            Mode::Shared => "max_connections",
            Mode::Pipelined => "2 x max_connections",
            Mode::Private => "worker threads x max_connections",
        }
    ));
    s.check(max_redis as u64 <= bound && max_clients <= bound, || {
        format!("Redis connections over the bound {bound}: child {max_redis}, Redis {max_clients}")
    });
    s.check_leaks(&after, connection_bound(&db));
    s.check_lone_client("db")?;
    s.finish()
}
