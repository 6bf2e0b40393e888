//! Fault suite: real varnishd + real redis-server processes under load, with
//! faults injected (Redis killed, frozen, pool exhausted, VCL churn, soak).
//!
//! ```text
//! cargo test --test faults                 # short scenarios (~2-3 min)
//! cargo test --test faults -- --ignored    # long ones: churn x200, 10 min soaks
//! cargo test --test faults -- s2           # a subset (substring of the name)
//! cargo test --release --test faults       # figures from a release build
//! ```
//!
//! Every trial starts its own redis-server (loopback, free port) and its own
//! `varnishd -F` (loopback, free port, `-n <dir>`), loads a generated VCL,
//! drives HTTP/1.1 keep-alive GETs at it from a built-in load driver (std
//! threads, fixed duration, per-request latency and outcome recorded), injects
//! the fault, then checks:
//!
//! * `MGT.child_panic` and `MGT.child_died` are 0 and the child is the same
//!   process as at start;
//! * no request hung past its deadline, every response is a 200 (the VCL
//!   falls back when `replied()` is false and says so in `x-redis`);
//! * nothing leaked: the child's thread count, its file descriptors other than
//!   Redis sockets (`/proc/<child>/fd`), its Redis sockets against the bound
//!   the configuration promises, and Redis's own `connected_clients`.
//!
//! Each trial prints its figures (requests, fallbacks, worst / p99 latency,
//! counters, fds / threads / RSS before and after). Trials run one at a time
//! (the figures are latencies on a small machine) unless `--test-threads` is
//! given.
//!
//! # Scenarios (each in private and shared mode unless said otherwise)
//! * `s1.kill-restart.*`: Redis SIGKILLed under load (20 clients), restarted
//!   2 s later on its port: every request answered (fallback while down),
//!   no fallback from `sickness_ttl` + 1 s after the restart on, a reply
//!   within the reconnect spacing cap (1 s) + 1 s of Redis answering PING,
//!   failed connection attempts bounded by the spacing (no storm), the
//!   counters reconcile with what the clients saw.
//! * `s2.freeze.*.retries{0,1}`: Redis SIGSTOPped for 5 s (50 clients, both
//!   timeouts 200 ms, shared pool of 4): every request within
//!   `(connection_timeout + command_timeout) x (1 + retries) + 50 ms`,
//!   no fallback once that long (plus the 1 s reconnect spacing cap) after
//!   SIGCONT.
//! * `s3.pool-exhaustion.*`: 200 clients, `max_connections=1`, fast commands
//!   then one in four a 10 ms `DEBUG SLEEP`: every request replied or timed
//!   out within the bound, `workers.blocked` counts (shared), replies in
//!   every 500 ms (shared; private mode has no admission control and is
//!   only reported in the slow phase).
//! * `s6.vcl-churn.20` (and `.200`, ignored): vcl.load / vcl.use /
//!   vcl.discard cycles of a VCL with a private and a shared database
//!   while 16 clients run: threads, fds and Redis connections do not grow,
//!   and varnishstat lists the REDIS.* counters of the live VCL only.
//! * `s7.soak.*` (ignored): `FAULTS_SOAK_SECS` of SET + GET + EVAL per
//!   request (16 clients): VmRSS and fds flat within 5 % after the warm-up,
//!   the heap (RssAnon) flat over the second half, Redis connections within
//!   the promised bound.
//!
//! varnishd runs with one fixed pool of 300 worker threads (a thread count
//! that does not move is a leak detector), `vsl_space=16M` (else VmRSS
//! grows by the log's pages for a while) and the VCL's C compiled at `-O0`
//! (a churn cycle is mostly that compile).
//!
//! # The VCL
//! One database object per trial (two in the churn), driven by URL:
//! `/<db>/set/<key>`, `/<db>/get/<key>`, `/<db>/eval/<key>` run one command,
//! `/<db>/mix/<key>` runs SET, GET and EVAL; `/<db>/stats` returns the
//! counters as `x-c-<name>` headers (dots as dashes) and the JSON as body;
//! `/ping` does not touch Redis. `x-r` lists each command's outcome: `1`
//! reply, `e` error reply, `0` no reply (the fallback).
//!
//! # Environment
//! * `VMOD_REDIS_SO`: use this .so as is (no build); otherwise `cargo build
//!   --lib` is run once, as in `tests/vtc.rs`.
//! * `FAULTS_SOAK_SECS` (default 600): length of each soak trial.
//! * `FAULTS_CHURN_LONG` (default 200): cycles of the long churn trial.
//! * `FAULTS_KEEP=1`: keep the temporary directory (logs, VCL, redis logs).

mod support;

use libtest_mimic::{Arguments, Failed, Trial};
use std::collections::HashMap;
use std::fs;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};
use support::{
    cleanup_all, find_cache_child, make_dir, proc_status, redis_cmd, register_pid, signal,
    stop_child, tail_file, unregister_pid, wait_ready, write_public, Res, Varnishd, Waited,
};
/// Worker threads of the varnishd child: one pool, fixed size, so that the
/// thread count is a clean leak detector and 200 clients never queue.
const WORKER_THREADS: u32 = 300;

