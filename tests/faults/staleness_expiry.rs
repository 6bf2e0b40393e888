//! Scenario 13 with keys that expire where no invalidation follows: a
//! replica (it never deletes an expired key itself, and answers nil) and
//! a master under `CLIENT PAUSE WRITE` (`FAILOVER`, a manual cluster
//! failover: it expires nothing until the pause ends). A fill whose `GET`
//! came just before the key's TTL ended and whose `PTTL` came just after
//! (-2) must not be kept. The server is reached through a proxy of
//! `proxy.rs` that holds each `PTTL` (and `HPTTL`), so that such fills
//! are certain, not a matter of timing.
use super::proxy::Proxy;
use super::staleness::{near_cache_counters, tracking_connections};
use super::*;

/// The key of the reproduction, its TTL, and how long the proxy holds its
/// fill's `PTTL`: until the key expired, with room for a slow machine.
const KEY: &str = "expiring";
const TTL: Duration = Duration::from_millis(1000);
const HOLD: Duration = Duration::from_millis(2000);
/// How long the history trials' proxy holds a `PTTL`: a fill's `GET` in
/// the last this of its key's life gets a -2 (the entry it replaces
/// expired this much early: the `PTTL` was asked before it was held).
const HISTORY_HOLD: Duration = Duration::from_millis(30);
/// The paused master's pauses: from this far into the load, this long,
/// this often (writes wait while paused; reads go on).
const FIRST_PAUSE: f64 = 1.0;
const PAUSE_FOR: Duration = Duration::from_millis(1500);
const PAUSE_EVERY: f64 = 2.5;

/// Where an expired key is not deleted, so that no invalidation comes.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Undeleted {
    /// A replica whose master has active expiry off (as a master with
    /// many volatile keys that takes minutes to reach one): no `DEL` comes
    /// until a client touches the key on the master.
    Replica,
    /// A master under `CLIENT PAUSE WRITE`.
    PausedMaster,
}

impl Undeleted {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Undeleted::Replica => "replica",
            Undeleted::PausedMaster => "paused",
        }
    }
}

/// The servers of an expiry trial and varnishd: the database reads the
/// server that keeps expired keys through `proxy`; writes go straight to
/// the master (`s.redis`).
struct Expiring {
    s: Setup,
    proxy: Proxy,
    /// The replica, for [`Undeleted::Replica`].
    replica: Option<Redis>,
    /// What readers ask for (`/db/rget/`: a replica may serve it).
    read_path: fn(usize) -> &'static str,
}

impl Expiring {
    fn start(trial: StaleTrial, undeleted: Undeleted) -> Result<Expiring, Failed> {
        let StaleTrial { name, db, so, dir } = trial;
        let master = Redis::start_with(
            &dir.join("m"),
            &["--repl-diskless-sync-delay".into(), "0".into()],
        )?;
        let (replica, proxy, text, read_path): (_, _, _, fn(usize) -> &'static str) =
            match undeleted {
                Undeleted::Replica => {
                    redis_cmd(master.port, None, &["DEBUG", "SET-ACTIVE-EXPIRE", "0"])
                        .map_err(|e| format!("DEBUG SET-ACTIVE-EXPIRE: {e}"))?;
                    let replica =
                        start_replicas(&dir, &["r1"], "127.0.0.1", master.port, &[])?.remove(0);
                    let proxy = Proxy::start(&[replica.port], Duration::ZERO)?;
                    let base = vcl(&so, master.port, std::slice::from_ref(&db), &name);
                    let text = vcl_with_servers(&base, master.port, &[], &[proxy.port])?;
                    (Some(replica), proxy, text, rget)
                }
                Undeleted::PausedMaster => {
                    let proxy = Proxy::start(&[master.port], Duration::ZERO)?;
                    let text = vcl(&so, proxy.port, std::slice::from_ref(&db), &name);
                    (None, proxy, text, get)
                }
            };
        let ports = [master.port, proxy.port];
        let s = Setup::with_vcl(&name, &dir, master, &text, &ports)?;
        let expiring = Expiring {
            s,
            proxy,
            replica,
            read_path,
        };
        expiring.tracked()?;
        Ok(expiring)
    }

    /// The port of the server that keeps the expired keys.
    fn read_port(&self) -> u16 {
        self.replica.as_ref().map_or(self.s.redis.port, |r| r.port)
    }

    /// Waits (5 s at most) for the tracking connection on the server
    /// read: until then no fill is kept.
    fn tracked(&self) -> Res<()> {
        let port = self.read_port();
        let tracking = || match tracking_connections(port)?.is_empty() {
            true => Err("none yet".to_string()),
            false => Ok(()),
        };
        let until = Instant::now() + Duration::from_secs(5);
        support::poll_until(until, Duration::from_millis(20), tracking)
            .map_err(|_| format!("no tracking connection on port {port} within 5 s"))
    }

    /// `CLIENT PAUSE <ms> WRITE` on the master.
    fn pause(&self, pause: Duration) -> Res<String> {
        let ms = pause.as_millis().to_string();
        redis_cmd(self.s.redis.port, None, &["CLIENT", "PAUSE", &ms, "WRITE"])
            .map_err(|e| format!("CLIENT PAUSE: {e}"))
    }
}

fn rget(_: usize) -> &'static str {
    "/db/rget/"
}

