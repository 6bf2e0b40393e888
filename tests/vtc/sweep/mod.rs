//! `sweep.commands`: every command the server lists (`COMMAND LIST`, with
//! arguments from `COMMAND DOCS`, see [`args`]) through four databases of
//! one varnishd, while concurrent requests SET and GET their own keys
//! through the same databases (issue #20, "Tests").
//!
//! Databases (each `connection_timeout` 500 ms, `command_timeout` 500 ms,
//! no retries): `priv` (private, 8 connections), `shared`, `pipe` (shared,
//! `pipelining=true`), each on a redis-server of its own, and `cluster`
//! (`type=cluster`, `pipelining=true`) on a cluster of 3 masters x 1
//! replica (tests/support/cluster.rs); the shared ones with
//! `max_connections=1`, so that every task goes through the connection the
//! previous one used. One thread per database sends the
//! commands one after another; two more per database run the load.
//!
//! Pass:
//! * no load request reads a value that is not its own, no swept command's
//!   reply holds a load value, every response is a 200;
//! * every swept request returns within (connection_timeout +
//!   command_timeout) x (1 + retries) + [`SLACK`];
//! * after each swept command, `CLIENT LIST` of the database's servers
//!   (read directly) shows no connection of the VMOD in another state than
//!   before the sweep (db, Pub/Sub, MULTI, WATCH, name, protocol, tracking,
//!   flags...; see [`state`]) within [`SETTLE`];
//! * varnishd's child is the one that started (no panic).
mod args;
mod state;

use crate::servers::start_redis;
use crate::support::{self, HttpConn, HttpResponse, RedisConn, Varnishd};
use crate::{cluster, Fixture};
use libtest_mimic::Failed;
use parking_lot::Mutex;
use state::ClientList;
use std::collections::HashSet;
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

const CONNECTION_TIMEOUT_MS: u64 = 500;
const COMMAND_TIMEOUT_MS: u64 = 500;
const RETRIES: u64 = 0;
/// Room over the documented bound for a busy 2-core machine.
const SLACK: Duration = Duration::from_millis(1000);
/// How long a connection may take to return to its default state (or be
/// closed) after its task has ended.
const SETTLE: Duration = Duration::from_millis(1000);
const LOAD_THREADS_PER_DB: usize = 2;
/// Pushed arguments the VCL takes (headers a1..a20).
const MAX_ARGS: usize = 20;
/// Failure lines shown at most.
const MAX_SHOWN: usize = 80;

struct Db {
    name: &'static str,
    /// `type = cluster`.
    cluster: bool,
    pipelining: bool,
    shared: bool,
}

const DBS: [Db; 4] = [
    Db {
        name: "priv",
        cluster: false,
        pipelining: false,
        shared: false,
    },
    Db {
        name: "shared",
        cluster: false,
        pipelining: false,
        shared: true,
    },
    Db {
        name: "pipe",
        cluster: false,
        pipelining: true,
        shared: true,
    },
    Db {
        name: "cluster",
        cluster: true,
        pipelining: true,
        shared: true,
    },
];

fn bound() -> Duration {
    Duration::from_millis((CONNECTION_TIMEOUT_MS + COMMAND_TIMEOUT_MS) * (1 + RETRIES)) + SLACK
}

