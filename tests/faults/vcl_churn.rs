//! Scenario 6: VCL churn while traffic runs.
use super::*;

pub(crate) fn s6_vcl_churn(cycles: usize) -> Result<(), Failed> {
    // Generous timeouts: the VCL compiles load the 2 cores, and a timeout
    // must not pass for what this scenario looks for (a connection closed
    // under a live VCL, a leak).
    let mut private = DbSpec::new("priv", Mode::Private);
    private.max_connections = 1;
    private.connection_timeout = 2000;
    private.command_timeout = 2000;
    let mut shared = DbSpec::new("shared", Mode::Shared);
    shared.max_connections = 4;
    shared.connection_timeout = 2000;
    shared.command_timeout = 2000;
    // [ext] pipelining=true: multiplexed connections go with their VCL too.
    let mut piped = DbSpec::new("piped", Mode::Pipelined);
    piped.max_connections = 2;
    piped.connection_timeout = 2000;
    piped.command_timeout = 2000;
    let dbs = [private.clone(), shared.clone(), piped.clone()];
    let mut s = Setup::start(&format!("s6-{cycles}"), &dbs)?;
    let so = support::vmod_so()?;
    let dir = s
        .varnish
        .workdir
        .parent()
        .map(Path::to_path_buf)
        .ok_or("no trial dir")?;
    let clients = 16;
    // Long enough for every cycle; stopped as soon as the churn is done.
    let load = Load::start(LoadSpec {
        port: s.varnish.port,
        clients,
        duration: Duration::from_secs(3600),
        paths: vec![
            "/priv/mix/c{c}".into(),
            "/shared/mix/c{c}".into(),
            "/piped/mix/c{c}".into(),
        ],
        deadline: Duration::from_secs(5),
    });
    load.sleep_until(1.5);
    let before = s.snapshot();
    let started = load.at();
    let mut previous = "boot".to_string();
    let mut samples: Vec<(usize, Snapshot)> = Vec::new();
    let mut churn_error = None;
    // Time spent in vcl.load, vcl.use, vcl.discard.
    let mut spent = [Duration::ZERO; 3];
    for i in 1..=cycles {
        let name = format!("c{i}");
        let path = dir.join(format!("{name}.vcl"));
        let path_text = path.display().to_string();
        let mut timed = |k: usize, args: &[&str]| {
            let t = Instant::now();
            let r = s.varnish.adm(args);
            spent[k] += t.elapsed();
            r
        };
        let step = write_public(&path, &vcl(&so, s.redis.port, &dbs, &name))
            .and_then(|()| timed(0, &["vcl.load", &name, &path_text]))
            .and_then(|_| timed(1, &["vcl.use", &name]))
            .and_then(|_| timed(2, &["vcl.discard", &previous]));
        if let Err(e) = step {
            churn_error = Some(format!("cycle {i}: {e}"));
            break;
        }
        let _ = fs::remove_file(&path);
        previous = name;
        if i % (cycles / 10).max(1) == 0 {
            samples.push((i, s.snapshot()));
        }
    }
    let churn_secs = load.at() - started;
    // The discarded VCLs go once their last request is done.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut vcls = String::new();
    while Instant::now() < deadline {
        vcls = s.varnish.adm(&["vcl.list"]).unwrap_or_default();
        if vcls.lines().filter(|l| !l.trim().is_empty()).count() <= 1 {
            break;
        }
        thread::sleep(Duration::from_millis(100));
    }
    load.sleep_until(load.at() + 1.0);
    let under_load = s.snapshot();
    load.stop.store(true, Ordering::Relaxed);
    let report = load.finish();
    thread::sleep(Duration::from_millis(500));
    let after = s.settled_snapshot();
    let all = report.all();
    let c_priv = counters(s.varnish.port, "priv")?;
    let c_shared = counters(s.varnish.port, "shared")?;
    let c_piped = counters(s.varnish.port, "piped")?;
    s.say(format!(
        "{cycles} cycles of vcl.load / vcl.use / vcl.discard in {churn_secs:.1} s ({:.2} s each), {clients} clients on /priv/mix, /shared/mix and /piped/mix (SET, GET, EVAL each)",
        churn_secs / cycles.max(1) as f64
    ));
    let per = |d: Duration| d.as_secs_f64() * 1000.0 / cycles.max(1) as f64;
    s.say(format!(
        "per cycle: vcl.load {:.0} ms, vcl.use {:.0} ms, vcl.discard {:.0} ms",
        per(spent[0]),
        per(spent[1]),
        per(spent[2])
    ));
    s.say(format!("all: {all}"));
    s.say(format!("child before the churn (under load): {before}"));
    for (i, snap) in &samples {
        s.say(format!("after cycle {i}: {snap}"));
    }
    s.say(format!("after the churn, under load: {under_load}"));
    s.say(format!("after the churn, idle: {after}"));
    s.say(format!("live VCL priv counters: {c_priv}"));
    s.say(format!("live VCL shared counters: {c_shared}"));
    s.say(format!("live VCL piped counters: {c_piped}"));
    s.say(format!(
        "vcl.list: {}",
        vcls.lines().map(str::trim).collect::<Vec<_>>().join(" | ")
    ));

    for f in report
        .samples
        .iter()
        .filter(|s| s.outcome != Outcome::Ok)
        .take(10)
    {
        s.say(format!(
            "not ok: path {} at {:.3} s, {:.1} ms, {:?}, {} command(s) without reply",
            f.path,
            f.start_us as f64 / 1e6,
            f.latency_us as f64 / 1e3,
            f.outcome,
            f.missed
        ));
    }
    if let Some(e) = churn_error {
        s.failures.push(e);
    }
    s.check(
        vcls.lines().filter(|l| !l.trim().is_empty()).count() == 1,
        || format!("discarded VCLs still listed:\n{vcls}"),
    );
    // varnishstat: the segments of the live VCL's objects, none of the
    // discarded ones.
    let live = format!("REDIS.{previous}.");
    match s.varnish.stats(&["REDIS.*"]) {
        Ok(segments) => {
            let stale: Vec<&String> = segments.keys().filter(|k| !k.starts_with(&live)).collect();
            s.say(format!(
                "varnishstat REDIS.*: {} counters, {} of discarded VCLs",
                segments.len(),
                stale.len()
            ));
            s.check(stale.is_empty(), || {
                format!("varnishstat still lists counters of discarded VCLs: {stale:?}")
            });
            let per_object = vmod_redis::stats::Counter::COUNT;
            s.check(segments.len() == dbs.len() * per_object, || {
                format!(
                    "varnishstat lists {} REDIS counters, want {} ({} objects x {per_object})",
                    segments.len(),
                    dbs.len() * per_object,
                    dbs.len()
                )
            });
        }
        Err(e) => s.failures.push(e),
    }
    check_answers(&all, &mut s.failures);
    s.check(all.fallback == 0, || {
        format!("{} fallbacks during the churn", all.fallback)
    });
    // Live need: the private object, one connection per worker that served
    // it (at most one per client in practice, bounded by the threads); the
    // shared one, its pool; the pipelined one, its multiplexed connections.
    let need = clients + (shared.max_connections + piped.max_connections) as usize;
    s.check(under_load.redis_fds <= need + 4, || {
        format!(
            "{} Redis connections under load after the churn; the live VCL needs at most about {need}",
            under_load.redis_fds
        )
    });
    s.check(under_load.redis_fds <= before.redis_fds + 4, || {
        format!(
            "Redis connections grew with the churn: {} before, {} after",
            before.redis_fds, under_load.redis_fds
        )
    });
    s.check_threads_fds(&before, &under_load, " (grew with the churn)");
    s.check_leaks(&after, need + 4);
    s.check_lone_client("priv")?;
    s.check_lone_client("shared")?;
    s.check_lone_client("piped")?;
    s.finish()
}
