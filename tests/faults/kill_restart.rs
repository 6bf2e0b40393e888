//! Scenario 1: Redis SIGKILLed under load, restarted 2 s later on its port.
use super::*;

pub(crate) fn s1_kill_restart(mode: Mode) -> Result<(), Failed> {
    let mut db = DbSpec::new("db", mode);
    db.connection_timeout = 200;
    db.command_timeout = 500;
    db.sickness_ttl = 1;
    let mut s = Setup::start(&format!("s1-{}", mode.name()), std::slice::from_ref(&db))?;
    let (kill_at, down_for, tail) = (1.5, 2.0, 1.5);
    let recover_within = f64::from(db.sickness_ttl) + 1.0;
    let clients = 20;
    let load = LoadSpec {
        port: s.varnish.port,
        clients,
        duration: Duration::from_secs_f64(kill_at + down_for + recover_within + tail + 1.0),
        paths: one_command_paths("db"),
        deadline: Duration::from_secs(5),
    };
    let Disruption {
        report,
        before,
        after,
        counters,
        started: killed,
        restoring: restarted,
        restored: up,
    } = s.disrupt(load, kill_at, down_for, Redis::kill9, Redis::spawn)?;

    let all = report.all();
    let pre = figures(&report.ended_before(killed));
    let outage = figures(&report.window(killed, up));
    let post = figures(&report.window(restarted + recover_within, f64::MAX));
    let first_ok_after = report.first_ok_after(restarted);
    let first_ok_after_up = report.first_ok_after(up);
    // Reconnects are spaced up to MAX_BACKOFF while Redis is down: the
    // server is tried again that long after it is back, at the latest.
    let backoff_cap = vmod_redis::server::MAX_BACKOFF.as_secs_f64();
    let recovery_bound = backoff_cap + 1.0;
    let last_fallback_end = report.last_fallback_end();
    s.say(format!(
        "{clients} clients, {:.1} s; Redis SIGKILLed at {killed:.2} s, restarted at {restarted:.2} s (answering PING at {up:.2} s), sickness_ttl {} s",
        report.secs, db.sickness_ttl
    ));
    s.say(format!("all: {all}"));
    s.say(format!("before the kill: {pre}"));
    s.say(format!("Redis down: {outage}"));
    s.say(format!("from restart + {recover_within:.0} s on: {post}"));
    s.say(format!(
        "first reply {} after the restart; last fallback answered {} after the restart (limit {})",
        first_ok_after.map_or("never".into(), ms),
        last_fallback_end.map_or("never".into(), |end| ms(end - restarted)),
        ms(recover_within)
    ));
    s.say(format!(
        "first reply {} after Redis answered PING (limit: reconnect spacing cap + 1 s = {})",
        first_ok_after_up.map_or("never".into(), ms),
        ms(recovery_bound)
    ));
    s.say(format!("counters: {counters}"));
    s.say(format!("child before the kill: {before}"));
    s.say(format!("child after: {after}"));

    check_answers(&all, &mut s.failures);
    s.check(pre.fallback == 0, || {
        format!("{} fallbacks before the kill", pre.fallback)
    });
    s.check(
        first_ok_after_up.is_some_and(|after| after <= recovery_bound),
        || {
            format!(
                "no reply within {} of Redis answering PING again",
                ms(recovery_bound)
            )
        },
    );
    // No storm: one worker at a time tries, 25 ms apart doubling to the
    // cap (7 attempts in the first 2.5 s, then one per cap), instead of
    // every worker on every request.
    let down_secs = up - killed;
    let attempts_bound = (8.0 + down_secs / backoff_cap).ceil() as u64;
    s.say(format!(
        "failed connection attempts while down {}: {} (limit {attempts_bound})",
        ms(down_secs),
        counters.get("connections.failed")
    ));
    s.check(counters.get("connections.failed") <= attempts_bound, || {
        format!(
            "{} failed connection attempts in {} down (limit {attempts_bound})",
            counters.get("connections.failed"),
            ms(down_secs)
        )
    });
    s.check(outage.requests > 0 && outage.fallback > 0, || {
        format!("no request answered while Redis was down: {outage}")
    });
    s.check(post.fallback == 0 && post.ok > 0, || {
        format!("errors did not stop within sickness_ttl + 1 s of the restart: {post}")
    });
    check_counters(&all, &counters, &mut s.failures);
    s.check(counters.get("connections.failed") > 0, || {
        "connections.failed is 0 after a refused reconnect".into()
    });
    let dropped = counters.get("connections.dropped.hung_up")
        + counters.get("connections.dropped.error")
        + counters.get("connections.dropped.sick");
    s.check(dropped > 0, || {
        "no connection counted as dropped (hung_up, error, sick)".into()
    });
    s.check(
        counters.get("connections.total") > before.redis_fds as u64,
        || "no reconnection counted in connections.total".into(),
    );
    s.check_leaks(&after, connection_bound(&db));
    s.check_lone_client("db")?;
    s.finish()
}