pub(crate) fn run() -> Result<(), Failed> {
    let so = support::vmod_so()?;
    // After the build of the .so, which the other trials share.
    let started = Instant::now();
    let dir = support::trial_dir("sweep.commands")?;
    let mut fx = Fixture {
        dir: dir.clone(),
        servers: Vec::new(),
        trickles: Vec::new(),
    };
    // A server per standalone database: its CLIENT LIST shows that
    // database's connections only.
    let mut lane_ports: Vec<Vec<u16>> = Vec::new();
    for db in DBS.iter().filter(|d| !d.cluster) {
        start_redis(
            &dir,
            db.name,
            Ipv4Addr::LOCALHOST,
            None,
            &[],
            None,
            &mut fx.servers,
        )
        .map_err(|e| format!("{e}{}", fx.logs()))?;
        lane_ports.push(vec![fx.servers.last().expect("started").port]);
    }
    let macros = {
        let servers = &mut fx.servers;
        let mut start_node = |node: &str, node_args: &[String]| {
            start_redis(
                &dir,
                node,
                Ipv4Addr::LOCALHOST,
                None,
                node_args,
                None,
                servers,
            )?;
            let server = servers.last().expect("started node");
            Ok(cluster::Node::plain(server.port, server.child.id()))
        };
        cluster::start(&dir, "c", &[], &mut start_node)
    };
    let macros = macros.map_err(|e| format!("{e}{}", fx.logs()))?;
    let macro_of = |name: &str| {
        macros
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
            .ok_or_else(|| format!("cluster: no macro {name}"))
    };
    let seed = macro_of("c_seed")?;
    let mut cluster_ports = Vec::new();
    for node in ["m0", "m1", "m2", "r0", "r1", "r2"] {
        let port = macro_of(&format!("c_{node}_port"))?;
        cluster_ports.push(port.parse::<u16>().map_err(|e| e.to_string())?);
    }
    lane_ports.push(cluster_ports);

    let (plan, version) = {
        let mut conn = RedisConn::open(lane_ports[0][0]).map_err(|e| e.to_string())?;
        let list = conn
            .value(&["COMMAND", "LIST"])
            .map_err(|e| e.to_string())?;
        let docs = conn
            .value(&["COMMAND", "DOCS"])
            .map_err(|e| e.to_string())?;
        let info = conn.cmd(&["INFO", "server"]).map_err(|e| e.to_string())?;
        let version = info
            .lines()
            .filter(|l| l.starts_with("redis_version:") || l.starts_with("valkey_version:"))
            .collect::<Vec<_>>()
            .join(" ");
        (args::plan(&list, &docs)?, version)
    };

    // What is sent, for a look with VTC_KEEP=1.
    let listing: String = plan
        .commands
        .iter()
        .map(|c| c.words.join(" ") + "\n")
        .collect();
    support::write_public(&dir.join("plan.txt"), &listing)?;

    let vcl_path = dir.join("sweep.vcl");
    let standalone: Vec<String> = fx
        .servers
        .iter()
        .take(3)
        .map(|s| format!("127.0.0.1:{}", s.port))
        .collect();
    support::write_public(&vcl_path, &vcl(&so, &standalone, &seed))?;
    let varnishd = Varnishd::start(
        &dir.join("varnish"),
        &vcl_path,
        &dir.join("varnishd.log"),
        &varnish_args(),
        |port| {
            HttpConn::open(port, Duration::from_secs(2))
                .and_then(|mut c| c.get("/ping", &[]))
                .is_ok_and(|r| r.status == 200)
        },
        |_| {},
    )?;
    let port = varnishd.port;

    // Open each database's connections with plain commands, then take the
    // default state of the VMOD's connections.
    let mut checkers: Vec<Vec<ClientList>> = lane_ports
        .iter()
        .map(|ports| ports.iter().map(|p| ClientList::new(*p)).collect())
        .collect();
    thread::scope(|s| {
        for db in &DBS {
            for t in 0..4 {
                s.spawn(move || {
                    if let Ok(mut c) = HttpConn::open(port, Duration::from_secs(10)) {
                        for n in 0..5 {
                            let _ = read_write(&mut c, db.name, &format!("warm{t}"), n);
                        }
                    }
                });
            }
        }
    });
    for lane in &mut checkers {
        for checker in lane {
            checker
                .take_baseline()
                .map_err(|e| format!("CLIENT LIST on {}: {e}", checker.port))?;
        }
    }

    let failures = Mutex::new(Vec::<String>::new());
    let fail = |line: String| failures.lock().push(line);
    let stop = AtomicBool::new(false);
    let load_counts = Mutex::new((0u64, 0u64));
    let mut outcomes = Vec::new();
    let sweep_started = Instant::now();
    thread::scope(|s| {
        let mut lanes = Vec::new();
        for db in &DBS {
            for t in 0..LOAD_THREADS_PER_DB {
                let (stop, fail, load_counts) = (&stop, &fail, &load_counts);
                s.spawn(move || load(port, db.name, t, stop, fail, load_counts));
            }
        }
        for (db, lane) in DBS.iter().zip(checkers.iter_mut()) {
            let (plan, fail) = (&plan, &fail);
            lanes.push(s.spawn(move || sweep_lane(port, db.name, plan, lane, fail)));
        }
        for (db, lane) in DBS.iter().zip(lanes) {
            if let Ok(o) = lane.join() {
                outcomes.push(format!(
                    "{} {} replied, {} error replies, {} no reply",
                    db.name, o.replied, o.errors, o.no_reply
                ));
            }
        }
        stop.store(true, Ordering::Relaxed);
    });
    let swept_in = sweep_started.elapsed();

    let child_now = support::find_cache_child(varnishd.manager_pid);
    if child_now != Some(varnishd.child_pid) || !support::alive(varnishd.child_pid) {
        fail(format!(
            "varnishd's child {} is gone (now {child_now:?}): a panic? {}",
            varnishd.child_pid,
            support::tail_file(&dir.join("varnishd.log"), 30)
        ));
    }
    drop(varnishd);
    let (load_ok, load_missed) = *load_counts.lock();
    let skipped: Vec<String> = plan
        .skipped
        .iter()
        .map(|(name, why)| format!("{name} ({why})"))
        .collect();
    println!(
        "sweep.commands: {} on {}: {} commands x {} databases in {:.1} s ({:.1} s in all); {}; load: {load_ok} read back, {load_missed} not replied; skipped: {}",
        support::server_program(),
        version,
        plan.commands.len(),
        DBS.len(),
        swept_in.as_secs_f64(),
        started.elapsed().as_secs_f64(),
        outcomes.join(", "),
        skipped.join(", ")
    );
    let failures = failures.into_inner();
    if failures.is_empty() {
        return Ok(());
    }
    // Per database: how many, then its first ones in the order seen (the
    // first is the cause, most of the rest its consequences).
    let kinds = [
        ("another request's value", "got a load request's value"),
        ("another request's value (load)", ": load GET of "),
        ("load EVAL not its own", ": load EVAL returning "),
        ("past the bound", " ms (bound "),
        ("connection state left", ": after "),
        ("not a 200", ": status "),
    ];
    let counts: Vec<String> = kinds
        .iter()
        .map(|(kind, mark)| (kind, failures.iter().filter(|f| f.contains(mark)).count()))
        .filter(|(_, n)| *n > 0)
        .map(|(kind, n)| format!("{kind}: {n}"))
        .collect();
    let mut text = format!("{} failures ({})\n", failures.len(), counts.join(", "));
    for db in &DBS {
        let prefix = format!("{}: ", db.name);
        let mine: Vec<&String> = failures.iter().filter(|f| f.starts_with(&prefix)).collect();
        if mine.is_empty() {
            continue;
        }
        text.push_str(&format!(
            "--- {}: {} failures, first ones:\n",
            db.name,
            mine.len()
        ));
        for f in mine.iter().take(MAX_SHOWN / DBS.len()) {
            text.push_str(f);
            text.push('\n');
        }
    }
    for f in failures
        .iter()
        .filter(|f| !DBS.iter().any(|d| f.starts_with(&format!("{}: ", d.name))))
    {
        text.push_str(f);
        text.push('\n');
    }
    Err(text.into())
}

