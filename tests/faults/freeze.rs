//! Scenario 2: Redis SIGSTOPped for 5 s under load.
use super::*;

/// `protocol`: empty for none (no handshake), else `RESP3`: every new
/// connection opens with `HELLO 3`, which the frozen server never
/// answers (bounded by the command timeout, not spaced: it accepted).
pub(crate) fn s2_freeze(mode: Mode, retries: u32, protocol: &'static str) -> Result<(), Failed> {
    let mut db = DbSpec::new("db", mode);
    db.max_connections = if mode.shared() { 4 } else { 1 };
    db.connection_timeout = 200;
    db.command_timeout = 200;
    db.retries = retries;
    db.protocol = protocol;
    let suffix = if protocol.is_empty() {
        String::new()
    } else {
        format!("-{}", protocol.to_lowercase())
    };
    let mut s = Setup::start(
        &format!("s2-{}-r{retries}{suffix}", mode.name()),
        std::slice::from_ref(&db),
    )?;
    let bound = db.command_bound();
    // Connects time out too once the frozen server's accept queue is full;
    // after failed connects, attempts are spaced up to MAX_BACKOFF, which
    // may delay the first new connection after SIGCONT by that much.
    let recover_s = bound.as_secs_f64() + vmod_redis::server::MAX_BACKOFF.as_secs_f64();
    let (stop_at, frozen_for, tail) = (1.5, 5.0, recover_s + 1.0);
    let clients = 50;
    let load = LoadSpec {
        port: s.varnish.port,
        clients,
        duration: Duration::from_secs_f64(stop_at + frozen_for + tail),
        paths: one_command_paths("db"),
        deadline: bound + Duration::from_secs(2),
    };
    let Disruption {
        report,
        before,
        after,
        counters,
        started: stopped,
        restoring: continued,
        ..
    } = s.disrupt(load, stop_at, frozen_for, Redis::freeze, Redis::thaw)?;

    let all = report.all();
    let frozen = figures(&report.window(stopped, continued));
    let recovered = figures(&report.window(continued + recover_s, f64::MAX));
    let last_fallback_end = report.last_fallback_end();
    let first_ok_after = report.first_ok_after(continued);
    s.say(format!(
        "{clients} clients, {:.1} s; protocol {}, connection_timeout {} ms, command_timeout {} ms, retries {retries}, {}; bound per command {} ms; SIGSTOP at {stopped:.2} s, SIGCONT at {continued:.2} s",
        report.secs,
        if protocol.is_empty() { "default" } else { protocol },
        db.connection_timeout,
        db.command_timeout,
        match mode {
            Mode::Shared => format!("shared pool of {}", db.max_connections),
            Mode::Pipelined => format!("{} pipelined connections", db.max_connections),
            Mode::Private => "private".into(),
        },
        bound.as_millis()
    ));
    s.say(format!("all: {all}"));
    s.say(format!("frozen: {frozen}"));
    s.say(format!(
        "from SIGCONT + bound + reconnect spacing cap ({}) on: {recovered}",
        ms(recover_s)
    ));
    s.say(format!(
        "after SIGCONT: first reply at +{}, last fallback answered at +{}",
        first_ok_after.map_or("never".into(), ms),
        match last_fallback_end {
            Some(end) if end >= continued => ms(end - continued),
            _ => "0 ms (none after SIGCONT)".into(),
        }
    ));
    s.say(format!("counters: {counters}"));
    s.say(format!("child before: {before}"));
    s.say(format!("child after: {after}"));

    check_answers(&all, &mut s.failures);
    check_worst(&all, bound, "", &mut s.failures);
    s.check(frozen.fallback > 0, || {
        format!("no fallback while Redis was frozen: {frozen}")
    });
    s.check(recovered.fallback == 0 && recovered.ok > 0, || {
        format!("not recovered within the bound + reconnect spacing cap after SIGCONT: {recovered}")
    });
    check_counters(&all, &counters, &mut s.failures);
    s.check_leaks(&after, connection_bound(&db));
    s.check_lone_client("db")?;
    s.finish()
}