fn main() {
    let mut args = Arguments::from_args();
    if args.test_threads.is_none() {
        args.test_threads = Some(1);
    }
    let _ = ctrlc::set_handler(|| {
        cleanup_all();
        std::process::exit(130);
    });
    let soak_secs = env_u64("FAULTS_SOAK_SECS", 600);
    let churn_long = env_u64("FAULTS_CHURN_LONG", 200) as usize;
    let mut trials = Vec::new();
    for mode in [Mode::Private, Mode::Shared, Mode::Pipelined] {
        trials.push(Trial::test(
            format!("s1.kill-restart.{}", mode.name()),
            move || s1_kill_restart(mode),
        ));
    }
    for mode in [Mode::Private, Mode::Shared, Mode::Pipelined] {
        for retries in [0, 1] {
            trials.push(Trial::test(
                format!("s2.freeze.{}.retries{retries}", mode.name()),
                move || s2_freeze(mode, retries),
            ));
        }
    }
    trials.push(Trial::test("s3.pool-exhaustion.shared", || {
        s3_pool_exhaustion(Mode::Shared)
    }));
    trials.push(Trial::test("s3.pool-exhaustion.private", || {
        s3_pool_exhaustion(Mode::Private)
    }));
    trials.push(Trial::test("s3.pool-exhaustion.pipelined", || {
        s3_pool_exhaustion(Mode::Pipelined)
    }));
    trials.push(Trial::test("s6.vcl-churn.20", || s6_vcl_churn(20)));
    trials.push(
        Trial::test(format!("s6.vcl-churn.{churn_long}"), move || {
            s6_vcl_churn(churn_long)
        })
        .with_ignored_flag(true),
    );
    for mode in [Mode::Private, Mode::Shared, Mode::Pipelined] {
        trials.push(
            Trial::test(format!("s7.soak.{}", mode.name()), move || {
                s7_soak(mode, Duration::from_secs(soak_secs))
            })
            .with_ignored_flag(true),
        );
    }
    let conclusion = libtest_mimic::run(&args, trials);
    cleanup_all();
    if let Some(base) = support::created_base_dir() {
        if keep() {
            eprintln!("faults: kept {}", base.display());
        } else {
            let _ = fs::remove_dir_all(base);
        }
    }
    conclusion.exit();
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn keep() -> bool {
    std::env::var_os("FAULTS_KEEP").is_some_and(|v| !v.is_empty() && v != "0")
}

// ---------------------------------------------------------------------------
// Every process we start is registered in `support` and stopped by PID on
// every way out.

/// Runs a command to its end, at most `bound` (then SIGKILL), and returns
/// (success, stdout + stderr).
fn run_bounded(cmd: &mut Command, bound: Duration) -> Res<(bool, String)> {
    let name = cmd.get_program().to_string_lossy().into_owned();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("run {name}: {e}"))?;
    let pid = child.id() as i32;
    register_pid(pid, &name);
    let mut out = child.stdout.take().expect("piped stdout");
    let mut err = child.stderr.take().expect("piped stderr");
    let out_reader = thread::spawn(move || {
        let mut s = Vec::new();
        let _ = out.read_to_end(&mut s);
        s
    });
    let err_reader = thread::spawn(move || {
        let mut s = Vec::new();
        let _ = err.read_to_end(&mut s);
        s
    });
    let deadline = Instant::now() + bound;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(5)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
        }
    };
    unregister_pid(pid);
    let mut text = String::from_utf8_lossy(&out_reader.join().unwrap_or_default()).into_owned();
    text.push_str(&String::from_utf8_lossy(
        &err_reader.join().unwrap_or_default(),
    ));
    match status {
        Some(status) => Ok((status.success(), text)),
        None => Err(format!(
            "{name} still running after {bound:?}: killed\n{text}"
        )),
    }
}

// ---------------------------------------------------------------------------
// /proc readings of the varnishd child

/// Socket inodes of the TCP connections whose remote port is `port`.
fn tcp_inodes_to(pid: i32, port: u16) -> Vec<u64> {
    let mut inodes = Vec::new();
    for table in ["tcp", "tcp6"] {
        let Ok(text) = fs::read_to_string(format!("/proc/{pid}/net/{table}")) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 10 {
                continue;
            }
            let remote_port = f[2]
                .rsplit_once(':')
                .and_then(|(_, p)| u16::from_str_radix(p, 16).ok());
            if remote_port == Some(port) {
                if let Ok(inode) = f[9].parse::<u64>() {
                    if inode != 0 {
                        inodes.push(inode);
                    }
                }
            }
        }
    }
    inodes
}

/// What a process holds right now.
#[derive(Clone, Copy, Debug, Default)]
struct Snapshot {
    /// Open file descriptors.
    fds: usize,
    /// Of which TCP sockets connected to the Redis port.
    redis_fds: usize,
    threads: u64,
    rss_kb: u64,
    /// Anonymous memory (the heap): VmRSS also counts the pages of the
    /// shared-memory log (VSL) as they get written to.
    anon_kb: u64,
    /// Redis `connected_clients` minus the probe's own connection.
    redis_clients: Option<u64>,
}

impl Snapshot {
    fn take(pid: i32, redis_port: u16) -> Snapshot {
        let inodes = tcp_inodes_to(pid, redis_port);
        let mut fds = 0;
        let mut redis_fds = 0;
        if let Ok(dir) = fs::read_dir(format!("/proc/{pid}/fd")) {
            for entry in dir.flatten() {
                fds += 1;
                let target = fs::read_link(entry.path()).unwrap_or_default();
                let target = target.to_string_lossy();
                if let Some(inode) = target
                    .strip_prefix("socket:[")
                    .and_then(|r| r.strip_suffix(']'))
                    .and_then(|i| i.parse::<u64>().ok())
                {
                    if inodes.contains(&inode) {
                        redis_fds += 1;
                    }
                }
            }
        }
        Snapshot {
            fds,
            redis_fds,
            threads: proc_status(pid, "Threads").unwrap_or(0),
            rss_kb: proc_status(pid, "VmRSS").unwrap_or(0),
            anon_kb: proc_status(pid, "RssAnon").unwrap_or(0),
            redis_clients: redis_info(redis_port, "clients", "connected_clients")
                .map(|n| n.saturating_sub(1)),
        }
    }

    /// File descriptors other than Redis sockets.
    fn other_fds(&self) -> usize {
        self.fds - self.redis_fds
    }
}

impl std::fmt::Display for Snapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "fds {} (redis {}), threads {}, rss {} kB (anon {} kB), redis connected_clients {}",
            self.fds,
            self.redis_fds,
            self.threads,
            self.rss_kb,
            self.anon_kb,
            self.redis_clients
                .map_or("?".to_string(), |n| n.to_string())
        )
    }
}

// ---------------------------------------------------------------------------
// Redis

fn redis_info(port: u16, section: &str, field: &str) -> Option<u64> {
    let info = redis_cmd(port, None, &["INFO", section]).ok()?;
    info.lines().find_map(|l| {
        l.strip_prefix(field)
            .and_then(|r| r.strip_prefix(':'))
            .and_then(|v| v.trim().parse().ok())
    })
}

struct Redis {
    dir: PathBuf,
    port: u16,
    child: Option<Child>,
    pid: i32,
}

