//! Scenario 8: `SENTINEL FAILOVER` under a load of writes.
use super::*;

/// Writes are back on the new master this long after every Sentinel
/// names it, at the latest.
const RECOVER_WITHIN: f64 = 3.0;
/// Bound on the failover itself (Sentinel's `failover-timeout` is 2 s).
const FAILOVER_BOUND: f64 = 8.0;

pub(crate) fn s8_sentinel_failover(mode: Mode) -> Result<(), Failed> {
    let name = format!("s8-{}", mode.name());
    let db = DbSpec::new("db", mode);
    let so = support::vmod_so()?;
    let dir = support::trial_dir(&name)?;
    // A master, two replicas, three Sentinels.
    let master = Redis::start(&dir.join("m"))?;
    let replicas = start_replicas(&dir, &["r1", "r2"], "127.0.0.1", master.port, &[])?;
    let watched = Watched {
        name: MASTER,
        host: "127.0.0.1",
        port: master.port,
        replicas: 2,
    };
    let sentinels = start_sentinels(&dir, &[watched], &[])?;
    let ports: Vec<u16> = std::iter::once(master.port)
        .chain(replicas.iter().map(|r| r.port))
        .collect();

    // The generated VCL, with the Sentinels before the database, every
    // server `type = auto`; `execute()` is `execute(master = true)`.
    let locations = sentinels.locations();
    let base = vcl(&so, master.port, std::slice::from_ref(&db), "s8 boot");
    let new_db = format!(
        "    new db = redis.db(location = \"127.0.0.1:{}\", type = master,",
        master.port
    );
    let add = replicas
        .iter()
        .map(|r| format!("    db.add_server(\"127.0.0.1:{}\", auto);\n", r.port))
        .collect::<String>();
    if !base.contains(&new_db) || !base.contains("}\n\nsub vcl_recv") {
        return Err("s8: the generated VCL changed shape".into());
    }
    let text = base
        .replacen(
            &new_db,
            &format!(
                "    redis.sentinels(locations = \"{locations}\");\n{}",
                new_db.replace("type = master", "type = auto")
            ),
            1,
        )
        .replacen("}\n\nsub vcl_recv", &format!("{add}}}\n\nsub vcl_recv"), 1);
    let mut s = Setup::with_vcl(&name, &dir, master, &text, &ports)?;

    let clients = 20;
    let failover_at = 2.0;
    let load = Load::start(LoadSpec {
        port: s.varnish.port,
        clients,
        // Stopped 2 s after the recovery window (below): a slow failover
        // on a busy machine still leaves a window of load after it.
        duration: Duration::from_secs(30),
        paths: vec!["/db/set/c{c}".into(), "/db/eval/c{c}".into()],
        deadline: Duration::from_secs(5),
    });
    load.sleep_until(failover_at - 0.3);
    let before = snapshot_all(&s.varnish, &ports);
    load.sleep_until(failover_at);
    let asked = load.at();
    let reply = redis_cmd(
        sentinels.ports()[0],
        None,
        &["SENTINEL", "FAILOVER", MASTER],
    );
    let old_port = s.redis.port;
    let mut switched = None;
    let mut new_port = None;
    while load.at() < asked + FAILOVER_BOUND {
        if let Some(p) = sentinels.master_port().filter(|&p| p != old_port) {
            switched = Some(load.at());
            new_port = Some(p);
            break;
        }
        thread::sleep(Duration::from_millis(20));
    }
    if let Some(t) = switched {
        load.sleep_until(t + RECOVER_WITHIN + 2.0);
    }
    load.stop.store(true, Ordering::Relaxed);
    let report = load.finish();
    let reply = reply.map_err(|e| format!("SENTINEL FAILOVER: {e}"))?;
    s.say(format!(
        "{clients} clients, {:.1} s of SET / EVAL with execute(master = true); SENTINEL FAILOVER at {asked:.2} s ({}), every Sentinel names {} at {}",
        report.secs,
        reply.trim(),
        new_port.map_or("no new master".into(), |p| format!("127.0.0.1:{p}")),
        switched.map_or("never".into(), |t| format!("{t:.2} s (+{})", ms(t - asked))),
    ));
    let Some(switched) = switched else {
        s.check(false, || {
            format!("no new master named by every Sentinel within {FAILOVER_BOUND} s")
        });
        return s.finish();
    };
    thread::sleep(Duration::from_millis(300));
    let after = settled_all(&s.varnish, &ports);
    let counters = counters(s.varnish.port, "db")?;

    let all = report.all();
    let pre = figures(&report.ended_before(asked));
    let switch = figures(&report.window(asked, switched + RECOVER_WITHIN));
    let post = figures(&report.window(switched + RECOVER_WITHIN, f64::MAX));
    let last_second = figures(&report.window(report.secs - 1.0, f64::MAX));
    let last_bad_end = report
        .samples
        .iter()
        .filter(|x| x.outcome != Outcome::Ok)
        .map(|x| x.end_us() as f64 / 1e6)
        .reduce(f64::max);
    s.say(format!("all: {all}"));
    s.say(format!("before the failover: {pre}"));
    s.say(format!(
        "from the failover to the switch + {RECOVER_WITHIN:.0} s: {switch}"
    ));
    s.say(format!("after: {post}"));
    s.say(format!("last second: {last_second}"));
    s.say(format!(
        "requests failed during the switch: {} fallbacks, {} error replies; last one answered {} after SENTINEL FAILOVER, {} after the switch (limit {})",
        switch.fallback,
        switch.error_reply,
        last_bad_end.map_or("never".into(), |t| ms(t - asked)),
        last_bad_end.map_or("never".into(), |t| ms(t - switched)),
        ms(RECOVER_WITHIN)
    ));
    s.say_worst(&report, db.command_bound());
    s.say(format!("counters: {counters}"));
    s.say(format!("child before the failover: {before}"));
    s.say(format!("child after: {after}"));

    check_status(&all, &mut s.failures);
    check_worst(&all, db.command_bound(), "", &mut s.failures);
    s.check(pre.requests > 0 && pre.ok == pre.requests, || {
        format!("not every write replied before the failover: {pre}")
    });
    s.check(
        last_bad_end.map_or(true, |t| t <= switched + RECOVER_WITHIN),
        || format!("writes failed later than {RECOVER_WITHIN} s after the switch"),
    );
    s.check(post.requests > 0 && post.ok == post.requests, || {
        format!("not every write replied from switch + {RECOVER_WITHIN} s on: {post}")
    });
    s.check(
        last_second.requests > 0 && last_second.ok == last_second.requests,
        || format!("not every write replied in the last second: {last_second}"),
    );
    check_counters(&all, &counters, &mut s.failures);
    // The writes moved: connections were opened to the new master.
    s.check(
        counters.get("connections.total") > before.redis_fds as u64,
        || {
            format!(
                "connections.total {}: no connection opened to the new master",
                counters.get("connections.total")
            )
        },
    );
    s.check_leaks(&after, connection_bound(&db) * ports.len());
    s.check_lone_client("db")?;
    // The lone client's write is on the master the Sentinels name now.
    if let Some(p) = new_port {
        let got = redis_cmd(p, None, &["GET", "fault:lone"]).unwrap_or_default();
        s.check(got.contains("/db/mix/lone"), || {
            format!("the new master 127.0.0.1:{p} does not hold the lone client's write: {got:?}")
        });
    }
    // varnishd stops in finish(), before the Sentinels and the replicas:
    // the error log is not about the teardown.
    let result = s.finish();
    drop(sentinels);
    drop(replicas);
    result
}