fn varnish_args() -> Vec<String> {
    let mut args = vec!["-s".to_string(), "malloc,32m".to_string()];
    for p in [
        "thread_pools=1",
        "thread_pool_min=40",
        "thread_pool_max=200",
        "vsl_space=16M",
        "cc_command=exec gcc -O0 -pthread -fpic -shared -Wl,-x -o %o %s",
    ] {
        args.push("-p".to_string());
        args.push(p.to_string());
    }
    args
}

/// One load request: SET and GET of its own key in one task.
fn read_write(
    conn: &mut HttpConn,
    db: &str,
    thread: &str,
    n: u64,
) -> std::io::Result<(HttpResponse, String)> {
    let key = format!("load:{db}:{thread}:{n}");
    let value = format!("lv:{db}:{thread}:{n}");
    let r = conn.get("/rw", &[("db", db), ("key", &key), ("value", &value)])?;
    Ok((r, value))
}

fn load(
    port: u16,
    db: &str,
    t: usize,
    stop: &AtomicBool,
    fail: &(dyn Fn(String) + Sync),
    counts: &Mutex<(u64, u64)>,
) {
    let mut conn = None;
    let mut n = 0;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        if conn.is_none() {
            conn = HttpConn::open(port, Duration::from_secs(10)).ok();
        }
        let Some(c) = conn.as_mut() else {
            thread::sleep(Duration::from_millis(50));
            continue;
        };
        let t0 = Instant::now();
        let result = read_write(c, db, &t.to_string(), n);
        // Three commands, each within the bound.
        if t0.elapsed() > bound() * 3 {
            fail(format!(
                "{db}: load request (SET, GET, EVAL) took {} ms (bound 3 x {} ms)",
                t0.elapsed().as_millis(),
                bound().as_millis()
            ));
        }
        match result {
            Ok((r, value)) => {
                let got = r.header("value").unwrap_or("");
                let mut counts = counts.lock();
                if r.status != 200 {
                    fail(format!("{db}: load request: status {}", r.status));
                } else if r.header("get-replied") != Some("true") {
                    counts.1 += 1;
                } else if got != value {
                    fail(format!("{db}: load GET of {value}'s key read {got:?}"));
                } else {
                    counts.0 += 1;
                }
                let eval = r.header("eval").unwrap_or("");
                if r.header("eval-replied") == Some("true") && eval != value {
                    fail(format!("{db}: load EVAL returning {value} got {eval:?}"));
                }
            }
            Err(_) => conn = None,
        }
    }
}