impl Redis {
    /// Starts on a free port (tries a few).
    fn start(dir: &Path) -> Res<Redis> {
        let mut last = String::new();
        for _ in 0..5 {
            let mut redis = Redis {
                dir: dir.to_path_buf(),
                port: support::free_port()?,
                child: None,
                pid: 0,
            };
            match redis.spawn() {
                Ok(()) => return Ok(redis),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    fn log(&self) -> PathBuf {
        self.dir.join("redis.log")
    }

    /// Starts redis-server on `self.port` and waits (10 s at most) for PING.
    fn spawn(&mut self) -> Res<()> {
        let data = self.dir.join("redis.data");
        make_dir(&data)?;
        let mut cmd = support::redis_server(self.port, &data, &self.log());
        cmd.args(["--enable-debug-command", "yes"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let mut child = support::spawn(&mut cmd, "redis-server")?;
        self.pid = child.id() as i32;
        let port = self.port;
        let waited = wait_ready(
            &mut child,
            Duration::from_secs(10),
            Duration::from_millis(20),
            || redis_cmd(port, None, &["PING"]).is_ok_and(|r| r == "+PONG"),
        );
        let what = match waited {
            Waited::Ready => {
                self.child = Some(child);
                return Ok(());
            }
            Waited::Exited(status) => format!("exited ({status})"),
            Waited::TimedOut => {
                let _ = child.kill();
                let _ = child.wait();
                "not up after 10 s".to_string()
            }
        };
        unregister_pid(self.pid);
        Err(format!(
            "redis-server on port {port} {what}:\n{}",
            tail_file(&self.log(), 20)
        ))
    }

    fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
            unregister_pid(self.pid);
        }
    }

    fn freeze(&mut self) {
        signal(self.pid, libc::SIGSTOP);
    }

    fn thaw(&mut self) -> Res<()> {
        signal(self.pid, libc::SIGCONT);
        Ok(())
    }

    fn stop(&mut self) {
        if let Some(child) = self.child.take() {
            stop_child(child, "redis-server", Duration::from_secs(5));
        }
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.stop();
    }
}

// ---------------------------------------------------------------------------
// Varnish

struct Varnish {
    /// The manager and the child (cache process) found at start.
    varnishd: Varnishd,
    port: u16,
    workdir: PathBuf,
    log: PathBuf,
}

impl Varnish {
    fn start(dir: &Path, vcl: &str) -> Res<Varnish> {
        let vcl_path = dir.join("boot.vcl");
        write_public(&vcl_path, vcl)?;
        let workdir = dir.join("varnish");
        let log = dir.join("varnishd.log");
        let params = [
            "thread_pools=1".to_string(),
            format!("thread_pool_min={WORKER_THREADS}"),
            format!("thread_pool_max={WORKER_THREADS}"),
            "vcl_cooldown=1".to_string(),
            // A small log ring, fully written early on: otherwise VmRSS
            // grows by its pages for the first 80 MB of log.
            "vsl_space=16M".to_string(),
            // The generated C of a VCL, compiled without optimisation:
            // a VCL churn cycle is mostly this compile (3 s at -O2 here
            // under load). It changes nothing in the VMOD.
            "cc_command=exec gcc -O0 -pthread -fpic -shared -Wl,-x -o %o %s".to_string(),
        ];
        let mut args = vec!["-s".to_string(), "malloc,32m".to_string()];
        for p in params {
            args.push("-p".to_string());
            args.push(p);
        }
        let varnishd = Varnishd::start(
            &workdir,
            &vcl_path,
            &log,
            &args,
            |port| http_get(port, "/ping").is_ok_and(|r| r.status == 200),
            |_| {},
        )?;
        let varnish = Varnish {
            port: varnishd.port,
            varnishd,
            workdir,
            log,
        };
        // Let the pool reach its fixed size before anyone measures.
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline
            && varnish.stat("MAIN.threads").unwrap_or(0) < u64::from(WORKER_THREADS)
        {
            thread::sleep(Duration::from_millis(50));
        }
        Ok(varnish)
    }

    /// `varnishstat -1` values of the given fields.
    fn stats(&self, fields: &[&str]) -> Res<HashMap<String, u64>> {
        let mut cmd = Command::new("varnishstat");
        cmd.arg("-n").arg(&self.workdir).arg("-1");
        for f in fields {
            cmd.args(["-f", f]);
        }
        let (ok, out) = run_bounded(&mut cmd, Duration::from_secs(20))?;
        if !ok {
            return Err(format!("varnishstat failed: {out}"));
        }
        Ok(out
            .lines()
            .filter_map(|l| {
                let mut words = l.split_whitespace();
                let name = words.next()?;
                let value = words.next()?.parse().ok()?;
                Some((name.to_string(), value))
            })
            .collect())
    }

    fn stat(&self, field: &str) -> Option<u64> {
        self.stats(&[field]).ok()?.get(field).copied()
    }

    /// `varnishadm -n <workdir> ARGS`, 120 s at most.
    fn adm(&self, args: &[&str]) -> Res<String> {
        let mut cmd = Command::new("varnishadm");
        cmd.arg("-n")
            .arg(&self.workdir)
            .args(["-t", "100"])
            .args(args);
        let (ok, out) = run_bounded(&mut cmd, Duration::from_secs(120))?;
        if ok {
            Ok(out)
        } else {
            Err(format!("varnishadm {}: {out}", args.join(" ")))
        }
    }

    fn snapshot(&self, redis_port: u16) -> Snapshot {
        Snapshot::take(self.varnishd.child_pid, redis_port)
    }

    /// The checks that follow every scenario: no panic, no restart.
    fn check_child(&self, failures: &mut Vec<String>) -> String {
        let stats = match self.stats(&["MGT.child_panic", "MGT.child_died"]) {
            Ok(stats) => stats,
            Err(e) => {
                failures.push(e);
                return "varnishstat failed".into();
            }
        };
        let panic = stats.get("MGT.child_panic").copied();
        let died = stats.get("MGT.child_died").copied();
        if panic != Some(0) {
            failures.push(format!(
                "MGT.child_panic = {panic:?}; varnishd log:\n{}",
                tail_file(&self.log, 60)
            ));
        }
        if died != Some(0) {
            failures.push(format!("MGT.child_died = {died:?}"));
        }
        let child = find_cache_child(self.varnishd.manager_pid);
        if child != Some(self.varnishd.child_pid) {
            failures.push(format!(
                "varnishd child changed: {} at start, {child:?} now",
                self.varnishd.child_pid
            ));
        }
        format!(
            "MGT.child_panic {}, MGT.child_died {}",
            panic.map_or("?".into(), |v| v.to_string()),
            died.map_or("?".into(), |v| v.to_string())
        )
    }
}

// ---------------------------------------------------------------------------
// HTTP

struct Response {
    status: u16,
    headers: HashMap<String, String>,
}

/// Reads one HTTP/1.1 response (Content-Length bodies only: Varnish's
/// synthetic responses have one).
fn read_response(reader: &mut BufReader<TcpStream>) -> io::Result<Response> {
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    let status = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, format!("status {line:?}")))?;
    let mut headers = HashMap::new();
    loop {
        line.clear();
        if reader.read_line(&mut line)? == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        if let Some((name, value)) = l.split_once(':') {
            headers.insert(name.trim().to_ascii_lowercase(), value.trim().to_string());
        }
    }
    let len: usize = headers
        .get("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    // The body is read (the connection is kept) but not looked at.
    let mut body = vec![0; len];
    reader.read_exact(&mut body)?;
    Ok(Response { status, headers })
}

fn request(reader: &mut BufReader<TcpStream>, path: &str) -> io::Result<Response> {
    let req = format!("GET {path} HTTP/1.1\r\nHost: faults\r\n\r\n");
    reader.get_mut().write_all(req.as_bytes())?;
    read_response(reader)
}

fn connect(port: u16, timeout: Duration) -> io::Result<BufReader<TcpStream>> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    Ok(BufReader::new(stream))
}

/// One GET on a fresh connection, 10 s at most.
fn http_get(port: u16, path: &str) -> io::Result<Response> {
    let mut conn = connect(port, Duration::from_secs(10))?;
    request(&mut conn, path)
}

/// The counters of database `db` (`/<db>/stats`).
fn counters(port: u16, db: &str) -> Res<Counters> {
    let resp = http_get(port, &format!("/{db}/stats")).map_err(|e| format!("/{db}/stats: {e}"))?;
    if resp.status != 200 {
        return Err(format!("/{db}/stats: status {}", resp.status));
    }
    let mut values = HashMap::new();
    for name in COUNTERS {
        let header = format!("x-c-{}", name.replace('.', "-"));
        let value = resp
            .headers
            .get(&header)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| format!("/{db}/stats: no header {header}"))?;
        values.insert(*name, value);
    }
    Ok(Counters(values))
}