fn get(_: usize) -> &'static str {
    "/db/get/"
}

/// One read through varnishd: the value (`(nil)` for nil), or why none.
fn read(port: u16, path: &str) -> Res<String> {
    let resp = http_get(port, &format!("{path}{KEY}")).map_err(|e| format!("{path}: {e}"))?;
    match (resp.headers.get("x-r"), resp.headers.get("x-v")) {
        (Some(r), Some(v)) if r == "r1" => Ok(v.clone()),
        (r, _) => Err(format!("{path}{KEY}: no reply (x-r {r:?})")),
    }
}

/// `s13.near-cache-expiry.*`: the key gets a value with a 1 s TTL; a read
/// (the doorkeeper's), then the read that fills, whose `PTTL` the proxy
/// holds 2 s, past the expiry: it says -2 (checked on the server). The
/// next read must be the server's nil, not a hit of the old value. On the
/// replica, the key is still there (no invalidation could have come).
pub(crate) fn s13_near_cache_expiry(mode: Mode, undeleted: Undeleted) -> Result<(), Failed> {
    let mut trial = StaleTrial::begin(&format!("expiry-{}", undeleted.name()), mode)?;
    trial.db.command_timeout = 5000;
    let x = Expiring::start(trial, undeleted)?;
    let (master, read_port, port) = (x.s.redis.port, x.read_port(), x.s.varnish.port);
    let path = (x.read_path)(0);
    let ttl = TTL.as_millis().to_string();
    let set = redis_cmd(
        master,
        None,
        &["SET", &format!("fault:{KEY}"), "old", "PX", &ttl],
    );
    if undeleted == Undeleted::Replica {
        redis_cmd(master, None, &["WAIT", "1", "1000"]).map_err(|e| format!("WAIT: {e}"))?;
    }
    let paused = match undeleted {
        Undeleted::PausedMaster => Some(x.pause(Duration::from_secs(20))?),
        Undeleted::Replica => None,
    };
    let gets_on_master = gets(master);
    let invalidations = near_cache_counters(port)?["invalidations"];
    x.proxy.hold_requests(b"PTTL", HOLD);
    let set_at = Instant::now();
    let first = read(port, path)?;
    let filled = Instant::now();
    let fill = read(port, path)?;
    let fill_took = filled.elapsed();
    let pttl = redis_cmd(read_port, None, &["PTTL", &format!("fault:{KEY}")]);
    let kept = redis_cmd(read_port, None, &["DBSIZE"]);
    let counted = near_cache_counters(port)?;
    let (hits_before, invalidations) = (counted["hits"], counted["invalidations"] - invalidations);
    let after = read(port, path)?;
    let hits = near_cache_counters(port)?["hits"] - hits_before;
    let on_master = gets(master) - gets_on_master;
    if paused.is_some() {
        let _ = redis_cmd(master, None, &["CLIENT", "UNPAUSE"]);
    }
    let mut s = x.s;
    s.say(format!(
        "SET {set:?}{}; reads: {first:?}, {fill:?} (the fill, in {} ms, {} PTTL(s) held {} ms), then {after:?} ({hits} hits, {invalidations} invalidations counted by then); the server's PTTL then {pttl:?}, DBSIZE {kept:?}; GETs the master answered: {on_master}",
        paused.map_or(String::new(), |p| format!(", CLIENT PAUSE WRITE {p:?}")),
        fill_took.as_millis(),
        x.proxy.held(),
        HOLD.as_millis(),
    ));
    // The reproduction holds only if the fill read the value before the
    // expiry and its PTTL said -2.
    s.check(first == "old" && fill == "old", || {
        format!("the reads before the expiry got {first:?} and {fill:?}, not \"old\"")
    });
    s.check(
        set_at.elapsed() > TTL && pttl.as_deref().ok() == Some(":-2"),
        || format!("the key had not expired when the fill's PTTL came: PTTL {pttl:?}"),
    );
    s.check(x.proxy.held() > 0 && fill_took >= HOLD, || {
        format!(
            "the fill's PTTL was not held ({} held, the fill took {} ms)",
            x.proxy.held(),
            fill_took.as_millis()
        )
    });
    if undeleted == Undeleted::Replica {
        s.check(on_master == 0, || {
            format!("the master answered {on_master} GETs: the reads were to go to the replica")
        });
    }
    // Not kept: the key changed (expired) since the read, as if Redis
    // had said so.
    s.check(invalidations == 1, || {
        format!("the fill that found its key gone counted {invalidations} invalidations, not 1")
    });
    s.check(after == "(nil)" && hits == 0, || {
        format!(
            "the read after the key expired got {after:?} ({hits} near-cache hits), not the server's nil"
        )
    });
    s.finish()
}