/// Sends every command of the plan through `db`, one after another, and
/// checks each as the module documentation says.
fn sweep_lane(
    port: u16,
    db: &str,
    plan: &args::Plan,
    checkers: &mut [ClientList],
    fail: &(dyn Fn(String) + Sync),
) -> Outcomes {
    let mut outcomes = Outcomes::default();
    let mut conn: Option<HttpConn> = None;
    // Dirty connections already reported: a connection left in a state
    // is reported once, for the command that left it.
    let mut reported: HashSet<String> = HashSet::new();
    for cmd in &plan.commands {
        let text = cmd.words.join(" ");
        if cmd.words.len() > MAX_ARGS + 1 {
            fail(format!("{db}: {text}: more than {MAX_ARGS} arguments"));
            continue;
        }
        let mut headers: Vec<(String, String)> = vec![
            ("db".into(), db.into()),
            ("cmd".into(), cmd.words[0].clone()),
        ];
        for (i, a) in cmd.words[1..].iter().enumerate() {
            headers.push((format!("a{}", i + 1), a.clone()));
        }
        let headers: Vec<(&str, &str)> = headers
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let c = match conn.as_mut() {
            Some(c) => c,
            None => match HttpConn::open(port, Duration::from_secs(15)) {
                Ok(c) => conn.insert(c),
                Err(e) => {
                    fail(format!("{db}: {text}: connect to varnishd: {e}"));
                    return outcomes;
                }
            },
        };
        let t0 = Instant::now();
        let result = c.get("/sweep", &headers);
        let took = t0.elapsed();
        match result {
            Ok(r) => {
                match (r.header("replied"), r.header("error")) {
                    (Some("true"), Some("false")) => outcomes.replied += 1,
                    (Some("true"), _) => outcomes.errors += 1,
                    _ => outcomes.no_reply += 1,
                }
                if r.status != 200 {
                    fail(format!("{db}: {text}: status {}", r.status));
                }
                if let Some(other) = r.header("crossed") {
                    fail(format!(
                        "{db}: {text}: got a load request's value {other:?}"
                    ));
                }
            }
            Err(e) => {
                conn = None;
                fail(format!("{db}: {text}: no response: {e}"));
            }
        }
        if took > bound() {
            fail(format!(
                "{db}: {text}: took {} ms (bound {} ms)",
                took.as_millis(),
                bound().as_millis()
            ));
        }
        let settle_until = Instant::now() + SETTLE;
        loop {
            let mut dirty = Vec::new();
            for checker in checkers.iter_mut() {
                match checker.dirty() {
                    Ok(lines) => dirty.extend(lines),
                    Err(e) => dirty.push(format!("port {}: CLIENT LIST: {e}", checker.port)),
                }
            }
            dirty.retain(|d| !reported.contains(client_of(d)));
            if dirty.is_empty() {
                break;
            }
            if Instant::now() >= settle_until {
                for d in dirty {
                    fail(format!("{db}: after {text}: {d}"));
                    reported.insert(client_of(&d).to_string());
                }
                break;
            }
            thread::sleep(Duration::from_millis(20));
        }
    }
    outcomes
}