const COUNTERS: &[&str] = &[
    "connections.total",
    "connections.failed",
    "connections.dropped.error",
    "connections.dropped.hung_up",
    "connections.dropped.overflow",
    "connections.dropped.ttl",
    "connections.dropped.sick",
    "workers.blocked",
    "commands.total",
    "commands.failed",
    "commands.retried",
    "commands.error",
    "commands.noscript",
];

struct Counters(HashMap<&'static str, u64>);

impl Counters {
    fn get(&self, name: &str) -> u64 {
        self.0.get(name).copied().unwrap_or(0)
    }
}

impl std::fmt::Display for Counters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts: Vec<String> = COUNTERS
            .iter()
            .filter(|n| self.get(n) != 0)
            .map(|n| format!("{n} {}", self.get(n)))
            .collect();
        write!(f, "{}", parts.join(", "))
    }
}

// ---------------------------------------------------------------------------
// The load driver

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Outcome {
    /// 200, every command got a reply.
    Ok,
    /// 200, at least one command got no reply (the VCL fell back).
    Fallback,
    /// 200, an error reply and no missing reply.
    ErrorReply,
    /// Any other status.
    Http(u16),
    /// Connection refused / reset / closed.
    Io,
    /// No response within the deadline.
    Hung,
}

#[derive(Clone, Copy)]
struct Sample {
    /// Since the start of the load, µs.
    start_us: u64,
    latency_us: u64,
    outcome: Outcome,
    /// Commands that got no reply (`0` in `x-r`).
    missed: u8,
    /// Commands that got a reply (`1` or `e`).
    replied: u8,
    /// Index of the path in `LoadSpec::paths`.
    path: u8,
}

impl Sample {
    fn end_us(&self) -> u64 {
        self.start_us + self.latency_us
    }
}

struct LoadSpec {
    port: u16,
    clients: usize,
    duration: Duration,
    /// Cycled through by each client; `{c}` is the client's number.
    paths: Vec<String>,
    /// A request not answered within this is `Hung`.
    deadline: Duration,
}

struct Load {
    t0: Instant,
    stop: Arc<AtomicBool>,
    threads: Vec<thread::JoinHandle<Vec<Sample>>>,
}

/// Upper bound of requests per client, whatever the duration.
const MAX_REQUESTS_PER_CLIENT: usize = 5_000_000;

impl Load {
    fn start(spec: LoadSpec) -> Load {
        let t0 = Instant::now();
        let stop = Arc::new(AtomicBool::new(false));
        let end = t0 + spec.duration;
        let spec = Arc::new(spec);
        let threads = (0..spec.clients)
            .map(|c| {
                let spec = spec.clone();
                let stop = stop.clone();
                thread::Builder::new()
                    .name(format!("load-{c}"))
                    .stack_size(256 * 1024)
                    .spawn(move || client_loop(&spec, c, t0, end, &stop))
                    .expect("spawn load thread")
            })
            .collect();
        Load { t0, stop, threads }
    }

    /// Seconds since the load started.
    fn at(&self) -> f64 {
        self.t0.elapsed().as_secs_f64()
    }

    /// Sleeps until `secs` after the start of the load.
    fn sleep_until(&self, secs: f64) {
        let target = self.t0 + Duration::from_secs_f64(secs);
        let now = Instant::now();
        if target > now {
            thread::sleep(target - now);
        }
    }

