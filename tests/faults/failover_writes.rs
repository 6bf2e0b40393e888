//! Scenario 11: failovers under `INCR` writes with `execute(master =
//! true)`, every acknowledged write counted against the new master's
//! counter once the failover settled (issue #23).
use super::*;

const CLIENTS: usize = 8;
/// One counter for all the clients (`fault:acked`): each 200 whose `INCR`
/// replied is one write the new master must hold.
const PATH: &str = "/db/incr/acked";
const KEY: &str = "fault:acked";
/// Load before the failover, and after the new master is named.
const BEFORE: f64 = 1.5;
const AFTER: f64 = 2.0;
/// Bound on the failover itself (Sentinel's `failover-timeout` is 2 s).
const SWITCH_BOUND: f64 = 8.0;
/// One `INCR fault:acked` on the replication stream, in bytes.
const INCR_BYTES: u64 = 32;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Failover {
    /// `SENTINEL FAILOVER`, sent to the last Sentinel of the VCL's list,
    /// not the first, whose session the VCL's thread keeps the topology
    /// with: that Sentinel leads, and only it publishes the failover's
    /// steps. Graceful: 0 lost.
    Sentinel,
    /// Redis's own `FAILOVER` on the master, no Sentinel: 0 lost.
    Command,
    /// SIGKILL of the master, the Sentinels' own failover: reported.
    Kill,
}

impl Failover {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Failover::Sentinel => "sentinel",
            Failover::Command => "command",
            Failover::Kill => "kill",
        }
    }
}

/// Seconds of the day of a redis log line (`PID:X 03 Dec 2026
/// 13:19:01.123 # ...`) that contains `event`, the first one.
fn logged_at(log: &Path, event: &str) -> Option<f64> {
    let text = fs::read_to_string(log).ok()?;
    let line = text.lines().find(|l| l.contains(event))?;
    let stamp = line
        .split_whitespace()
        .find(|w| w.matches(':').count() == 2)?;
    let mut parts = stamp.split(':');
    let (h, m, s): (f64, f64, f64) = (
        parts.next()?.parse().ok()?,
        parts.next()?.parse().ok()?,
        parts.next()?.parse().ok()?,
    );
    Some(h * 3600.0 + m * 60.0 + s)
}

/// Now as seconds of the (UTC) day, as the redis logs stamp it.
fn wall_now() -> f64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    now.as_secs_f64() % 86400.0
}

/// Requests that waited on the hold, told from the rest by their latency
/// (tens of times the p99 of a write): how many, p50 and worst.
fn held_requests(samples: &[Sample]) -> String {
    let mut held: Vec<u64> = samples
        .iter()
        .map(|x| x.latency_us)
        .filter(|&us| us > 50_000)
        .collect();
    held.sort_unstable();
    match (held.get(held.len() / 2), held.last()) {
        (Some(p50), Some(worst)) => format!(
            "{} requests over 50 ms, p50 {} ms, worst {} ms",
            held.len(),
            p50 / 1000,
            worst / 1000
        ),
        _ => "no request over 50 ms".into(),
    }
}

fn role_of(port: u16) -> String {
    redis_cmd(port, None, &["INFO", "replication"])
        .ok()
        .and_then(|info| info_field::<String>(&info, "role"))
        .unwrap_or_default()
}

fn counter_at(port: u16) -> Option<u64> {
    let got = redis_cmd(port, None, &["GET", KEY]).ok()?;
    got.trim().trim_start_matches(['$', ':', '+']).parse().ok()
}

