//! Scenario 16: short and long deadlines on the same pipelined connection
//! (issue #40, items 2 and 3). Workers whose PINGs have 1-3 ms to live
//! share two connections, reopened over and over, with workers whose
//! `INCR`s have 2000 ms and one retry: one request's deadline must cost
//! no other request its reply, and no write may run twice. Each `INCR`
//! names a key of its own, so that Redis counts how often each one ran.
use super::*;

const SECS: f64 = 30.0;
/// Clients of `INCR`s on the database's 2000 ms, and of PINGs with a
/// `.timeout()` of 1, 2 or 3 ms (a third of the clients).
const LONG_CLIENTS: usize = 24;
const SHORT_CLIENTS: usize = 12;
const SHORT_TIMEOUTS_MS: [u32; 3] = [1, 2, 3];
/// The `INCR`s, each of a key of its own (`{c}` the client, `{n}` its
/// request), and those keys (the VCL prefixes `fault:`).
const INCR_PATH: &str = "/db/incr/once:{c}-{n}";
const KEYS: &str = "fault:once:*";
/// A busy 2-core machine runs a worker whose wait ended that much later.
const SCHEDULING: Duration = Duration::from_millis(200);

/// How many times Redis ran the `INCR` of each key: the keys, those at
/// 1, and up to 10 of the others with their value.
struct Runs {
    keys: u64,
    once: u64,
    others: Vec<String>,
}

/// Counts, on the server, the keys the `INCR`s made and their values
/// (one script: the load is over, nothing else writes).
fn count_runs(port: u16) -> Res<Runs> {
    const SCRIPT: &str = "local keys, once, others = 0, 0, {} \
        for _, key in ipairs(redis.call('KEYS', ARGV[1])) do \
            keys = keys + 1 \
            local value = redis.call('GET', key) \
            if value == '1' then once = once + 1 \
            elseif #others < 10 then table.insert(others, key .. '=' .. value) end \
        end \
        return {tostring(keys), tostring(once), unpack(others)}";
    let mut conn = RedisConn::open(port).map_err(|e| format!("redis: {e}"))?;
    let reply = conn
        .cmd_array(&["EVAL", SCRIPT, "0", KEYS])
        .map_err(|e| format!("counting the INCRs' keys: {e}"))?;
    let number = |i: usize| -> Res<u64> {
        reply
            .get(i)
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| format!("counting the INCRs' keys: {reply:?}"))
    };
    Ok(Runs {
        keys: number(0)?,
        once: number(1)?,
        others: reply[2..].to_vec(),
    })
}