    /// Waits for every client (each stops at the end of the duration, and
    /// each request is bounded by the deadline).
    fn finish(mut self) -> Report {
        let mut samples = Vec::new();
        for t in self.threads.drain(..) {
            samples.extend(t.join().unwrap_or_default());
        }
        samples.sort_by_key(|s| s.start_us);
        Report {
            samples,
            secs: self.t0.elapsed().as_secs_f64(),
        }
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn client_loop(
    spec: &LoadSpec,
    c: usize,
    t0: Instant,
    end: Instant,
    stop: &AtomicBool,
) -> Vec<Sample> {
    let paths: Vec<String> = spec
        .paths
        .iter()
        .map(|p| p.replace("{c}", &c.to_string()))
        .collect();
    let mut samples = Vec::with_capacity(4096);
    let mut conn: Option<BufReader<TcpStream>> = None;
    let mut i = c; // spread the commands across clients
    while Instant::now() < end
        && !stop.load(Ordering::Relaxed)
        && samples.len() < MAX_REQUESTS_PER_CLIENT
    {
        let path_index = i % paths.len();
        let path = &paths[path_index];
        i += 1;
        let started = Instant::now();
        let result = match conn.as_mut() {
            Some(c) => request(c, path),
            None => connect(spec.port, spec.deadline).and_then(|mut c| {
                let r = request(&mut c, path);
                conn = Some(c);
                r
            }),
        };
        let latency = started.elapsed();
        let (outcome, missed, replied) = match result {
            Ok(resp) if resp.status == 200 => {
                let r = resp.headers.get("x-r").map(String::as_str).unwrap_or("");
                let missed = r.matches('0').count() as u8;
                let replied = r.matches(['1', 'e']).count() as u8;
                let outcome = if missed > 0 {
                    Outcome::Fallback
                } else if r.contains('e') {
                    Outcome::ErrorReply
                } else {
                    Outcome::Ok
                };
                (outcome, missed, replied)
            }
            Ok(resp) => (Outcome::Http(resp.status), 0, 0),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                conn = None;
                (Outcome::Hung, 0, 0)
            }
            Err(_) => {
                conn = None;
                (Outcome::Io, 0, 0)
            }
        };
        if outcome == Outcome::Io {
            // Do not spin on a refused connection.
            thread::sleep(Duration::from_millis(10));
        }
        let outcome = if latency > spec.deadline && outcome != Outcome::Io {
            Outcome::Hung
        } else {
            outcome
        };
        samples.push(Sample {
            start_us: started.duration_since(t0).as_micros() as u64,
            latency_us: latency.as_micros() as u64,
            outcome,
            missed,
            replied,
            path: path_index as u8,
        });
    }
    samples
}

struct Report {
    samples: Vec<Sample>,
    secs: f64,
}

/// Figures of a set of samples.
struct Figures {
    requests: usize,
    ok: usize,
    fallback: usize,
    error_reply: usize,
    http: usize,
    io: usize,
    hung: usize,
    missed: u64,
    replied: u64,
    p50_ms: f64,
    p99_ms: f64,
    worst_ms: f64,
}

impl Report {
    fn window(&self, from_s: f64, to_s: f64) -> Vec<Sample> {
        let (from, to) = ((from_s * 1e6) as u64, (to_s * 1e6) as u64);
        self.samples
            .iter()
            .filter(|s| s.start_us >= from && s.start_us < to)
            .copied()
            .collect()
    }

    /// The requests answered before `to_s`.
    fn ended_before(&self, to_s: f64) -> Vec<Sample> {
        let to = (to_s * 1e6) as u64;
        self.samples
            .iter()
            .filter(|s| s.end_us() < to)
            .copied()
            .collect()
    }

    fn all(&self) -> Figures {
        figures(&self.samples)
    }

    /// When the last fallback was answered (load clock, s), if any was.
    fn last_fallback_end(&self) -> Option<f64> {
        self.samples
            .iter()
            .filter(|s| s.outcome == Outcome::Fallback)
            .map(|s| s.end_us() as f64 / 1e6)
            .reduce(f64::max)
    }

    /// Seconds from `t` until the first reply answered after it, if any.
    fn first_ok_after(&self, t: f64) -> Option<f64> {
        self.samples
            .iter()
            .filter(|s| s.outcome == Outcome::Ok && s.end_us() as f64 / 1e6 >= t)
            .map(|s| s.end_us() as f64 / 1e6 - t)
            .reduce(f64::min)
    }
}

fn figures(samples: &[Sample]) -> Figures {
    let mut lat: Vec<u64> = samples.iter().map(|s| s.latency_us).collect();
    lat.sort_unstable();
    let pct = |p: f64| -> f64 {
        if lat.is_empty() {
            return 0.0;
        }
        let i = ((lat.len() as f64 * p).ceil() as usize).clamp(1, lat.len()) - 1;
        lat[i] as f64 / 1000.0
    };
    let count = |o: fn(&Outcome) -> bool| samples.iter().filter(|s| o(&s.outcome)).count();
    Figures {
        requests: samples.len(),
        ok: count(|o| *o == Outcome::Ok),
        fallback: count(|o| *o == Outcome::Fallback),
        error_reply: count(|o| *o == Outcome::ErrorReply),
        http: count(|o| matches!(o, Outcome::Http(_))),
        io: count(|o| *o == Outcome::Io),
        hung: count(|o| *o == Outcome::Hung),
        missed: samples.iter().map(|s| u64::from(s.missed)).sum(),
        replied: samples.iter().map(|s| u64::from(s.replied)).sum(),
        p50_ms: pct(0.50),
        p99_ms: pct(0.99),
        worst_ms: lat.last().map_or(0.0, |&l| l as f64 / 1000.0),
    }
}

impl std::fmt::Display for Figures {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} requests (ok {}, fallback {}, error replies {}, other status {}, io errors {}, hung {}); latency p50 {:.2} ms, p99 {:.2} ms, worst {:.2} ms",
            self.requests,
            self.ok,
            self.fallback,
            self.error_reply,
            self.http,
            self.io,
            self.hung,
            self.p50_ms,
            self.p99_ms,
            self.worst_ms
        )
    }
}

/// The failures every scenario shares: answers that are not a 200 from
/// Varnish, and requests past their deadline.
fn check_answers(f: &Figures, failures: &mut Vec<String>) {
    if f.http + f.io + f.hung > 0 {
        failures.push(format!(
            "requests not answered with a 200: other status {}, io errors {}, hung {}",
            f.http, f.io, f.hung
        ));
    }
    if f.error_reply > 0 {
        failures.push(format!("{} requests got an error reply", f.error_reply));
    }
}

