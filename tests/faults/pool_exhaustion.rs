//! Scenario 3: pool exhaustion, 200 clients.
use super::*;

pub(crate) fn s3_pool_exhaustion(mode: Mode) -> Result<(), Failed> {
    let mut db = DbSpec::new("db", mode);
    db.max_connections = 1;
    db.connection_timeout = 300;
    db.command_timeout = 300;
    let mut s = Setup::start(&format!("s3-{}", mode.name()), std::slice::from_ref(&db))?;
    let bound = db.command_bound();
    // 200 clients on 2 cores: a worker whose wait ended may run that much
    // later (its wait ends on time: 600 ms; seen worst 668 ms in the
    // Debian 13 root, 609 ms on the host).
    let scheduling = Duration::from_millis(100);
    let clients = 200;
    let secs = 5.0;
    s.say(format!(
        "{clients} clients, {} mode, max_connections 1, connection_timeout {} ms, command_timeout {} ms; bound per command {} ms",
        mode.name(),
        db.connection_timeout,
        db.command_timeout,
        bound.as_millis()
    ));
    let mut samples = Vec::new();
    // Phase 1: fast commands. Phase 2: one command in four holds Redis
    // for 10 ms (a script that waits, tests/faults/vcl.rs; Redis is single-threaded: it serves at most ~100 of
    // them a second), so that waits run into the timeouts.
    for (phase, paths) in [
        ("fast commands", one_command_paths("db")),
        (
            "1 in 4 holds Redis 10 ms",
            ["set", "get", "eval", "slow"]
                .iter()
                .map(|op| format!("/db/{op}/c{{c}}"))
                .collect(),
        ),
    ] {
        let blocked_before = counters(s.varnish.port, "db")?.get("workers.blocked");
        let load = Load::start(LoadSpec {
            port: s.varnish.port,
            clients,
            duration: Duration::from_secs_f64(secs),
            paths,
            deadline: bound + Duration::from_secs(2),
        });
        load.sleep_until(secs - 1.0);
        let under_load = s.snapshot();
        let report = load.finish();
        let blocked = counters(s.varnish.port, "db")?.get("workers.blocked") - blocked_before;
        let all = report.all();
        // Throughput per 500 ms slice (the first one is the ramp-up).
        let slices: Vec<usize> = (1..(secs * 2.0) as usize)
            .map(|i| figures(&report.window(i as f64 * 0.5, (i + 1) as f64 * 0.5)).ok)
            .collect();
        let fallbacks: Vec<f64> = report
            .samples
            .iter()
            .filter(|s| s.outcome == Outcome::Fallback)
            .map(|s| s.latency_us as f64 / 1000.0)
            .collect();
        s.say(format!("{phase}: {all}"));
        s.say(format!(
            "{phase}: {:.0} replies/s; per 500 ms slice: {slices:?}; workers.blocked +{blocked}",
            all.ok as f64 / report.secs
        ));
        if !fallbacks.is_empty() {
            s.say(format!(
                "{phase}: {} requests timed out, after {:.0} to {:.0} ms",
                fallbacks.len(),
                fallbacks.iter().copied().fold(f64::MAX, f64::min),
                fallbacks.iter().copied().fold(0.0, f64::max)
            ));
        }
        s.say(format!("{phase}: child under load: {under_load}"));
        check_answers(&all, &mut s.failures);
        check_worst(
            &all,
            bound + scheduling,
            &format!("{phase}: "),
            &mut s.failures,
        );
        // Private and pipelined modes have no admission control: with slow
        // commands, 200 workers each queue one in Redis (on their own
        // connections, or on the pipelined one), Redis still runs the ones
        // whose worker gave up, and goodput may collapse (reported, not
        // checked: every request is still bounded).
        let slow = !samples.is_empty();
        if mode == Mode::Shared || !slow {
            s.check(slices.iter().all(|&n| n > 0), || {
                format!("{phase}: a 500 ms slice without any reply: {slices:?}")
            });
        }
        match mode {
            Mode::Shared => {
                s.check(blocked > 0, || {
                    format!(
                        "{phase}: workers.blocked did not grow with 200 clients on one connection"
                    )
                });
                s.check(under_load.redis_fds <= 1, || {
                    format!(
                        "{phase}: {} Redis connections under load, pool of 1",
                        under_load.redis_fds
                    )
                });
            }
            Mode::Pipelined => {
                s.check(blocked == 0, || {
                    format!("{phase}: pipelining counted {blocked} blocked workers")
                });
                s.check(under_load.redis_fds <= 1, || {
                    format!(
                        "{phase}: {} Redis connections under load, one pipelined connection",
                        under_load.redis_fds
                    )
                });
            }
            Mode::Private => {
                s.check(blocked == 0, || {
                    format!("{phase}: private mode counted {blocked} blocked workers")
                });
            }
        }
        samples.extend(report.samples);
    }
    thread::sleep(Duration::from_millis(300));
    let after = s.settled_snapshot();
    let counters = counters(s.varnish.port, "db")?;
    s.say(format!("counters: {counters}"));
    s.say(format!("child after: {after}"));
    check_counters(&figures(&samples), &counters, &mut s.failures);
    s.check_leaks(&after, connection_bound(&db));
    s.check_lone_client("db")?;
    s.finish()
}