pub(crate) fn s16_pipelining_deadlines(tls: bool) -> Result<(), Failed> {
    let mut db = DbSpec::new("db", Mode::Pipelined);
    // Two connections, each shared by short and long requests; whoever
    // drives when one is reopened may be a 1 ms PING. Two, not one: more
    // drivers, more batches, and more of them made only of PINGs already
    // past their deadline (a217c8c, 16 + 8 clients for 25 s: 17-43 INCRs
    // ran twice in 5 runs with two, 0-16 in 4 runs with one).
    db.max_connections = 2;
    db.command_timeout = 2000;
    db.retries = 1;
    db.connection_ttl = 1;
    let transport = if tls { "tls" } else { "plain" };
    let name = format!("s16-{transport}");
    let mut s = if tls {
        Setup::start_tls(&name, std::slice::from_ref(&db))?
    } else {
        Setup::start(&name, std::slice::from_ref(&db))?
    };
    let long_bound = db.command_bound();
    let short_bound = DbSpec {
        command_timeout: *SHORT_TIMEOUTS_MS.iter().max().unwrap_or(&1),
        ..db.clone()
    }
    .command_bound();
    s.say(format!(
        "{transport}: {LONG_CLIENTS} clients of INCR (a key per request, command_timeout {} ms) and {SHORT_CLIENTS} of PING with .timeout() {SHORT_TIMEOUTS_MS:?} ms, {SECS} s; {} pipelined connections, connection_ttl {} s, {} retry, connection_timeout {} ms; bounds {} ms (INCR), {} ms (PING)",
        db.command_timeout,
        db.max_connections,
        db.connection_ttl,
        db.retries,
        db.connection_timeout,
        long_bound.as_millis(),
        short_bound.as_millis()
    ));
    let load = |clients, paths| {
        Load::start(LoadSpec {
            port: s.varnish.port,
            clients,
            duration: Duration::from_secs_f64(SECS),
            paths,
            deadline: long_bound + Duration::from_secs(2),
        })
    };
    let long = load(LONG_CLIENTS, vec![INCR_PATH.to_string()]);
    let short = load(
        SHORT_CLIENTS,
        SHORT_TIMEOUTS_MS
            .iter()
            .map(|ms| format!("/db/ping-within/{ms}"))
            .collect(),
    );
    let (long, short) = (long.finish(), short.finish());
    let runs = count_runs(s.redis.port)?;
    thread::sleep(Duration::from_millis(300));
    let after = s.settled_snapshot();
    let counters = counters(s.varnish.port, "db")?;

    let long_all = long.all();
    s.say(format!("INCR (2000 ms): {long_all}"));
    let failed: Vec<&Sample> = long
        .samples
        .iter()
        .filter(|x| x.outcome != Outcome::Ok)
        .collect();
    if !failed.is_empty() {
        let first: Vec<String> = failed
            .iter()
            .take(10)
            .map(|x| {
                format!(
                    "{:?} after {} ms at {:.2} s",
                    x.outcome,
                    x.latency_us / 1000,
                    x.start_us as f64 / 1e6
                )
            })
            .collect();
        s.say(format!(
            "INCRs not replied: {} ({} of them in under 1 s), first: {}",
            failed.len(),
            failed.iter().filter(|x| x.latency_us < 1_000_000).count(),
            first.join("; ")
        ));
    }
    for (i, ms) in SHORT_TIMEOUTS_MS.iter().enumerate() {
        let f = figures(&short.of_path(i));
        s.say(format!(
            "PING within {ms} ms: {} requests, {} replied, {} timed out (fallback); latency p50 {:.2} ms, p99 {:.2} ms, worst {:.2} ms",
            f.requests, f.ok, f.fallback, f.p50_ms, f.p99_ms, f.worst_ms
        ));
    }
    s.say(format!(
        "on the server: {} keys written, {} once, {} more than once{}",
        runs.keys,
        runs.once,
        runs.keys - runs.once,
        if runs.others.is_empty() {
            String::new()
        } else {
            format!(" (e.g. {})", runs.others.join(", "))
        }
    ));
    s.say(format!("counters: {counters}"));
    s.say(format!("child after: {after}"));

    let short_all = short.all();
    check_status(&long_all, &mut s.failures);
    check_status(&short_all, &mut s.failures);
    s.check(long_all.ok == long_all.requests, || {
        format!(
            "{} of {} INCRs with 2000 ms got no reply or an error reply",
            long_all.requests - long_all.ok,
            long_all.requests
        )
    });
    s.check(runs.once == runs.keys, || {
        format!(
            "{} INCRs ran more than once: {}",
            runs.keys - runs.once,
            runs.others.join(", ")
        )
    });
    s.check(runs.keys == long_all.requests as u64, || {
        format!(
            "{} INCRs sent, {} keys on the server (one each if each ran)",
            long_all.requests, runs.keys
        )
    });
    check_worst(
        &long_all,
        long_bound + SCHEDULING,
        "INCR: ",
        &mut s.failures,
    );
    check_worst(
        &short_all,
        short_bound + SCHEDULING,
        "PING: ",
        &mut s.failures,
    );
    // What the trial is about happened: the connection reopened under
    // load (at its TTL, or dropped after a timeout made the server sick),
    // short requests timed out.
    let opened = counters.get("connections.total");
    s.check(opened as f64 >= SECS / 2.0, || {
        format!("connections were opened {opened} times in {SECS} s (connection_ttl 1 s)")
    });
    s.check(short_all.fallback > 0, || {
        format!("no PING timed out: {short_all}")
    });
    let mut both = long.samples;
    both.extend(short.samples);
    check_counters(&figures(&both), &counters, &mut s.failures);
    s.check_leaks(&after, connection_bound(&db));
    s.check_lone_client("db")?;
    s.finish()
}