/// No request took longer than `bound`; `label` prefixes the failure.
fn check_worst(f: &Figures, bound: Duration, label: &str, failures: &mut Vec<String>) {
    if f.worst_ms > bound.as_secs_f64() * 1000.0 {
        failures.push(format!(
            "{label}worst request {:.1} ms, bound {} ms",
            f.worst_ms,
            bound.as_millis()
        ));
    }
}

/// The counters against what the clients saw: `commands.total` counts the
/// commands that got a reply, `commands.failed` every failed attempt, i.e.
/// one per command without a reply plus one per retry.
fn check_counters(f: &Figures, c: &Counters, failures: &mut Vec<String>) {
    if c.get("commands.total") != f.replied {
        failures.push(format!(
            "commands.total {} but {} commands got a reply",
            c.get("commands.total"),
            f.replied
        ));
    }
    if c.get("commands.failed") != f.missed + c.get("commands.retried") {
        failures.push(format!(
            "commands.failed {} but {} commands got no reply and {} were retried",
            c.get("commands.failed"),
            f.missed,
            c.get("commands.retried")
        ));
    }
}

// ---------------------------------------------------------------------------
// The VCL

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    Private,
    Shared,
    /// Shared, with [ext] `pipelining=true`.
    Pipelined,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Private => "private",
            Mode::Shared => "shared",
            Mode::Pipelined => "pipelined",
        }
    }

    fn shared(self) -> bool {
        self != Mode::Private
    }
}

#[derive(Clone)]
struct DbSpec {
    name: &'static str,
    mode: Mode,
    max_connections: u32,
    connection_timeout: u32,
    command_timeout: u32,
    retries: u32,
    sickness_ttl: u32,
}

impl DbSpec {
    fn new(name: &'static str, mode: Mode) -> DbSpec {
        DbSpec {
            name,
            mode,
            max_connections: if mode.shared() { 8 } else { 1 },
            connection_timeout: 500,
            command_timeout: 500,
            retries: 0,
            sickness_ttl: 1,
        }
    }

    /// The bound on one command: `(connection_timeout + command_timeout)
    /// x (1 + retries) + 50 ms`.
    fn command_bound(&self) -> Duration {
        Duration::from_millis(
            u64::from(self.connection_timeout + self.command_timeout) * u64::from(1 + self.retries)
                + 50,
        )
    }
}

fn vcl(so: &Path, redis_port: u16, dbs: &[DbSpec], comment: &str) -> String {
    let mut v = format!(
        "vcl 4.1;\n# {comment}\nimport redis from \"{}\";\nbackend default none;\n\nsub vcl_init {{\n",
        so.display()
    );
    for db in dbs {
        v.push_str(&format!(
            "    new {} = redis.db(location = \"127.0.0.1:{redis_port}\", type = master,\n        shared_connections = {}, max_connections = {},\n        connection_timeout = {}, command_timeout = {},\n        max_command_retries = {}, sickness_ttl = {}{});\n",
            db.name,
            db.mode.shared(),
            db.max_connections,
            db.connection_timeout,
            db.command_timeout,
            db.retries,
            db.sickness_ttl,
            if db.mode == Mode::Pipelined {
                ", pipelining = true"
            } else {
                ""
            }
        ));
    }
    v.push_str(
        r#"}

sub vcl_recv {
    return (synth(200));
}

sub vcl_synth {
    set resp.http.Content-Type = "text/plain";
    set resp.http.x-r = "r";
    if (req.url == "/ping") {
        synthetic("pong");
        return (deliver);
    }
    set req.http.x-key = "fault:" + regsub(req.url, "^/[^/]*/[^/]*/?", "");
"#,
    );
    for db in dbs {
        let n = db.name;
        let record = format!(
            r#"            if ({n}.replied() && !{n}.reply_is_error()) {{
                set resp.http.x-r = resp.http.x-r + "1";
            }} elsif ({n}.replied()) {{
                set resp.http.x-r = resp.http.x-r + "e";
            }} else {{
                set resp.http.x-r = resp.http.x-r + "0";
            }}
"#
        );
        v.push_str(&format!("    if (req.url ~ \"^/{n}/stats\") {{\n"));
        for c in COUNTERS {
            v.push_str(&format!(
                "        set resp.http.x-c-{} = {n}.counter(\"{c}\");\n",
                c.replace('.', "-")
            ));
        }
        v.push_str(&format!(
            "        synthetic({n}.stats());\n        return (deliver);\n    }}\n"
        ));
        v.push_str(&format!("    if (req.url ~ \"^/{n}/\") {{\n"));
        v.push_str(&format!(
            "        if (req.url ~ \"^/{n}/(set|mix)/\") {{\n            {n}.command(\"SET\");\n            {n}.push(req.http.x-key);\n            {n}.push(req.url);\n            {n}.execute();\n{record}        }}\n"
        ));
        v.push_str(&format!(
            "        if (req.url ~ \"^/{n}/(get|mix)/\") {{\n            {n}.command(\"GET\");\n            {n}.push(req.http.x-key);\n            {n}.execute();\n{record}        }}\n"
        ));
        v.push_str(&format!(
            "        if (req.url ~ \"^/{n}/slow/\") {{\n            {n}.command(\"DEBUG\");\n            {n}.push(\"SLEEP\");\n            {n}.push(\"0.01\");\n            {n}.execute();\n{record}        }}\n"
        ));
        v.push_str(&format!(
            "        if (req.url ~ \"^/{n}/(eval|mix)/\") {{\n            {n}.command(\"EVAL\");\n            {n}.push({{\"return redis.call('INCR', KEYS[1])\"}});\n            {n}.push(\"1\");\n            {n}.push(req.http.x-key + \":n\");\n            {n}.execute();\n{record}        }}\n    }}\n"
        ));
    }
    v.push_str(
        r#"    if (resp.http.x-r ~ "0") {
        # Redis did not answer: fall back, still a 200.
        set resp.http.x-redis = "fallback";
        synthetic("fallback");
    } else {
        set resp.http.x-redis = "yes";
        synthetic("ok");
    }
    return (deliver);
}
"#,
    );
    v
}