/// What the swept commands of one database got.
#[derive(Default)]
struct Outcomes {
    replied: usize,
    errors: usize,
    no_reply: usize,
}

/// `port P: client ID` of a dirty-client line.
fn client_of(line: &str) -> &str {
    line.find(" (").map(|at| &line[..at]).unwrap_or(line)
}

fn vcl(so: &std::path::Path, standalone: &[String], seed: &str) -> String {
    let mut v = format!(
        "vcl 4.1;\nimport redis from \"{}\";\nbackend default none;\n\nsub vcl_init {{\n",
        so.display()
    );
    let mut standalone = standalone.iter();
    for db in &DBS {
        let location = if db.cluster {
            seed.to_string()
        } else {
            standalone.next().cloned().unwrap_or_default()
        };
        v.push_str(&format!(
            "    new {} = redis.db(location = \"{location}\", type = {},\n        shared_connections = {}, max_connections = {}, pipelining = {},\n        connection_timeout = {CONNECTION_TIMEOUT_MS}, command_timeout = {COMMAND_TIMEOUT_MS},\n        max_command_retries = {RETRIES}, sickness_ttl = 1);\n",
            db.name,
            if db.cluster { "cluster" } else { "master" },
            db.shared,
            // Shared: one connection (per node), that every task uses in
            // turn (or at once, pipelined), so that what one leaves
            // behind reaches the next.
            if db.shared { 1 } else { 8 },
            db.pipelining,
        ));
    }
    v.push_str(
        r#"}

sub vcl_recv { return (synth(200)); }

sub vcl_synth {
    if (req.url == "/ping") { return (deliver); }
    redis.use(req.http.db);
    if (req.url == "/rw") {
        redis.command("SET");
        redis.push(req.http.key);
        redis.push(req.http.value);
        # master=true: a cluster replica may not have the write yet.
        redis.execute(true);
        set req.http.set-ok = redis.get_reply() == "OK";
        redis.command("GET");
        redis.push(req.http.key);
        redis.execute(true);
        # Read back only what was written (a swept CLIENT KILL or PAUSE
        # may fail the SET: counted as not replied).
        set resp.http.get-replied = req.http.set-ok == "true" && redis.replied()
            && !redis.reply_is_error();
        set resp.http.value = redis.get_reply();
        # A script too: a connection left in Lua debug mode (SCRIPT DEBUG)
        # answers it with an error.
        redis.command("EVAL");
        redis.push("return ARGV[1]");
        redis.push("0");
        redis.push(req.http.value);
        redis.execute();
        set resp.http.eval-replied = redis.replied();
        set resp.http.eval = redis.get_reply();
        return (deliver);
    }
    if (req.url == "/sweep") {
        redis.command(req.http.cmd);
"#,
    );
    for i in 1..=MAX_ARGS {
        v.push_str(&format!(
            "        if (req.http.a{i}) {{ redis.push(req.http.a{i}); }}\n"
        ));
    }
    v.push_str(
        r#"        redis.execute();
        set resp.http.replied = redis.replied();
        set resp.http.error = redis.reply_is_error();
        # A load request's value in this reply: a reply that is not its own.
        if (redis.get_reply() ~ "lv:") {
            set resp.http.crossed = regsub(redis.get_reply(), "(?s)^.*?(lv:[a-z0-9:]+).*$", "\1");
        }
    }
    return (deliver);
}
"#,
    );
    v
}