/// `s13.near-cache-staleness.expiring-{replica,paused}.shared`: the load
/// of `staleness.rs`, every write with a TTL of 50-500 ms (straight to
/// the master), read through the server that keeps expired keys, each
/// `PTTL` held 30 ms by the proxy; the paused master is paused 1.5 s
/// every 2.5 s from 1 s on. Besides the staleness check, no read that
/// began past its value's expiry (plus the bound) returns it.
pub(crate) fn s13_near_cache_staleness_expiring(
    mode: Mode,
    undeleted: Undeleted,
) -> Result<(), Failed> {
    let trial = StaleTrial::begin(&format!("expiring-{}", undeleted.name()), mode)?;
    let mut x = Expiring::start(trial, undeleted)?;
    x.proxy.hold_requests(b"PTTL", HISTORY_HOLD);
    let mut target = StaleTarget::one_server(x.s.varnish.port, x.read_path, x.s.redis.port);
    target.expiring = true;
    let mut load = StaleLoad::start(target)?;
    let mut pauses = 0;
    if undeleted == Undeleted::PausedMaster {
        let mut at = FIRST_PAUSE;
        while at + PAUSE_FOR.as_secs_f64() < DURATION {
            load.sleep_until(at);
            x.pause(PAUSE_FOR)?;
            pauses += 1;
            at += PAUSE_EVERY;
        }
    }
    load.sleep_until(DURATION);
    load.events.push(format!(
        "{} PTTL chunks held {} ms by the proxy{}",
        x.proxy.held(),
        HISTORY_HOLD.as_millis(),
        match undeleted {
            Undeleted::PausedMaster => format!("; {pauses} pauses of {} ms", PAUSE_FOR.as_millis()),
            Undeleted::Replica => String::new(),
        }
    ));
    load.finish(&mut x.s, true)?;
    x.s.finish()
}