fn one_command_paths(db: &str) -> Vec<String> {
    ["set", "get", "eval"]
        .iter()
        .map(|op| format!("/{db}/{op}/c{{c}}"))
        .collect()
}

/// `varnishlog -g raw -i VCL_Error` running for the whole trial.
struct ErrorLog {
    child: Option<Child>,
    path: PathBuf,
}

impl ErrorLog {
    fn start(varnish: &Varnish, dir: &Path) -> Res<ErrorLog> {
        let path = dir.join("vcl_error.log");
        let out = fs::File::create(&path).map_err(|e| e.to_string())?;
        let child = support::spawn(
            Command::new("varnishlog")
                .arg("-n")
                .arg(&varnish.workdir)
                .args(["-g", "raw", "-i", "VCL_Error"])
                .stdin(Stdio::null())
                .stdout(out)
                .stderr(Stdio::null()),
            "varnishlog",
        )?;
        // It reads from the head of the log: give it a moment to attach.
        thread::sleep(Duration::from_millis(300));
        Ok(ErrorLog {
            child: Some(child),
            path,
        })
    }

    fn stop(&mut self) {
        if let Some(child) = self.child.take() {
            // Let it flush what it read last.
            thread::sleep(Duration::from_millis(300));
            stop_child(child, "varnishlog", Duration::from_secs(5));
        }
    }

    /// Distinct messages (numbers masked) with their count, most frequent
    /// first, and one example of each.
    fn summary(&mut self) -> Vec<String> {
        self.stop();
        let text = fs::read_to_string(&self.path).unwrap_or_default();
        let mut kinds: Vec<(String, usize, String)> = Vec::new();
        for line in text.lines() {
            let Some(msg) = line.split_once("VCL_Error").map(|(_, m)| m.trim()) else {
                continue;
            };
            let key: String = msg
                .chars()
                .map(|c| if c.is_ascii_digit() { '#' } else { c })
                .collect();
            match kinds.iter_mut().find(|(k, _, _)| *k == key) {
                Some(kind) => kind.1 += 1,
                None => kinds.push((key, 1, msg.to_string())),
            }
        }
        kinds.sort_by_key(|k| std::cmp::Reverse(k.1));
        kinds
            .into_iter()
            .take(12)
            .map(|(_, n, example)| format!("x{n}: {example}"))
            .collect()
    }
}

impl Drop for ErrorLog {
    fn drop(&mut self) {
        self.stop();
    }
}

/// What [`Setup::disrupt`] saw.
struct Disruption {
    report: Report,
    /// The child 0.3 s before the disruption, and settled after the load.
    before: Snapshot,
    after: Snapshot,
    counters: Counters,
    /// Load clock (s): disruption applied, restore begun, restore done.
    started: f64,
    restoring: f64,
    restored: f64,
}

/// Redis, varnishd with the VCL of `dbs`, and the failures so far.
struct Setup {
    name: String,
    redis: Redis,
    varnish: Varnish,
    /// `varnishlog -i VCL_Error` of the whole trial.
    errlog: ErrorLog,
    /// The child once started, before any load.
    idle: Snapshot,
    failures: Vec<String>,
}

impl Setup {
    fn start(name: &str, dbs: &[DbSpec]) -> Res<Setup> {
        let so = support::vmod_so()?;
        let dir = support::trial_dir(name)?;
        let redis = Redis::start(&dir)?;
        let varnish = Varnish::start(&dir, &vcl(&so, redis.port, dbs, "boot"))?;
        // One request through every path first, so that what Varnish opens
        // lazily is open before the baseline is taken.
        for db in dbs {
            let _ = http_get(varnish.port, &format!("/{}/stats", db.name));
        }
        thread::sleep(Duration::from_millis(200));
        let idle = varnish.snapshot(redis.port);
        let errlog = ErrorLog::start(&varnish, &dir)?;
        let setup = Setup {
            name: name.to_string(),
            redis,
            varnish,
            errlog,
            idle,
            failures: Vec::new(),
        };
        setup.say(format!("child idle: {idle}"));
        Ok(setup)
    }

    fn say(&self, line: impl AsRef<str>) {
        println!("[{}] {}", self.name, line.as_ref());
    }

    fn check(&mut self, ok: bool, what: impl FnOnce() -> String) {
        if !ok {
            self.failures.push(what());
        }
    }

    fn snapshot(&self) -> Snapshot {
        self.varnish.snapshot(self.redis.port)
    }

    /// Runs `load`, applies `disrupt` to Redis `at` s into it and `restore`
    /// `lasting` s later, waits for the load to end, and takes what the
    /// checks need (a failed `restore` is reported once the load is over).
    fn disrupt(
        &mut self,
        load: LoadSpec,
        at: f64,
        lasting: f64,
        disrupt: impl FnOnce(&mut Redis),
        restore: impl FnOnce(&mut Redis) -> Res<()>,
    ) -> Res<Disruption> {
        let load = Load::start(load);
        load.sleep_until(at - 0.3);
        let before = self.snapshot();
        load.sleep_until(at);
        let started = load.at();
        disrupt(&mut self.redis);
        load.sleep_until(started + lasting);
        let restoring = load.at();
        let restore_result = restore(&mut self.redis);
        let restored = load.at();
        let report = load.finish();
        restore_result?;
        thread::sleep(Duration::from_millis(300));
        let after = self.settled_snapshot();
        let counters = counters(self.varnish.port, "db")?;
        Ok(Disruption {
            report,
            before,
            after,
            counters,
            started,
            restoring,
            restored,
        })
    }

    /// Waits until Redis has caught up with the connections the child closed
    /// (both counts agree), 3 s at most, and returns the snapshot.
    fn settled_snapshot(&self) -> Snapshot {
        let deadline = Instant::now() + Duration::from_secs(3);
        loop {
            let snap = self.snapshot();
            if snap.redis_clients == Some(snap.redis_fds as u64) || Instant::now() >= deadline {
                return snap;
            }
            thread::sleep(Duration::from_millis(50));
        }
    }