pub(crate) fn s11_failover_writes(failover: Failover, mode: Mode) -> Result<(), Failed> {
    let name = format!("s11.{}-{}", failover.name(), mode.name());
    let mut db = DbSpec::new("db", mode);
    // Longer than a hold (a promotion takes up to a second): a held
    // write must not time out.
    db.command_timeout = 2000;
    // `FAILOVER` swaps the roles under the writes: a write the demoted
    // master refuses (`READONLY`, not run) is sent to the new one within
    // the retry count (without retries it would be the reply, as in the
    // C VMOD).
    if failover == Failover::Command {
        db.retries = 1;
    }
    let so = support::vmod_so()?;
    let dir = support::trial_dir(&name)?;
    let master = Redis::start(&dir.join("m"))?;
    let count = if failover == Failover::Command { 1 } else { 2 };
    let names = &["r1", "r2"][..count];
    let replicas = start_replicas(&dir, names, "127.0.0.1", master.port, &[])?;
    let mut sentinels = None;
    if failover != Failover::Command {
        let watched = Watched {
            name: MASTER,
            host: "127.0.0.1",
            port: master.port,
            replicas: count,
        };
        sentinels = Some(start_sentinels(&dir, &[watched], &[])?);
    }
    let ports: Vec<u16> = std::iter::once(master.port)
        .chain(replicas.iter().map(|r| r.port))
        .collect();

    // The generated VCL, every server `type = auto`, the Sentinels (if
    // any) before the database.
    let base = vcl(&so, master.port, std::slice::from_ref(&db), "s11 boot");
    let sentinel_ports = sentinels.as_ref().map_or(Vec::new(), |s| s.ports());
    let replica_ports: Vec<u16> = replicas.iter().map(|r| r.port).collect();
    let text = vcl_with_servers(&base, master.port, &sentinel_ports, &replica_ports)
        .map_err(|e| format!("s11: {e}"))?;
    let mut s = Setup::with_vcl(&name, &dir, master, &text, &ports)?;
    let old_port = s.redis.port;

    let load = Load::start(LoadSpec {
        port: s.varnish.port,
        clients: CLIENTS,
        duration: Duration::from_secs(30),
        paths: vec![PATH.into()],
        deadline: Duration::from_secs(5),
    });
    load.sleep_until(BEFORE);
    // Kill: how far behind the replicas are, just before.
    let offsets = |port: u16, field: &str| redis_info(port, "replication", field);
    let master_offset = offsets(old_port, "master_repl_offset");
    let replica_offset = replicas
        .iter()
        .filter_map(|r| offsets(r.port, "slave_repl_offset"))
        .max();
    let asked = load.at();
    let asked_wall = wall_now();
    let reply = match failover {
        Failover::Sentinel => {
            let port = sentinels
                .as_ref()
                .and_then(|s| s.ports().last().copied())
                .unwrap_or(0);
            redis_cmd(port, None, &["SENTINEL", "FAILOVER", MASTER]).map(|r| r.trim().to_string())
        }
        Failover::Command => redis_cmd(old_port, None, &["FAILOVER"]).map(|r| r.trim().to_string()),
        Failover::Kill => {
            s.redis.kill9();
            Ok("SIGKILL".into())
        }
    };
    let mut switched = None;
    let mut new_port = None;
    while load.at() < asked + SWITCH_BOUND {
        let named = match &sentinels {
            Some(sentinels) => sentinels.master_port().filter(|&p| p != old_port),
            None => replicas
                .iter()
                .find(|r| role_of(r.port) == "master")
                .map(|r| r.port)
                .filter(|_| role_of(old_port) == "slave"),
        };
        if let Some(p) = named {
            switched = Some(load.at());
            new_port = Some(p);
            break;
        }
        thread::sleep(Duration::from_millis(20));
    }
    load.sleep_until(switched.unwrap_or(asked) + AFTER);
    load.stop.store(true, Ordering::Relaxed);
    let report = load.finish();
    let reply = reply.map_err(|e| format!("{failover:?}: {e}"))?;
    let (Some(switched), Some(new_port)) = (switched, new_port) else {
        s.check(false, || {
            format!("no new master within {SWITCH_BOUND} s ({reply})")
        });
        return s.finish();
    };
    // Settled: the new master has every write it took by now.
    thread::sleep(Duration::from_millis(500));
    let on_new = counter_at(new_port).unwrap_or(0);
    let all = report.all();
    let acked = all.ok as u64;
    let lost = acked.saturating_sub(on_new);
    let during = figures(&report.window(asked, switched));
    s.say(format!(
        "{CLIENTS} clients of INCR with execute(master = true); {reply} at {asked:.2} s, new master 127.0.0.1:{new_port} named at +{}",
        ms(switched - asked)
    ));
    s.say(format!("all: {all}"));
    s.say(format!(
        "from the failover to the new master named: {during}"
    ));
    s.say(format!(
        "acknowledged {acked}, on the new master {on_new}, lost {lost}, failed {} (fallback {}, error reply {})",
        all.requests - all.ok,
        all.fallback,
        all.error_reply
    ));
    if let Some(sentinels) = &sentinels {
        // The leader: the Sentinel that promoted the replica.
        let led = sentinels
            .0
            .iter()
            .position(|(one, _)| logged_at(&one.log, "+promoted-slave").is_some());
        let log = |event| led.and_then(|i| logged_at(&sentinels.0[i].0.log, event));
        let held = log("+failover-state-select-slave")
            .zip(log("+promoted-slave"))
            .map(|(from, to)| to - from);
        s.say(format!(
            "leader s{} (the VCL's topology session is on s1); its +failover-state-select-slave to +promoted-slave: {}, +promoted-slave to +switch-master: {}",
            led.map_or("?".into(), |i| (i + 1).to_string()),
            held.map_or("-".into(), ms),
            log("+promoted-slave")
                .zip(log("+switch-master"))
                .map_or("-".into(), |(pr, sw)| ms(sw - pr)),
        ));
        s.say(format!(
            "held: {}",
            held_requests(&report.window(asked, switched))
        ));
        if failover == Failover::Kill {
            let gap = master_offset
                .zip(replica_offset)
                .map(|(m, r)| m.saturating_sub(r));
            // Writes back: the first acknowledged write sent after the
            // first one that failed.
            let failed_from = report
                .samples
                .iter()
                .filter(|x| x.outcome != Outcome::Ok && x.start_us as f64 / 1e6 >= asked)
                .map(|x| x.start_us)
                .min();
            let resumed = failed_from.and_then(|from| {
                report
                    .samples
                    .iter()
                    .filter(|x| x.outcome == Outcome::Ok && x.start_us > from)
                    .map(|x| x.end_us() as f64 / 1e6)
                    .reduce(f64::min)
            });
            let switch_logged = sentinels
                .0
                .iter()
                .filter_map(|(one, _)| logged_at(&one.log, "+switch-master"))
                .reduce(f64::min);
            s.say(format!(
                "master_repl_offset gap just before the kill: {} (about {} writes); writes back {} after the first +switch-master",
                gap.map_or("-".into(), |g| format!("{g} bytes")),
                gap.map_or("-".into(), |g| (g / INCR_BYTES).to_string()),
                resumed
                    .zip(switch_logged)
                    .map_or("-".into(), |(t, sw)| ms(asked_wall + (t - asked) - sw)),
            ));
        }
    }
    s.say_worst(&report, db.command_bound());
    let counters = counters(s.varnish.port, "db")?;
    s.say(format!("counters: {counters}"));
    let live: Vec<u16> = ports
        .iter()
        .copied()
        .filter(|&p| failover != Failover::Kill || p != old_port)
        .collect();
    let after = settled_all(&s.varnish, &live);
    s.say(format!("child after: {after}"));

    check_status(&all, &mut s.failures);
    check_worst(&all, db.command_bound(), "", &mut s.failures);
    // No I/O failure here: every retry is a READONLY write resent.
    let resent = counters.get("commands.retried");
    check_counters_with(&all, &counters, resent, 0, &mut s.failures);
    if failover != Failover::Kill {
        s.check(lost == 0, || {
            format!("{lost} acknowledged writes lost ({acked} acknowledged, {on_new} on the new master)")
        });
    }
    if failover == Failover::Sentinel {
        s.check(all.ok == all.requests, || {
            format!("writes failed across a graceful failover: {all}")
        });
    }
    s.check_leaks(&after, connection_bound(&db) * live.len());
    let result = s.finish();
    drop(sentinels);
    drop(replicas);
    result
}