    /// Leak checks after a scenario, against the idle child before any
    /// load: threads back to the same count, fds other than Redis sockets
    /// back to the same count (a little slack for sessions Varnish has not
    /// closed yet), Redis connections within `bound` and seen alike by
    /// Varnish and Redis.
    fn check_leaks(&mut self, after: &Snapshot, bound: usize) {
        let before = self.idle;
        self.check_threads_fds(&before, after, "");
        self.check(after.redis_fds <= bound, || {
            format!(
                "child holds {} Redis connections, bound {bound}",
                after.redis_fds
            )
        });
        self.check(after.redis_clients == Some(after.redis_fds as u64), || {
            format!(
                "Redis sees {:?} clients, the child holds {} sockets to it",
                after.redis_clients, after.redis_fds
            )
        });
    }

    /// The child's thread count the same as `before`, its fds other than
    /// Redis sockets at most 2 more (sessions Varnish has not closed yet).
    /// `what` goes into the messages.
    fn check_threads_fds(&mut self, before: &Snapshot, after: &Snapshot, what: &str) {
        self.check(after.threads == before.threads, || {
            format!(
                "child threads{what}: {} before, {} after",
                before.threads, after.threads
            )
        });
        self.check(after.other_fds() <= before.other_fds() + 2, || {
            format!(
                "child fds other than Redis sockets{what}: {} before, {} after",
                before.other_fds(),
                after.other_fds()
            )
        });
    }

    /// After a scenario: a lone client gets replies to every command, and
    /// is never counted in `workers.blocked` (the pool's count of workers
    /// in it came back down).
    fn check_lone_client(&mut self, db: &str) -> Res<()> {
        let blocked = counters(self.varnish.port, db)?.get("workers.blocked");
        let mut conn = connect(self.varnish.port, Duration::from_secs(5))
            .map_err(|e| format!("connect: {e}"))?;
        let mut bad = Vec::new();
        for i in 0..30 {
            let resp = request(&mut conn, &format!("/{db}/mix/lone"))
                .map_err(|e| format!("lone client, request {i}: {e}"))?;
            let r = resp.headers.get("x-r").cloned().unwrap_or_default();
            if resp.status != 200 || r != "r111" {
                bad.push(format!("{} {r}", resp.status));
            }
        }
        let blocked_after = counters(self.varnish.port, db)?.get("workers.blocked");
        self.say(format!(
            "lone client after the scenario: 30 x (SET, GET, EVAL), {} not fully answered, workers.blocked +{}",
            bad.len(),
            blocked_after - blocked
        ));
        self.check(bad.is_empty(), || {
            format!("lone client after the scenario: {bad:?}")
        });
        self.check(blocked_after == blocked, || {
            format!(
                "a lone client was counted blocked {} times",
                blocked_after - blocked
            )
        });
        Ok(())
    }

    fn finish(mut self) -> Result<(), Failed> {
        let status = self.varnish.check_child(&mut self.failures);
        for line in self.errlog.summary() {
            self.say(format!("VCL_Error {line}"));
        }
        self.say(status);
        if self.failures.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "{} check(s) failed:\n- {}",
                self.failures.len(),
                self.failures.join("\n- ")
            )
            .into())
        }
    }
}

/// The connections a database may hold: shared, its pool; private, one per
/// worker thread.
fn connection_bound(db: &DbSpec) -> usize {
    match db.mode {
        Mode::Shared => db.max_connections as usize,
        // The multiplexed connections, and as many ordinary ones for the
        // commands that cannot share one.
        Mode::Pipelined => 2 * db.max_connections as usize,
        Mode::Private => (WORKER_THREADS * db.max_connections) as usize,
    }
}

fn ms(secs: f64) -> String {
    format!("{:.0} ms", secs * 1000.0)
}

// ---------------------------------------------------------------------------
// Scenario 1: Redis SIGKILLed under load, restarted 2 s later on its port.

fn s1_kill_restart(mode: Mode) -> Result<(), Failed> {
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

// ---------------------------------------------------------------------------
// Scenario 2: Redis SIGSTOPped for 5 s under load.

fn s2_freeze(mode: Mode, retries: u32) -> Result<(), Failed> {
    let mut db = DbSpec::new("db", mode);
    db.max_connections = if mode.shared() { 4 } else { 1 };
    db.connection_timeout = 200;
    db.command_timeout = 200;
    db.retries = retries;
    let mut s = Setup::start(
        &format!("s2-{}-r{retries}", mode.name()),
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
        "{clients} clients, {:.1} s; connection_timeout {} ms, command_timeout {} ms, retries {retries}, {}; bound per command {} ms; SIGSTOP at {stopped:.2} s, SIGCONT at {continued:.2} s",
        report.secs,
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

// ---------------------------------------------------------------------------
// Scenario 3: pool exhaustion, 200 clients.

fn s3_pool_exhaustion(mode: Mode) -> Result<(), Failed> {
    let mut db = DbSpec::new("db", mode);
    db.max_connections = 1;
    db.connection_timeout = 300;
    db.command_timeout = 300;
    let mut s = Setup::start(&format!("s3-{}", mode.name()), std::slice::from_ref(&db))?;
    let bound = db.command_bound();
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
    // Phase 1: fast commands. Phase 2: one command in four is a 10 ms
    // `DEBUG SLEEP` (Redis is single-threaded: it serves at most ~100 of
    // them a second), so that waits run into the timeouts.
    for (phase, paths) in [
        ("fast commands", one_command_paths("db")),
        (
            "1 in 4 is DEBUG SLEEP 0.01",
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
        check_worst(&all, bound, &format!("{phase}: "), &mut s.failures);
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

// ---------------------------------------------------------------------------
// Scenario 6: VCL churn while traffic runs.

fn s6_vcl_churn(cycles: usize) -> Result<(), Failed> {
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
    let dbs = [private.clone(), shared.clone()];
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
        paths: vec!["/priv/mix/c{c}".into(), "/shared/mix/c{c}".into()],
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
    s.say(format!(
        "{cycles} cycles of vcl.load / vcl.use / vcl.discard in {churn_secs:.1} s ({:.2} s each), {clients} clients on /priv/mix and /shared/mix (SET, GET, EVAL each)",
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
    // shared one, its pool.
    let need = clients + shared.max_connections as usize;
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
    s.finish()
}

// ---------------------------------------------------------------------------
// Scenario 7: soak.

fn s7_soak(mode: Mode, duration: Duration) -> Result<(), Failed> {
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
        // VmRSS and fds: flat after the warm-up (the issue's criterion).
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
