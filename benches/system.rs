//! System benchmark: our VMOD side by side with the C VMOD (Debian package
//! `varnish-redis`) on the workloads of issue 3 (seeds 000, 001, 003).
//!
//! ```sh
//! cargo bench --bench system                 # full run (about 25 minutes)
//! cargo bench --bench system -- --quick      # development run (about 9 minutes)
//! cargo bench --bench system -- --only s1    # a subset: s1, s2, s3 (comma-separated)
//! cargo bench --bench system -- --help       # every option
//! ```
//!
//! It installs nothing: it first checks for varnishd, varnishstat, the
//! `varnish-redis` package, redis-server, redis-benchmark, wrk (and ab when
//! `--s1-client ab`), and prints the `apt-get install` line for what is
//! missing. Then it
//! 1. builds ours with `cargo build --release --lib` and copies the .so into
//!    a fresh 0755 directory under `$TMPDIR` (varnishd drops privileges);
//! 2. starts one `redis-server --save "" --appendonly no` on a free loopback
//!    port and a UNIX socket;
//! 3. per configuration, starts `varnishd -F -a 127.0.0.1:<free port> -n
//!    <tmpdir> -f <vcl>` (all `-p` parameters at their defaults) loading ours
//!    (`import redis from "<abs path>";`), loads it with wrk, stops it, then
//!    the same with the C VMOD (`import redis;`): ours, theirs, ours,
//!    theirs... so that machine drift hits both alike;
//! 4. writes `benches/results/<date>-<host>.md` (`-quick.md` with `--quick`,
//!    `-custom.md` with any other option)
//!    with the machine, versions, exact commands, every figure and the
//!    ratios ours/theirs, and two SVG plots next to it (`...-s1.svg`,
//!    `...-s2.svg`).
//!
//! Every process it starts is stopped by PID at the end, on failure, on a
//! panic, and on Ctrl-C / SIGTERM. Traffic stays on 127.0.0.1.
//!
//! Workloads:
//! * S1 (seed 001, VMOD overhead): `vcl_synth` runs N = 0, 1, 2, 4, 8
//!   commands of one kind (SET, GET, the EVAL script), each followed by
//!   `free()`, private connections, `max_connections=1`; one VCL per VMOD
//!   holds every cell, selected by URL. Closed loop, one client
//!   (`wrk -t1 -c1`), 1 s warm-up per cell; both varnishd run side by side
//!   and each cell is measured on ours then theirs, back to back. Per cell:
//!   ms per request and the varnishd child's CPU (utime + stime of
//!   `/proc/<child>/stat`) per request; per command kind: the slopes over N (least squares); the raw
//!   Redis round trip of the same repetition (`redis-benchmark -c 1 -t
//!   set,get`, p50, and `EVALSHA` of the same script). Repeated
//!   (`--reps`, default 5, 3 s per cell) and reported as median and spread.
//! * S2 (seed 000, private vs shared): SET + GET + EVAL with the seed's reply
//!   checks, `wrk -t2 -c400 -d20s` after a 2 s warm-up; columns: no Redis
//!   (the VMOD loaded, no command), private, shared with max_connections in
//!   {1000, 400, 100, 25, 10, 4, 2, 1}. Reports req/s, non-2xx, MAIN.threads
//!   and Redis `connected_clients` sampled mid-run, Redis
//!   `total_connections_received` delta, `workers.blocked` from `db.stats()`,
//!   the child's RSS after the run and its CPU per request.
//! * S3 (seed 003, connections): the S2 load on private and shared(10), TCP
//!   vs UNIX socket location, `connection_ttl` 0 vs 1 s.
//!
//! Environment: `TMPDIR` (where the temporary directory goes),
//! `CARGO` (the cargo that builds the .so; set by `cargo bench`).

#[path = "../tests/support/mod.rs"]
mod support;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command as Process, Stdio};
use std::sync::Mutex;
use std::thread::sleep;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use support::{
    cleanup_all, make_dir, spawn, stop_child, unregister_pid, wait_ready, Res, Varnishd, Waited,
};

const THEIRS_PKG: &str = "varnish-redis";
const S1_NS: [u32; 5] = [0, 1, 2, 4, 8];
const S1_CMDS: [&str; 3] = ["SET", "GET", "EVAL"];
const SHARED_MAX: [u32; 8] = [1000, 400, 100, 25, 10, 4, 2, 1];
/// The script of the seeds' EVAL, byte for byte as the seed VCL pushes it.
const SCRIPT: &str = "
            redis.call('SET', KEYS[1], ARGV[1]);
            redis.call('EXPIRE', KEYS[1], ARGV[2]);
        ";

// ---------------------------------------------------------------------------
// Options

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum S1Client {
    Wrk,
    Ab,
}

#[derive(Debug)]
struct Opts {
    quick: bool,
    s1: bool,
    s2: bool,
    s3: bool,
    reps: usize,
    s1_secs: u32,
    s1_warm: u32,
    s2_secs: u32,
    s2_warm: u32,
    s2_threads: u32,
    s2_conns: u32,
    s2_reps: usize,
    s2_columns: Option<Vec<Mode>>,
    rb_requests: u32,
    s1_client: S1Client,
    out_dir: PathBuf,
    ours_so: Option<PathBuf>,
    /// The options as given (for the report), `--bench` left out.
    given: Vec<String>,
}

const USAGE: &str = "\
usage: cargo bench --bench system -- [options]
  --quick             S1: 2 reps x 2 s per cell; S2/S3: -d5s, 1 s warm-up
  --only LIST         s1,s2,s3 (default: all)
  --reps N            S1 repetitions (default 5, quick 2)
  --s1-secs N         S1 seconds per cell (default 3, quick 2)
  --s2-secs N         S2/S3 seconds per run (default 20, quick 5)
  --s2-conns N        S2/S3 wrk connections (default 400; 1: one client, one wrk thread)
  --s2-reps N         S2/S3 repetitions of every column, alternated (default 1)
  --s2-columns LIST   S2 columns, e.g. private,10,1,p1 (none, private, a shared
                      max_connections, or pN: ours pipelined on N connections, theirs
                      shared N; default: none,private,1000,400,100,25,10,4,2,1)
  --s1-client wrk|ab  S1 load generator (default wrk: wrk -t1 -c1; ab: ab -k -c 1 -t)
  --out DIR           report directory (default benches/results)
  --ours PATH         use this libvmod_redis.so instead of building one
";

fn parse_opts() -> Res<Option<Opts>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if !args.iter().any(|a| a == "--bench") {
        // `cargo test --benches` / `cargo test --all-targets` run bench
        // binaries without `--bench`: a 25-minute system run is not a test.
        println!("system: skipped (a benchmark: run it with `cargo bench --bench system`)");
        return Ok(None);
    }
    let quick = args.iter().any(|a| a == "--quick");
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut o = Opts {
        quick,
        s1: true,
        s2: true,
        s3: true,
        reps: if quick { 2 } else { 5 },
        s1_secs: if quick { 2 } else { 3 },
        s1_warm: 1,
        s2_secs: if quick { 5 } else { 20 },
        s2_warm: if quick { 1 } else { 2 },
        s2_threads: 2,
        s2_conns: 400,
        s2_reps: 1,
        s2_columns: None,
        rb_requests: if quick { 5_000 } else { 30_000 },
        s1_client: S1Client::Wrk,
        out_dir: manifest.join("benches/results"),
        ours_so: None,
        given: args.iter().filter(|a| *a != "--bench").cloned().collect(),
    };
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut value = |name: &str| {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{name} needs a value\n{USAGE}"))
        };
        let number = |name: &str, v: String| {
            v.parse::<u32>()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| format!("{name}: not a positive number: {v}"))
        };
        match arg.as_str() {
            "--bench" | "--quick" => {}
            "--help" | "-h" => {
                print!("{USAGE}");
                return Ok(None);
            }
            "--only" => {
                let list = value("--only")?;
                o.s1 = false;
                o.s2 = false;
                o.s3 = false;
                for part in list.split(',') {
                    match part.trim().to_ascii_lowercase().as_str() {
                        "s1" => o.s1 = true,
                        "s2" => o.s2 = true,
                        "s3" => o.s3 = true,
                        other => return Err(format!("--only: unknown workload {other}")),
                    }
                }
            }
            "--reps" => o.reps = number("--reps", value("--reps")?)? as usize,
            "--s1-secs" => o.s1_secs = number("--s1-secs", value("--s1-secs")?)?,
            "--s2-secs" => o.s2_secs = number("--s2-secs", value("--s2-secs")?)?,
            "--s2-conns" => {
                o.s2_conns = number("--s2-conns", value("--s2-conns")?)?;
                // wrk needs a connection per thread at least.
                o.s2_threads = o.s2_threads.min(o.s2_conns.max(1));
            }
            "--s2-reps" => o.s2_reps = number("--s2-reps", value("--s2-reps")?)? as usize,
            "--s2-columns" => {
                let mut modes = Vec::new();
                for part in value("--s2-columns")?.split(',') {
                    modes.push(match part.trim() {
                        "none" => Mode::NoRedis,
                        "private" => Mode::Private,
                        p if p.starts_with('p') => Mode::Pipelined(
                            p[1..]
                                .parse()
                                .ok()
                                .filter(|n| *n > 0)
                                .ok_or_else(|| format!("--s2-columns: unknown column {p}"))?,
                        ),
                        n => Mode::Shared(
                            n.parse()
                                .ok()
                                .filter(|n| *n > 0)
                                .ok_or_else(|| format!("--s2-columns: unknown column {n}"))?,
                        ),
                    });
                }
                o.s2_columns = Some(modes);
            }
            "--s1-client" => {
                o.s1_client = match value("--s1-client")?.as_str() {
                    "wrk" => S1Client::Wrk,
                    "ab" => S1Client::Ab,
                    other => return Err(format!("--s1-client: wrk or ab, not {other}")),
                }
            }
            "--out" => o.out_dir = PathBuf::from(value("--out")?),
            "--ours" => o.ours_so = Some(PathBuf::from(value("--ours")?)),
            other => return Err(format!("unknown option {other}\n{USAGE}")),
        }
    }
    Ok(Some(o))
}

// ---------------------------------------------------------------------------
// Cleanup: every process we start and the temporary directory are registered
// in `support`, stopped and removed by PID on every way out.

/// Cleans up when `main` returns or unwinds.
struct CleanupGuard;

impl Drop for CleanupGuard {
    fn drop(&mut self) {
        cleanup_all();
    }
}

/// Waits for a child we spawned and forgets its PID.
fn reap(mut child: Child) -> Res<std::process::Output> {
    let pid = child.id() as i32;
    let mut stdout = Vec::new();
    let mut stderr = Vec::new();
    if let Some(mut out) = child.stdout.take() {
        let _ = out.read_to_end(&mut stdout);
    }
    if let Some(mut err) = child.stderr.take() {
        let _ = err.read_to_end(&mut stderr);
    }
    let status = child.wait().map_err(|e| e.to_string())?;
    unregister_pid(pid);
    Ok(std::process::Output {
        status,
        stdout,
        stderr,
    })
}

// ---------------------------------------------------------------------------
// The commands that were run, for the report (first of each kind).

static COMMANDS: Mutex<Vec<(String, String)>> = Mutex::new(Vec::new());

fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:=,@%+".contains(c))
    {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

fn command_line(cmd: &Process) -> String {
    let mut line = shell_quote(&cmd.get_program().to_string_lossy());
    for arg in cmd.get_args() {
        line.push(' ');
        line.push_str(&shell_quote(&arg.to_string_lossy()));
    }
    line
}

fn record(kind: &str, cmd: &Process) {
    let mut commands = COMMANDS.lock().unwrap_or_else(|e| e.into_inner());
    if !commands.iter().any(|(k, _)| k == kind) {
        commands.push((kind.to_owned(), command_line(cmd)));
    }
}

/// Runs a short command to completion and returns its stdout + stderr.
fn run_capture(cmd: &mut Process, name: &str) -> Res<(bool, String)> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let out = reap(spawn(cmd, name)?)?;
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    Ok((out.status.success(), text))
}

// ---------------------------------------------------------------------------
// Preflight

fn find_in_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/usr/bin", "/sbin"].map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

fn dpkg_version(pkg: &str) -> Option<String> {
    let out = Process::new("dpkg-query")
        .args(["-W", "-f=${Status}|${Version}", pkg])
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let (status, version) = text.split_once('|')?;
    status
        .ends_with("installed")
        .then(|| version.trim().to_owned())
}

fn theirs_so() -> Option<PathBuf> {
    let out = Process::new("dpkg-query")
        .args(["-L", THEIRS_PKG])
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find(|l| l.ends_with("/libvmod_redis.so"))
        .map(PathBuf::from)
        .filter(|p| p.is_file())
}

fn preflight(o: &Opts) -> Res<PathBuf> {
    let mut tools = vec![
        ("varnishd", "varnish"),
        ("varnishstat", "varnish"),
        ("redis-server", "redis-server"),
        ("redis-benchmark", "redis-tools"),
        ("wrk", "wrk"),
    ];
    if o.s1 && o.s1_client == S1Client::Ab {
        tools.push(("ab", "apache2-utils"));
    } else if find_in_path("ab").is_none() {
        eprintln!(
            "system: note: ab not found (apt-get install -y apache2-utils); \
             only needed with --s1-client ab"
        );
    }
    let mut missing: Vec<String> = Vec::new();
    let mut pkgs: Vec<&str> = Vec::new();
    for (tool, pkg) in tools {
        if find_in_path(tool).is_none() {
            missing.push(format!("{tool} (package {pkg})"));
            if !pkgs.contains(&pkg) {
                pkgs.push(pkg);
            }
        }
    }
    let theirs = theirs_so();
    if dpkg_version(THEIRS_PKG).is_none() || theirs.is_none() {
        missing.push(format!(
            "the C VMOD (package {THEIRS_PKG}, libvmod_redis.so)"
        ));
        pkgs.push(THEIRS_PKG);
    }
    if !missing.is_empty() {
        return Err(format!(
            "missing: {}\nnothing is installed automatically; as root run:\n  \
             apt-get update && apt-get install -y {}",
            missing.join(", "),
            pkgs.join(" ")
        ));
    }
    Ok(theirs.expect("checked above"))
}

/// Builds ours in release mode and returns the cdylib's path.
fn build_ours() -> Res<PathBuf> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let mut cmd = Process::new(cargo);
    cmd.args([
        "build",
        "--release",
        "--lib",
        "--message-format=json-render-diagnostics",
    ])
    .current_dir(env!("CARGO_MANIFEST_DIR"))
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::inherit());
    COMMANDS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(("build ours".into(), "cargo build --release --lib".into()));
    eprintln!("system: {}", command_line(&cmd));
    let out = reap(spawn(&mut cmd, "cargo build")?)?;
    if !out.status.success() {
        return Err("cargo build --release --lib failed".into());
    }
    support::artifact_path(&String::from_utf8_lossy(&out.stdout))
        .ok_or_else(|| "cargo build did not report libvmod_redis.so".into())
}

// ---------------------------------------------------------------------------
// Small clients: HTTP GET and RESP, on loopback.

/// `GET path` with `Connection: close`: (status, body).
fn http_get(port: u16, path: &str) -> Res<(u16, String)> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| e.to_string())?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&raw);
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("bad HTTP response: {:.200}", text))?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Ok((status, body))
}

/// A RESP reply; the payloads only show through `Debug` in error messages.
#[derive(Debug)]
#[allow(dead_code)]
enum Resp {
    Simple(String),
    Error(String),
    Int(i64),
    Bulk(Option<String>),
    Array(Vec<Resp>),
}

/// One persistent connection to Redis for INFO and setup, so that probing
/// adds no connection to `total_connections_received` during a run.
struct Probe {
    reader: BufReader<TcpStream>,
}

impl Probe {
    fn connect(port: u16) -> Res<Probe> {
        let stream = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .map_err(|e| e.to_string())?;
        Ok(Probe {
            reader: BufReader::new(stream),
        })
    }

    fn command(&mut self, args: &[&str]) -> Res<Resp> {
        let mut req = format!("*{}\r\n", args.len());
        for a in args {
            let _ = write!(req, "${}\r\n{a}\r\n", a.len());
        }
        self.reader
            .get_mut()
            .write_all(req.as_bytes())
            .map_err(|e| e.to_string())?;
        self.read()
    }

    fn read(&mut self) -> Res<Resp> {
        let mut line = String::new();
        self.reader
            .read_line(&mut line)
            .map_err(|e| format!("redis probe: {e}"))?;
        let line = line.trim_end_matches(['\r', '\n']);
        let (kind, rest) = line.split_at(line.len().min(1));
        let int = || {
            rest.parse::<i64>()
                .map_err(|_| format!("redis probe: bad line {line:?}"))
        };
        Ok(match kind {
            "+" => Resp::Simple(rest.to_owned()),
            "-" => Resp::Error(rest.to_owned()),
            ":" => Resp::Int(int()?),
            "$" => {
                let n = int()?;
                if n < 0 {
                    Resp::Bulk(None)
                } else {
                    let mut buf = vec![0; n as usize + 2];
                    self.reader
                        .read_exact(&mut buf)
                        .map_err(|e| e.to_string())?;
                    buf.truncate(n as usize);
                    Resp::Bulk(Some(String::from_utf8_lossy(&buf).into_owned()))
                }
            }
            "*" => {
                let n = int()?;
                let mut items = Vec::new();
                for _ in 0..n.max(0) {
                    items.push(self.read()?);
                }
                Resp::Array(items)
            }
            _ => return Err(format!("redis probe: bad line {line:?}")),
        })
    }

    fn info(&mut self, section: &str, field: &str) -> Option<u64> {
        match self.command(&["INFO", section]).ok()? {
            Resp::Bulk(Some(text)) => text.lines().find_map(|l| {
                l.strip_prefix(field)
                    .and_then(|r| r.strip_prefix(':'))
                    .and_then(|v| v.trim().parse().ok())
            }),
            _ => None,
        }
    }
}

// ---------------------------------------------------------------------------
// /proc

fn stat_fields(pid: i32) -> Option<Vec<String>> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    // rest[0] is field 3 (state).
    Some(rest.split_whitespace().map(str::to_owned).collect())
}

fn clk_tck() -> f64 {
    // SAFETY: sysconf has no memory effects.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

/// utime + stime of a process (all its threads), in seconds.
fn cpu_seconds(pid: i32) -> Option<f64> {
    let f = stat_fields(pid)?;
    let utime: u64 = f.get(11)?.parse().ok()?;
    let stime: u64 = f.get(12)?.parse().ok()?;
    Some((utime + stime) as f64 / clk_tck())
}

// ---------------------------------------------------------------------------
// Redis and Varnish

struct Redis {
    child: Option<Child>,
    port: u16,
    sock: PathBuf,
    probe: Probe,
}

impl Redis {
    fn start(dir: &Path) -> Res<Redis> {
        let sock = dir.join("redis.sock");
        let mut last = String::new();
        for _ in 0..5 {
            let port = support::free_port()?;
            let log = dir.join("redis.log");
            let mut cmd = support::redis_server(port, dir, &log);
            cmd.arg("--unixsocket")
                .arg(&sock)
                .args(["--unixsocketperm", "777"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            record("redis-server", &cmd);
            let mut child = spawn(&mut cmd, "redis-server")?;
            let mut probe = None;
            let waited = wait_ready(
                &mut child,
                Duration::from_secs(10),
                Duration::from_millis(50),
                || {
                    let Ok(mut p) = Probe::connect(port) else {
                        return false;
                    };
                    let pong = matches!(p.command(&["PING"]), Ok(Resp::Simple(s)) if s == "PONG");
                    if pong {
                        probe = Some(p);
                    }
                    pong
                },
            );
            if let (Waited::Ready, Some(probe)) = (waited, probe) {
                return Ok(Redis {
                    child: Some(child),
                    port,
                    sock,
                    probe,
                });
            }
            stop_child(child, "redis-server", Duration::from_secs(5));
            last = fs::read_to_string(&log).unwrap_or_default();
        }
        Err(format!("redis-server did not start:\n{last}"))
    }

    fn stop(&mut self) {
        if let Some(child) = self.child.take() {
            stop_child(child, "redis-server", Duration::from_secs(10));
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Vmod {
    Ours,
    Theirs,
}

impl Vmod {
    fn name(self) -> &'static str {
        match self {
            Vmod::Ours => "ours",
            Vmod::Theirs => "theirs",
        }
    }
}

struct Env {
    tmp: PathBuf,
    ours_so: PathBuf,
    seq: usize,
}

impl Env {
    fn import_line(&self, vmod: Vmod) -> String {
        match vmod {
            Vmod::Ours => format!("import redis from \"{}\";", self.ours_so.display()),
            Vmod::Theirs => "import redis;".to_owned(),
        }
    }
}

struct Varnish {
    varnishd: Varnishd,
    cache: i32,
    port: u16,
    workdir: PathBuf,
}

impl Varnish {
    fn start(env: &mut Env, label: &str, vcl: &str) -> Res<Varnish> {
        env.seq += 1;
        let name = format!("{:03}-{label}", env.seq);
        let vcl_path = env.tmp.join(format!("{name}.vcl"));
        support::write_public(&vcl_path, vcl)?;
        let workdir = env.tmp.join(format!("{name}.varnish"));
        let log = env.tmp.join(format!("{name}.log"));
        let varnishd = Varnishd::start(
            &workdir,
            &vcl_path,
            &log,
            &[],
            |port| matches!(http_get(port, "/stats"), Ok((200, _))),
            |cmd| record("varnishd", cmd),
        )
        .map_err(|e| format!("{label}: {e}"))?;
        Ok(Varnish {
            cache: varnishd.child_pid,
            port: varnishd.port,
            varnishd,
            workdir,
        })
    }

    fn cpu(&self) -> f64 {
        cpu_seconds(self.cache).unwrap_or(f64::NAN)
    }

    fn rss_kb(&self) -> Option<u64> {
        support::proc_status(self.cache, "VmRSS")
    }

    fn varnishstat(&self, field: &str) -> Option<u64> {
        let mut cmd = Process::new("varnishstat");
        cmd.arg("-n").arg(&self.workdir).args(["-1", "-f", field]);
        record("varnishstat", &cmd);
        let (ok, out) = run_capture(&mut cmd, "varnishstat").ok()?;
        if !ok {
            return None;
        }
        out.lines()
            .find(|l| l.starts_with(field))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
    }

    fn stats_json(&self) -> Option<String> {
        match http_get(self.port, "/stats") {
            Ok((200, body)) => Some(body),
            _ => None,
        }
    }

    fn stop(&mut self) {
        self.varnishd.stop();
        let _ = fs::remove_dir_all(&self.workdir);
    }
}

impl Drop for Varnish {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A number after `"key": ` in the stats JSON, the first after `after`.
fn json_number(json: &str, after: &str, key: &str) -> Option<u64> {
    let start = json.find(after)?;
    let rest = &json[start..];
    let k = rest.find(&format!("\"{key}\""))?;
    let rest = &rest[k + key.len() + 2..];
    let rest = rest.trim_start().strip_prefix(':')?.trim_start();
    let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    digits.parse().ok()
}

// ---------------------------------------------------------------------------
// Load generators

#[derive(Clone, Debug, Default)]
struct Load {
    requests: u64,
    secs: f64,
    rps: f64,
    non2xx: u64,
    socket_errors: u64,
    p50_ms: f64,
    p99_ms: f64,
}

fn wrk_cmd(threads: u32, conns: u32, secs: u32, url: &str) -> Process {
    let mut cmd = Process::new("wrk");
    cmd.arg(format!("-t{threads}"))
        .arg(format!("-c{conns}"))
        .arg(format!("-d{secs}s"))
        .arg("--latency")
        .arg(url)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

fn duration_ms(s: &str) -> Option<f64> {
    let num_end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let n: f64 = s[..num_end].parse().ok()?;
    Some(match &s[num_end..] {
        "us" => n / 1000.0,
        "ms" => n,
        "s" => n * 1000.0,
        "m" => n * 60_000.0,
        _ => return None,
    })
}

fn parse_wrk(out: &str) -> Res<Load> {
    let mut l = Load {
        p50_ms: f64::NAN,
        p99_ms: f64::NAN,
        ..Load::default()
    };
    let mut seen = false;
    for line in out.lines().map(str::trim) {
        let words: Vec<&str> = line.split_whitespace().collect();
        if words.len() >= 4 && words[1] == "requests" && words[2] == "in" {
            l.requests = words[0].parse().map_err(|_| format!("wrk: {line}"))?;
            l.secs = words[3]
                .trim_end_matches(',')
                .strip_suffix('s')
                .and_then(|s| s.parse().ok())
                .unwrap_or(f64::NAN);
            seen = true;
        } else if let Some(v) = line.strip_prefix("Requests/sec:") {
            l.rps = v.trim().parse().map_err(|_| format!("wrk: {line}"))?;
        } else if let Some(v) = line.strip_prefix("Non-2xx or 3xx responses:") {
            l.non2xx = v.trim().parse().unwrap_or(0);
        } else if let Some(v) = line.strip_prefix("Socket errors:") {
            l.socket_errors = v
                .split(',')
                .filter_map(|part| part.split_whitespace().nth(1)?.parse::<u64>().ok())
                .sum();
        } else if words.len() == 2 && words[0] == "50%" {
            l.p50_ms = duration_ms(words[1]).unwrap_or(f64::NAN);
        } else if words.len() == 2 && words[0] == "99%" {
            l.p99_ms = duration_ms(words[1]).unwrap_or(f64::NAN);
        }
    }
    if !seen || l.rps <= 0.0 {
        return Err(format!("wrk: no result in its output:\n{out}"));
    }
    Ok(l)
}

fn parse_ab(out: &str) -> Res<Load> {
    let mut l = Load {
        p50_ms: f64::NAN,
        p99_ms: f64::NAN,
        ..Load::default()
    };
    let field = |key: &str| {
        out.lines()
            .find_map(|line| line.trim().strip_prefix(key))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<f64>().ok())
    };
    l.requests = field("Complete requests:").ok_or("ab: no 'Complete requests'")? as u64;
    l.secs = field("Time taken for tests:").ok_or("ab: no 'Time taken'")?;
    l.rps = l.requests as f64 / l.secs;
    l.non2xx = field("Non-2xx responses:").unwrap_or(0.0) as u64;
    l.socket_errors = field("Failed requests:").unwrap_or(0.0) as u64;
    Ok(l)
}

/// One closed-loop, single-client run of S1.
fn s1_load(o: &Opts, url: &str, secs: u32, kind: &str) -> Res<Load> {
    let mut cmd = match o.s1_client {
        S1Client::Wrk => wrk_cmd(1, 1, secs, url),
        S1Client::Ab => {
            let mut cmd = Process::new("ab");
            cmd.args(["-q", "-k", "-c", "1", "-t", &secs.to_string()])
                .args(["-n", "100000000", url])
                .stdin(Stdio::null());
            cmd
        }
    };
    record(kind, &cmd);
    let (ok, out) = run_capture(&mut cmd, "load generator")?;
    if !ok {
        return Err(format!("{}: failed:\n{out}", command_line(&cmd)));
    }
    match o.s1_client {
        S1Client::Wrk => parse_wrk(&out),
        S1Client::Ab => parse_ab(&out),
    }
}

// ---------------------------------------------------------------------------
// VCL

fn db_new(location: &str, ttl: u32, shared: bool, max: u32) -> String {
    db_new_pipelining(location, ttl, shared, max, false)
}

/// `redis.db()` of the S2 / S3 VCL; `pipelining` adds the [ext] argument
/// (ours only: the C VMOD has no such argument).
fn db_new_pipelining(location: &str, ttl: u32, shared: bool, max: u32, pipelining: bool) -> String {
    let pipelining = if pipelining {
        ",\n        pipelining=true"
    } else {
        ""
    };
    format!(
        "    new db = redis.db(
        location=\"{location}\",
        type=master,
        connection_timeout=500,
        connection_ttl={ttl},
        command_timeout=0,
        max_command_retries=0,
        shared_connections={shared},
        max_connections={max},
        password=\"\",
        sickness_ttl=0,
        max_cluster_hops=0{pipelining});
"
    )
}

/// Seed 001's blocks (no reply checks), one command each.
fn s1_block(cmd: &str) -> String {
    match cmd {
        "SET" => "        db.command(\"SET\");
        db.push(\"foo\");
        db.push(\"Hello world!\");
        db.execute(true);
        db.free();
"
        .to_owned(),
        "GET" => "        db.command(\"GET\");
        db.push(\"foo\");
        db.execute(true);
        db.free();
"
        .to_owned(),
        _ => format!(
            "        db.command(\"EVAL\");
        db.push({{\"{SCRIPT}\"}});
        db.push(\"1\");
        db.push(\"foo\");
        db.push(req.xid);
        db.push(\"1\");
        db.execute(true);
        db.free();
"
        ),
    }
}

fn s1_url(cmd: &str, n: u32) -> String {
    if n == 0 {
        "/s1/0".to_owned()
    } else {
        format!("/s1/{cmd}/{n}")
    }
}

/// The VCL both workloads share, up to the end of the `/stats` branch of
/// `vcl_synth`: `imports`, a dummy backend, `db` in `vcl_init`, every
/// request a synth.
fn vcl_head(imports: &str, db: &str) -> String {
    format!(
        "vcl 4.0;

{imports}

backend default {{
    .host = \"127.0.0.1\";
    .port = \"80\";
}}

sub vcl_init {{
{db}}}

sub vcl_recv {{
    return (synth(200, \"OK\"));
}}

sub vcl_synth {{
    if (req.url == \"/stats\") {{
        synthetic(db.stats());
    }}"
    )
}

/// Seed 001's VCL with every cell in it, selected by URL.
fn s1_vcl(import: &str, location: &str) -> String {
    let mut v = vcl_head(import, &db_new(location, 0, false, 1));
    v.push_str(
        " elsif (req.url == \"/s1/0\") {
        synthetic(\"\");
",
    );
    for cmd in S1_CMDS {
        for n in S1_NS.into_iter().filter(|n| *n > 0) {
            let _ = writeln!(v, "    }} elsif (req.url == \"{}\") {{", s1_url(cmd, n));
            for _ in 0..n {
                v.push_str(&s1_block(cmd));
                v.push('\n');
            }
            v.push_str("        synthetic(\"\");\n");
        }
    }
    v.push_str(
        "    } else {
        set resp.status = 404;
        synthetic(\"\");
    }

    return (deliver);
}
",
    );
    v
}

/// Seed 000's VCL: SET + GET + EVAL with the reply checks, or no command.
fn s2_vcl(import: &str, db: &str, commands: bool) -> String {
    let body = if commands {
        format!(
            "        db.command(\"SET\");
        db.push(\"foo\");
        db.push(\"Hello world!\");
        db.execute(true);
        if (!db.reply_is_status()) {{
            std.syslog(6, \"500\");
            set resp.status = 500;
        }}
        db.free();

        db.command(\"GET\");
        db.push(\"foo\");
        db.execute(true);
        if (!db.reply_is_string()) {{
            std.syslog(6, \"501\");
            set resp.status = 501;
        }}
        db.free();

        db.command(\"EVAL\");
        db.push({{\"{SCRIPT}\"}});
        db.push(\"1\");
        db.push(\"bar\");
        db.push(req.xid);
        db.push(\"1\");
        db.execute(true);
        if (!db.reply_is_nil()) {{
            std.syslog(6, \"502\");
            set resp.status = 502;
        }}
        db.free();

"
        )
    } else {
        "        # No Redis command: the baseline.\n".to_owned()
    };
    format!(
        "{} else {{
{body}        synthetic(\"\");
    }}

    return (deliver);
}}
",
        vcl_head(&format!("import std;\n{import}"), db)
    )
}

// ---------------------------------------------------------------------------
// Statistics

fn median(values: &[f64]) -> f64 {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}

fn min_max(values: &[f64]) -> (f64, f64) {
    values
        .iter()
        .filter(|x| x.is_finite())
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &x| {
            (lo.min(x), hi.max(x))
        })
}

/// (max - min) / median, in percent.
fn spread_pct(values: &[f64]) -> f64 {
    let (lo, hi) = min_max(values);
    100.0 * (hi - lo) / median(values)
}

/// Least-squares slope of y over x.
fn slope(points: &[(f64, f64)]) -> f64 {
    let n = points.len() as f64;
    let mx = points.iter().map(|p| p.0).sum::<f64>() / n;
    let my = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let sxx: f64 = points.iter().map(|p| (p.0 - mx) * (p.0 - mx)).sum();
    sxy / sxx
}

fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 {
        a / b
    } else {
        f64::NAN
    }
}

fn f(x: f64, decimals: usize) -> String {
    if x.is_finite() {
        format!("{x:.decimals$}")
    } else {
        "–".to_owned()
    }
}

fn opt(x: Option<u64>) -> String {
    x.map_or_else(|| "–".to_owned(), |v| v.to_string())
}

fn yes_no(ok: bool) -> &'static str {
    if ok {
        "**met**"
    } else {
        "**not met**"
    }
}

// ---------------------------------------------------------------------------
// S1

#[derive(Clone, Debug, Default)]
struct Cell {
    load: Load,
    ms: f64,
    cpu_us: f64,
}

/// After one S1 pass of one VMOD: db.stats() commands.failed and
/// connections.total, and Redis total_connections_received during the pass.
#[derive(Clone, Copy, Default)]
struct Sanity {
    failed: Option<u64>,
    connections: Option<u64>,
    received: Option<u64>,
}

#[derive(Default)]
struct S1 {
    /// [rep][vmod][(cmd, n)] (n = 0 stored under every cmd).
    cells: Vec<[BTreeMap<(usize, u32), Cell>; 2]>,
    /// [rep]: redis-benchmark p50 / avg in ms for SET, GET, EVALSHA.
    rtt: Vec<[(f64, f64); 3]>,
    /// [rep]: the harness's own blocking client (one connection, TCP_NODELAY,
    /// one request at a time, as a worker does): p50 / mean in ms.
    rtt_blocking: Vec<[(f64, f64); 3]>,
    /// [rep][vmod]: commands.failed, connections.total from db.stats(),
    /// Redis total_connections_received delta over the whole S1 pass.
    sanity: Vec<[Sanity; 2]>,
    secs: u32,
}

fn redis_benchmark(o: &Opts, redis: &Redis, extra: &[&str], kind: &str) -> Res<Vec<(f64, f64)>> {
    let mut cmd = Process::new("redis-benchmark");
    cmd.args(["-h", "127.0.0.1", "-p", &redis.port.to_string(), "-c", "1"])
        .args(["-n", &o.rb_requests.to_string(), "--csv"])
        .args(extra);
    record(kind, &cmd);
    let (ok, out) = run_capture(&mut cmd, "redis-benchmark")?;
    if !ok {
        return Err(format!("redis-benchmark failed:\n{out}"));
    }
    // "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms",...
    let mut rows = Vec::new();
    for line in out.lines().filter(|l| !l.starts_with("\"test\"")) {
        let cols: Vec<&str> = line.split("\",\"").map(|c| c.trim_matches('"')).collect();
        if cols.len() >= 5 {
            let avg = cols[2].parse().unwrap_or(f64::NAN);
            let p50 = cols[4].parse().unwrap_or(f64::NAN);
            rows.push((p50, avg));
        }
    }
    if rows.is_empty() {
        return Err(format!("redis-benchmark: no CSV row in:\n{out}"));
    }
    Ok(rows)
}

/// True when `buf` holds one whole simple reply (`+`, `-`, `:`, `$`).
fn simple_reply_complete(buf: &[u8]) -> bool {
    let Some(eol) = buf.windows(2).position(|w| w == b"\r\n") else {
        return false;
    };
    if buf.first() != Some(&b'$') {
        return true;
    }
    match std::str::from_utf8(&buf[1..eol])
        .ok()
        .and_then(|n| n.parse::<i64>().ok())
    {
        Some(n) if n >= 0 => buf.len() >= eol + 2 + n as usize + 2,
        _ => true,
    }
}

/// `count` requests of one command, one at a time on one TCP connection
/// (TCP_NODELAY), each timed: (p50, mean) in ms.
fn blocking_rtt(port: u16, args: &[&str], count: usize) -> Res<(f64, f64)> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    stream.set_nodelay(true).map_err(|e| e.to_string())?;
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .map_err(|e| e.to_string())?;
    let mut req = format!("*{}\r\n", args.len());
    for a in args {
        let _ = write!(req, "${}\r\n{a}\r\n", a.len());
    }
    let mut buf = vec![0u8; 4096];
    let mut times = Vec::with_capacity(count);
    let deadline = Instant::now() + Duration::from_secs(60);
    for _ in 0..count {
        if Instant::now() > deadline {
            break;
        }
        let t0 = Instant::now();
        stream
            .write_all(req.as_bytes())
            .map_err(|e| e.to_string())?;
        let mut end = 0;
        while !simple_reply_complete(&buf[..end]) {
            let n = stream.read(&mut buf[end..]).map_err(|e| e.to_string())?;
            if n == 0 {
                return Err("redis closed the RTT probe connection".into());
            }
            end += n;
        }
        times.push(t0.elapsed().as_secs_f64() * 1000.0);
        if buf[0] == b'-' {
            return Err(format!(
                "RTT probe {}: {}",
                args[0],
                String::from_utf8_lossy(&buf[..end]).trim_end()
            ));
        }
    }
    let mean = times.iter().sum::<f64>() / times.len().max(1) as f64;
    Ok((median(&times), mean))
}

fn run_s1(o: &Opts, env: &mut Env, redis: &mut Redis) -> Res<S1> {
    let mut s1 = S1 {
        secs: o.s1_secs,
        ..S1::default()
    };
    let location = format!("127.0.0.1:{}", redis.port);
    let sha = match redis.probe.command(&["SCRIPT", "LOAD", SCRIPT])? {
        Resp::Bulk(Some(sha)) => sha,
        other => return Err(format!("SCRIPT LOAD: {other:?}")),
    };
    for rep in 0..o.reps {
        eprintln!(
            "system: S1 repetition {}/{}: redis-benchmark",
            rep + 1,
            o.reps
        );
        let sg = redis_benchmark(o, redis, &["-t", "set,get"], "redis-benchmark set,get")?;
        let ev = redis_benchmark(
            o,
            redis,
            &["EVALSHA", &sha, "1", "foo", "42", "1"],
            "redis-benchmark evalsha",
        )?;
        let nan = (f64::NAN, f64::NAN);
        s1.rtt.push([
            sg.first().copied().unwrap_or(nan),
            sg.get(1).copied().unwrap_or(nan),
            ev.first().copied().unwrap_or(nan),
        ]);
        let count = o.rb_requests as usize;
        s1.rtt_blocking.push([
            blocking_rtt(redis.port, &["SET", "foo", "Hello world!"], count)?,
            blocking_rtt(redis.port, &["GET", "foo"], count)?,
            blocking_rtt(redis.port, &["EVALSHA", &sha, "1", "foo", "42", "1"], count)?,
        ]);
        let mut per_vmod: [BTreeMap<(usize, u32), Cell>; 2] = Default::default();
        let mut sanity = [Sanity::default(); 2];
        // Both varnishd run side by side (the idle one costs next to
        // nothing) so that each cell is measured ours, theirs, back to
        // back: drift between the two is seconds, not minutes.
        let mut varnishes = Vec::new();
        for vmod in [Vmod::Ours, Vmod::Theirs] {
            let vcl = s1_vcl(&env.import_line(vmod), &location);
            varnishes.push(Varnish::start(env, &format!("s1-{}", vmod.name()), &vcl)?);
        }
        let mut cells = vec![(0usize, 0u32)];
        for ci in 0..S1_CMDS.len() {
            for n in S1_NS.into_iter().filter(|n| *n > 0) {
                cells.push((ci, n));
            }
        }
        let mut received = [0u64; 2];
        for (ci, n) in cells {
            for (vi, vmod) in [Vmod::Ours, Vmod::Theirs].into_iter().enumerate() {
                let v = &varnishes[vi];
                let url = format!("http://127.0.0.1:{}{}", v.port, s1_url(S1_CMDS[ci], n));
                s1_load(o, &url, o.s1_warm, "S1 warm-up")?;
                let conns0 = redis.probe.info("stats", "total_connections_received");
                let cpu0 = v.cpu();
                let load = s1_load(o, &url, o.s1_secs, "S1")?;
                let cpu1 = v.cpu();
                let conns1 = redis.probe.info("stats", "total_connections_received");
                received[vi] += conns1.zip(conns0).map_or(0, |(a, b)| a - b);
                if load.non2xx > 0 || load.socket_errors > 0 {
                    eprintln!(
                        "system: S1 {} {url}: {} non-2xx, {} socket errors",
                        vmod.name(),
                        load.non2xx,
                        load.socket_errors
                    );
                }
                let cell = Cell {
                    ms: 1000.0 / load.rps,
                    cpu_us: (cpu1 - cpu0) * 1e6 / load.requests.max(1) as f64,
                    load,
                };
                eprintln!(
                    "system: S1 rep {} {:6} {:4} N={n}: {:.4} ms/req (p50 {:.4}), {:.1} us CPU/req",
                    rep + 1,
                    vmod.name(),
                    if n == 0 { "-" } else { S1_CMDS[ci] },
                    cell.ms,
                    cell.load.p50_ms,
                    cell.cpu_us
                );
                if n == 0 {
                    for c in 0..S1_CMDS.len() {
                        per_vmod[vi].insert((c, 0), cell.clone());
                    }
                } else {
                    per_vmod[vi].insert((ci, n), cell);
                }
            }
        }
        for (vi, mut v) in varnishes.into_iter().enumerate() {
            let json = v.stats_json().unwrap_or_default();
            v.stop();
            sanity[vi] = Sanity {
                failed: json_number(&json, "\"commands\"", "failed"),
                connections: json_number(&json, "\"connections\"", "total"),
                received: Some(received[vi]),
            };
        }
        s1.cells.push(per_vmod);
        s1.sanity.push(sanity);
    }
    Ok(s1)
}

impl S1 {
    fn values(&self, vi: usize, ci: usize, n: u32, what: fn(&Cell) -> f64) -> Vec<f64> {
        self.cells
            .iter()
            .map(|rep| rep[vi].get(&(ci, n)).map_or(f64::NAN, what))
            .collect()
    }

    /// Per repetition: the least-squares slope over N, in µs per command.
    fn slopes(&self, vi: usize, ci: usize, what: fn(&Cell) -> f64, scale: f64) -> Vec<f64> {
        self.cells
            .iter()
            .map(|rep| {
                let points: Vec<(f64, f64)> = S1_NS
                    .iter()
                    .filter_map(|&n| rep[vi].get(&(ci, n)).map(|c| (n as f64, what(c) * scale)))
                    .collect();
                slope(&points)
            })
            .collect()
    }
}

// ---------------------------------------------------------------------------
// S2 / S3

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    NoRedis,
    Private,
    Shared(u32),
    /// Ours with [ext] `pipelining=true` on this many connections; the C
    /// VMOD, which cannot pipeline, runs as `Shared` with as many.
    Pipelined(u32),
}

impl Mode {
    fn label(self) -> String {
        match self {
            Mode::NoRedis => "no Redis".into(),
            Mode::Private => "private".into(),
            Mode::Shared(n) => format!("shared {n}"),
            Mode::Pipelined(n) => format!("pipelined {n} (theirs: shared {n})"),
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct RunCfg {
    mode: Mode,
    unix: bool,
    ttl: u32,
    /// Repetition (0-based) and count, with `--s2-reps`.
    rep: usize,
    reps: usize,
}

impl RunCfg {
    fn new(mode: Mode, unix: bool, ttl: u32) -> RunCfg {
        RunCfg {
            mode,
            unix,
            ttl,
            rep: 0,
            reps: 1,
        }
    }

    fn rep_suffix(&self) -> String {
        if self.reps > 1 {
            format!(" #{}", self.rep + 1)
        } else {
            String::new()
        }
    }

    fn label(&self) -> String {
        format!(
            "{}, {}, ttl {}{}",
            self.mode.label(),
            if self.unix { "unix" } else { "tcp" },
            self.ttl,
            self.rep_suffix()
        )
    }

    fn column(&self) -> String {
        format!("{}{}", self.mode.label(), self.rep_suffix())
    }
}

/// The median req/s of one VMOD over the repetitions of a configuration.
/// The req/s of one VMOD in every repetition of a configuration.
fn rps_values(rows: &[(RunCfg, [Run; 2])], keep: impl Fn(&RunCfg) -> bool, vi: usize) -> Vec<f64> {
    rows.iter()
        .filter(|(c, _)| keep(c))
        .map(|(_, r)| r[vi].load.rps)
        .collect()
}

/// The median req/s of one VMOD over the repetitions of a configuration.
fn median_rps(rows: &[(RunCfg, [Run; 2])], keep: impl Fn(&RunCfg) -> bool, vi: usize) -> f64 {
    median(&rps_values(rows, keep, vi))
}

/// The S2 columns (modes), in the order they ran.
fn columns(rows: &[(RunCfg, [Run; 2])]) -> Vec<Mode> {
    let mut modes: Vec<Mode> = Vec::new();
    for (c, _) in rows {
        if !modes.contains(&c.mode) {
            modes.push(c.mode);
        }
    }
    modes
}

#[derive(Clone, Debug, Default)]
struct Run {
    load: Load,
    threads_mid: Option<u64>,
    redis_clients_mid: Option<u64>,
    conns_received: Option<u64>,
    blocked: Option<u64>,
    cmds_failed: Option<u64>,
    rss_kb: Option<u64>,
    cpu_us_per_req: f64,
}

fn run_load(o: &Opts, env: &mut Env, redis: &mut Redis, cfg: RunCfg, vmod: Vmod) -> Res<Run> {
    let location = if cfg.unix {
        redis.sock.display().to_string()
    } else {
        format!("127.0.0.1:{}", redis.port)
    };
    let (shared, max) = match cfg.mode {
        Mode::NoRedis | Mode::Private => (false, 1),
        Mode::Shared(n) | Mode::Pipelined(n) => (true, n),
    };
    let pipelining = matches!(cfg.mode, Mode::Pipelined(_)) && matches!(vmod, Vmod::Ours);
    let vcl = s2_vcl(
        &env.import_line(vmod),
        &db_new_pipelining(&location, cfg.ttl, shared, max, pipelining),
        cfg.mode != Mode::NoRedis,
    );
    let label = format!(
        "s2-{}-{}{}-ttl{}",
        vmod.name(),
        match cfg.mode {
            Mode::NoRedis => "none".to_owned(),
            Mode::Private => "private".to_owned(),
            Mode::Shared(n) => format!("shared{n}"),
            Mode::Pipelined(n) => format!("pipelined{n}"),
        },
        if cfg.unix { "-unix" } else { "" },
        cfg.ttl
    );
    let mut v = Varnish::start(env, &label, &vcl)?;
    let url = format!("http://127.0.0.1:{}/", v.port);
    let mut warm = wrk_cmd(o.s2_threads, o.s2_conns, o.s2_warm, &url);
    record("S2 warm-up", &warm);
    let (ok, out) = run_capture(&mut warm, "wrk")?;
    if !ok {
        return Err(format!("wrk warm-up failed:\n{out}"));
    }
    let blocked0 = v
        .stats_json()
        .and_then(|json| json_number(&json, "\"workers\"", "blocked"));
    let conns0 = redis.probe.info("stats", "total_connections_received");
    let cpu0 = v.cpu();
    let mut cmd = wrk_cmd(o.s2_threads, o.s2_conns, o.s2_secs, &url);
    record("S2", &cmd);
    let wrk = spawn(&mut cmd, "wrk")?;
    sleep(Duration::from_millis(u64::from(o.s2_secs) * 500));
    let threads_mid = v.varnishstat("MAIN.threads");
    // Minus this probe's own connection.
    let redis_clients_mid = redis
        .probe
        .info("clients", "connected_clients")
        .map(|c| c.saturating_sub(1));
    let out = reap(wrk)?;
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        return Err(format!("wrk failed:\n{text}"));
    }
    let load = parse_wrk(&text)?;
    let cpu1 = v.cpu();
    let conns1 = redis.probe.info("stats", "total_connections_received");
    let rss_kb = v.rss_kb();
    let json = v.stats_json().unwrap_or_default();
    v.stop();
    let run = Run {
        cpu_us_per_req: (cpu1 - cpu0) * 1e6 / load.requests.max(1) as f64,
        load,
        threads_mid,
        redis_clients_mid,
        conns_received: conns1.zip(conns0).map(|(a, b)| a - b),
        blocked: json_number(&json, "\"workers\"", "blocked")
            .zip(blocked0)
            .map(|(a, b)| a.saturating_sub(b)),
        cmds_failed: json_number(&json, "\"commands\"", "failed"),
        rss_kb,
    };
    eprintln!(
        "system: {:32} {:6}: {:8.0} req/s, non-2xx {}, threads {}, redis clients {}, \
         connections received {}, blocked {}, RSS {} kB, {:.1} us CPU/req",
        cfg.label(),
        vmod.name(),
        run.load.rps,
        run.load.non2xx,
        opt(run.threads_mid),
        opt(run.redis_clients_mid),
        opt(run.conns_received),
        opt(run.blocked),
        opt(run.rss_kb),
        run.cpu_us_per_req
    );
    Ok(run)
}

fn run_pairs(
    o: &Opts,
    env: &mut Env,
    redis: &mut Redis,
    cfgs: &[RunCfg],
) -> Res<Vec<(RunCfg, [Run; 2])>> {
    let mut out = Vec::new();
    for rep in 0..o.s2_reps {
        for &cfg in cfgs {
            let cfg = RunCfg {
                rep,
                reps: o.s2_reps,
                ..cfg
            };
            let ours = run_load(o, env, redis, cfg, Vmod::Ours)?;
            let theirs = run_load(o, env, redis, cfg, Vmod::Theirs)?;
            out.push((cfg, [ours, theirs]));
        }
    }
    Ok(out)
}

fn s2_cfgs(o: &Opts) -> Vec<RunCfg> {
    let mut modes = vec![Mode::NoRedis, Mode::Private];
    modes.extend(SHARED_MAX.iter().map(|&n| Mode::Shared(n)));
    o.s2_columns
        .as_ref()
        .unwrap_or(&modes)
        .iter()
        .map(|&mode| RunCfg::new(mode, false, 0))
        .collect()
}

fn s3_cfgs() -> Vec<RunCfg> {
    let mut cfgs = Vec::new();
    for mode in [Mode::Private, Mode::Shared(10)] {
        for unix in [false, true] {
            for ttl in [0, 1] {
                cfgs.push(RunCfg::new(mode, unix, ttl));
            }
        }
    }
    cfgs
}

// ---------------------------------------------------------------------------
// SVG

fn nice_step(range: f64, ticks: f64) -> f64 {
    let raw = range / ticks;
    let mag = 10f64.powf(raw.log10().floor());
    let norm = raw / mag;
    let nice = if norm <= 1.0 {
        1.0
    } else if norm <= 2.0 {
        2.0
    } else if norm <= 2.5 {
        2.5
    } else if norm <= 5.0 {
        5.0
    } else {
        10.0
    };
    nice * mag
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

const COLORS: [&str; 3] = ["#1f77b4", "#2ca02c", "#d62728"];
const VMOD_COLORS: [&str; 2] = ["#1f77b4", "#ff7f0e"];

/// Frame, title and y axis from 0 to a nice top; returns (top, y of value).
fn svg_frame(
    svg: &mut String,
    w: f64,
    h: f64,
    m: [f64; 4],
    title: &str,
    ylabel: &str,
    ymax: f64,
) -> f64 {
    let [top, right, bottom, left] = m;
    let _ = writeln!(
        svg,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" \
         viewBox=\"0 0 {w} {h}\" font-family=\"sans-serif\" font-size=\"12\">"
    );
    let _ = writeln!(svg, "<rect width=\"{w}\" height=\"{h}\" fill=\"white\"/>");
    let _ = writeln!(
        svg,
        "<text x=\"{}\" y=\"20\" text-anchor=\"middle\" font-size=\"15\" font-weight=\"bold\">{}</text>",
        w / 2.0,
        esc(title)
    );
    let step = nice_step(ymax.max(1e-9), 6.0);
    let ytop = (ymax / step).ceil().max(1.0) * step;
    let plot_h = h - top - bottom;
    let mut v = 0.0;
    while v <= ytop + step / 2.0 {
        let y = top + plot_h - v / ytop * plot_h;
        let _ = writeln!(
            svg,
            "<line x1=\"{left}\" x2=\"{}\" y1=\"{y:.1}\" y2=\"{y:.1}\" stroke=\"#ddd\"/>\
             <text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            w - right,
            left - 6.0,
            y + 4.0,
            trim_num(v)
        );
        v += step;
    }
    let _ = writeln!(
        svg,
        "<line x1=\"{left}\" x2=\"{left}\" y1=\"{top}\" y2=\"{}\" stroke=\"black\"/>\
         <line x1=\"{left}\" x2=\"{}\" y1=\"{}\" y2=\"{}\" stroke=\"black\"/>",
        h - bottom,
        w - right,
        h - bottom,
        h - bottom
    );
    let _ = writeln!(
        svg,
        "<text transform=\"translate(16 {:.1}) rotate(-90)\" text-anchor=\"middle\">{}</text>",
        top + plot_h / 2.0,
        esc(ylabel)
    );
    ytop
}

fn trim_num(v: f64) -> String {
    let s = format!("{v:.3}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s.is_empty() {
        "0".into()
    } else {
        s.into()
    }
}

fn s1_svg(s1: &S1) -> String {
    let (w, h) = (760.0, 460.0);
    let m = [40.0, 170.0, 50.0, 70.0];
    let mut ymax: f64 = 0.0;
    let mut series = Vec::new();
    for vi in 0..2 {
        for ci in 0..S1_CMDS.len() {
            let pts: Vec<(f64, f64)> = S1_NS
                .iter()
                .map(|&n| (n as f64, median(&s1.values(vi, ci, n, |c| c.ms))))
                .collect();
            ymax = pts
                .iter()
                .map(|p| p.1)
                .filter(|y| y.is_finite())
                .fold(ymax, f64::max);
            series.push((vi, ci, pts));
        }
    }
    let mut svg = String::new();
    let ytop = svg_frame(
        &mut svg,
        w,
        h,
        m,
        "S1: ms per request vs commands per request (median)",
        "ms / request",
        ymax * 1.05,
    );
    let plot_w = w - m[1] - m[3];
    let plot_h = h - m[0] - m[2];
    let x = |n: f64| m[3] + n / 8.0 * plot_w;
    let y = |v: f64| m[0] + plot_h - v / ytop * plot_h;
    for n in S1_NS {
        let _ = writeln!(
            svg,
            "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">{n}</text>",
            x(n as f64),
            h - m[2] + 18.0
        );
    }
    let _ = writeln!(
        svg,
        "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">commands per request (N)</text>",
        m[3] + plot_w / 2.0,
        h - 10.0
    );
    for (i, (vi, ci, pts)) in series.iter().enumerate() {
        let dash = if *vi == 0 {
            ""
        } else {
            " stroke-dasharray=\"6 4\""
        };
        let path: Vec<String> = pts
            .iter()
            .filter(|p| p.1.is_finite())
            .map(|p| format!("{:.1},{:.1}", x(p.0), y(p.1)))
            .collect();
        let _ = writeln!(
            svg,
            "<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"2\"{dash} points=\"{}\"/>",
            COLORS[*ci],
            path.join(" ")
        );
        for p in pts.iter().filter(|p| p.1.is_finite()) {
            if *vi == 0 {
                let _ = writeln!(
                    svg,
                    "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"3.5\" fill=\"{}\"/>",
                    x(p.0),
                    y(p.1),
                    COLORS[*ci]
                );
            } else {
                let _ = writeln!(
                    svg,
                    "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"7\" height=\"7\" fill=\"white\" stroke=\"{}\" stroke-width=\"1.5\"/>",
                    x(p.0) - 3.5,
                    y(p.1) - 3.5,
                    COLORS[*ci]
                );
            }
        }
        let ly = m[0] + 10.0 + i as f64 * 22.0;
        let lx = w - m[1] + 15.0;
        let _ = writeln!(
            svg,
            "<line x1=\"{lx}\" x2=\"{}\" y1=\"{ly}\" y2=\"{ly}\" stroke=\"{}\" stroke-width=\"2\"{dash}/>\
             <text x=\"{}\" y=\"{}\">{} {}</text>",
            lx + 30.0,
            COLORS[*ci],
            lx + 36.0,
            ly + 4.0,
            S1_CMDS[*ci],
            if *vi == 0 { "ours" } else { "theirs (C)" }
        );
    }
    svg.push_str("</svg>\n");
    svg
}

/// The S2 plot: a group per column, each bar the median req/s of one VMOD
/// over the repetitions, with a whisker from the lowest to the highest.
fn s2_svg(rows: &[(RunCfg, [Run; 2])], title: &str) -> String {
    let (w, h) = (900.0, 460.0);
    let m = [40.0, 20.0, 70.0, 80.0];
    let ymax = rows
        .iter()
        .flat_map(|(_, r)| r.iter().map(|x| x.load.rps))
        .fold(0.0, f64::max);
    let mut svg = String::new();
    let ytop = svg_frame(&mut svg, w, h, m, title, "requests / s", ymax * 1.05);
    let plot_w = w - m[1] - m[3];
    let plot_h = h - m[0] - m[2];
    let modes = columns(rows);
    let group = plot_w / modes.len().max(1) as f64;
    let bar = group * 0.36;
    let y = |rps: f64| m[0] + plot_h - rps / ytop * plot_h;
    for (i, &mode) in modes.iter().enumerate() {
        let gx = m[3] + i as f64 * group;
        let mut medians = [0.0; 2];
        let mut top = 0.0_f64;
        for (vi, med) in medians.iter_mut().enumerate() {
            let values = rps_values(rows, |c| c.mode == mode, vi);
            let (lo, hi) = values.iter().fold((f64::INFINITY, 0.0_f64), |(lo, hi), v| {
                (lo.min(*v), hi.max(*v))
            });
            *med = median(&values);
            top = top.max(hi);
            let bx = gx + group * 0.14 + vi as f64 * bar;
            let tooltip = format!(
                "{} {}: {:.0} req/s (repetitions: {})",
                mode.label(),
                if vi == 0 { "ours" } else { "theirs" },
                *med,
                values
                    .iter()
                    .map(|v| f(*v, 0))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            let _ = writeln!(
                svg,
                "<rect x=\"{bx:.1}\" y=\"{:.1}\" width=\"{bar:.1}\" height=\"{:.1}\" \
                 fill=\"{}\"><title>{}</title></rect>",
                y(*med),
                m[0] + plot_h - y(*med),
                VMOD_COLORS[vi],
                esc(&tooltip)
            );
            if values.len() > 1 {
                let cx = bx + bar / 2.0;
                let _ = writeln!(
                    svg,
                    "<path d=\"M{cx:.1},{:.1}V{:.1}M{:.1},{:.1}H{:.1}M{:.1},{:.1}H{:.1}\" \
                     stroke=\"#333\" stroke-width=\"1\" fill=\"none\"/>",
                    y(lo),
                    y(hi),
                    cx - 3.0,
                    y(lo),
                    cx + 3.0,
                    cx - 3.0,
                    y(hi),
                    cx + 3.0
                );
            }
        }
        let _ = writeln!(
            svg,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-size=\"11\">×{}</text>",
            gx + group / 2.0,
            y(top) - 5.0,
            f(ratio(medians[0], medians[1]), 2)
        );
        let label = mode.label();
        let (l1, l2) = label.split_once(' ').unwrap_or((&label, ""));
        let cx = gx + group / 2.0;
        let _ = writeln!(
            svg,
            "<text x=\"{cx:.1}\" y=\"{}\" text-anchor=\"middle\">{}</text>\
             <text x=\"{cx:.1}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
            h - m[2] + 18.0,
            esc(l1),
            h - m[2] + 33.0,
            esc(l2)
        );
    }
    for (vi, name) in ["ours", "theirs (C VMOD)"].iter().enumerate() {
        let lx = m[3] + 10.0 + vi as f64 * 120.0;
        let ly = h - 18.0;
        let _ = writeln!(
            svg,
            "<rect x=\"{lx}\" y=\"{}\" width=\"14\" height=\"14\" fill=\"{}\"/>\
             <text x=\"{}\" y=\"{}\">{name}</text>",
            ly - 11.0,
            VMOD_COLORS[vi],
            lx + 20.0,
            ly
        );
    }
    svg.push_str("</svg>\n");
    svg
}

// ---------------------------------------------------------------------------
// Report

/// (YYYY-MM-DD, HH:MM) in UTC.
fn utc_now() -> (String, String) {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs()) as i64;
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let mo = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(mo <= 2);
    (
        format!("{y:04}-{mo:02}-{d:02}"),
        format!("{:02}:{:02}", rem / 3600, rem % 3600 / 60),
    )
}

fn first_line(mut cmd: Process) -> String {
    cmd.stdin(Stdio::null());
    match cmd.output() {
        Ok(out) => {
            let mut t = String::from_utf8_lossy(&out.stdout).into_owned();
            t.push_str(&String::from_utf8_lossy(&out.stderr));
            t.lines().next().unwrap_or("").trim().to_owned()
        }
        Err(e) => format!("({e})"),
    }
}

fn cmd(program: &str, args: &[&str]) -> Process {
    let mut c = Process::new(program);
    c.args(args);
    c
}

fn machine_section(r: &mut String, load_start: &str) {
    let cpu = fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines().find_map(|l| {
                l.strip_prefix("model name")
                    .map(|v| v.trim_start_matches([' ', '\t', ':']).to_owned())
            })
        })
        .unwrap_or_default();
    let mem = status_like("/proc/meminfo", "MemTotal")
        .map_or("?".into(), |kb| format!("{:.1} GiB", kb as f64 / 1048576.0));
    let kernel = fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let nproc = std::thread::available_parallelism().map_or(0, |n| n.get());
    let load_end = fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let _ = writeln!(r, "## Machine\n");
    let _ = writeln!(r, "- nproc: {nproc}; CPU: {cpu}; memory: {mem}");
    let _ = writeln!(r, "- kernel: {}", kernel.trim());
    let _ = writeln!(
        r,
        "- load average (1, 5, 15 min) at start: {}; at end: {}",
        load_start.trim(),
        load_end
            .split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    let _ = writeln!(
        r,
        "- net.ipv4.tcp_tw_reuse = {}",
        fs::read_to_string("/proc/sys/net/ipv4/tcp_tw_reuse")
            .unwrap_or_default()
            .trim()
    );
    let _ = writeln!(r);
}

fn status_like(path: &str, key: &str) -> Option<u64> {
    fs::read_to_string(path).ok()?.lines().find_map(|l| {
        l.strip_prefix(key)
            .and_then(|r| r.strip_prefix(':'))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
    })
}

fn git_rev() -> String {
    let dir = env!("CARGO_MANIFEST_DIR");
    let rev = first_line(cmd("git", &["-C", dir, "rev-parse", "--short=12", "HEAD"]));
    let dirty = Process::new("git")
        .args(["-C", dir, "status", "--porcelain", "--untracked-files=no"])
        .output()
        .map(|o| !o.stdout.is_empty())
        .unwrap_or(false);
    if dirty {
        format!("{rev} (with uncommitted changes)")
    } else {
        rev
    }
}

fn versions_section(r: &mut String, env: &Env, theirs: &Path) {
    let _ = writeln!(r, "## Versions\n");
    let _ = writeln!(r, "- varnishd: {}", first_line(cmd("varnishd", &["-V"])));
    let _ = writeln!(
        r,
        "- redis-server: {}",
        first_line(cmd("redis-server", &["--version"]))
    );
    let _ = writeln!(
        r,
        "- theirs: Debian `{THEIRS_PKG}` {} (`{}`, loaded with `import redis;`)",
        dpkg_version(THEIRS_PKG).unwrap_or_default(),
        theirs.display()
    );
    let _ = writeln!(
        r,
        "- ours: git {} (`cargo build --release`, loaded by absolute path from a copy in `{}`)",
        git_rev(),
        env.ours_so
            .parent()
            .map_or(String::new(), |p| p.display().to_string())
    );
    let _ = writeln!(r, "- {}", first_line(cmd("rustc", &["-V"])));
    let _ = writeln!(r, "- {}", first_line(cmd("wrk", &["-v"])));
    let _ = writeln!(r);
}

fn commands_section(r: &mut String) {
    let _ = writeln!(r, "## Commands\n");
    let _ = writeln!(
        r,
        "The first of each kind, as run (ports and paths vary per run; every \
         varnishd gets a fresh `-n` directory and a free port).\n"
    );
    let _ = writeln!(r, "```sh");
    for (kind, line) in COMMANDS.lock().unwrap_or_else(|e| e.into_inner()).iter() {
        let _ = writeln!(r, "# {kind}\n{line}");
    }
    let _ = writeln!(
        r,
        "# Redis INFO (clients mid-run, stats before/after each run) over one persistent \
         connection of the harness, subtracted from connected_clients"
    );
    let _ = writeln!(r, "```\n");
}

struct Targets {
    lines: Vec<String>,
}

impl Targets {
    fn add(&mut self, text: String) {
        self.lines.push(text);
    }
}

/// One S1 table: a row per N, a column per command and VMOD, each cell
/// `show`ing the repetitions of `what`.
fn s1_cell_table(
    r: &mut String,
    s1: &S1,
    title: &str,
    what: fn(&Cell) -> f64,
    show: impl Fn(&[f64]) -> String,
) {
    let _ = writeln!(r, "### {title}\n");
    let _ = writeln!(
        r,
        "| N | SET ours | SET theirs | GET ours | GET theirs | EVAL ours | EVAL theirs |"
    );
    let _ = writeln!(r, "|---:|---:|---:|---:|---:|---:|---:|");
    for n in S1_NS {
        let mut row = format!("| {n} |");
        for ci in 0..S1_CMDS.len() {
            for vi in 0..2 {
                let _ = write!(row, " {} |", show(&s1.values(vi, ci, n, what)));
            }
        }
        let _ = writeln!(r, "{row}");
    }
    let _ = writeln!(r);
}

fn s1_section(r: &mut String, s1: &S1, o: &Opts, svg_name: &str, t: &mut Targets) {
    let reps = s1.cells.len();
    let _ = writeln!(r, "## S1: VMOD overhead (seed 001)\n");
    let _ = writeln!(
        r,
        "Private connections, `max_connections=1`; one client in a closed loop \
         ({}), {} s per cell after a {} s warm-up on the same URL; {reps} \
         repetitions, each: redis-benchmark, then both varnishd started side by side and every \
         cell measured on ours then on theirs, back to back. \
         Figures are medians over the repetitions, ± the spread (max − min) / median.\n",
        match o.s1_client {
            S1Client::Wrk => "`wrk -t1 -c1 --latency`; ms/request = 1000 / req/s",
            S1Client::Ab => "`ab -k -c 1 -t`; ms/request = time / requests",
        },
        s1.secs,
        o.s1_warm
    );
    let _ = writeln!(r, "![S1 plot]({svg_name})\n");
    s1_cell_table(
        r,
        s1,
        "ms per request",
        |c| c.ms,
        |v| format!("{} ±{}%", f(median(v), 4), f(spread_pct(v), 1)),
    );
    s1_cell_table(
        r,
        s1,
        "varnishd child CPU per request (µs, utime + stime)",
        |c| c.cpu_us,
        |v| f(median(v), 1),
    );

    let rtt = |k: usize, p50: bool| -> Vec<f64> {
        s1.rtt
            .iter()
            .map(|x| if p50 { x[k].0 } else { x[k].1 } * 1000.0)
            .collect()
    };
    let _ = writeln!(
        r,
        "### Per-command slope (least squares over N = 0, 1, 2, 4, 8)\n"
    );
    let _ = writeln!(
        r,
        "| command | ours µs | theirs µs | ours / theirs | Redis RTT p50 µs (avg) | ours / RTT | theirs / RTT | blocking RTT p50 µs (mean) | ours / blocking p50 | ours per rep | theirs per rep |"
    );
    let _ = writeln!(r, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|");
    let blocking = |k: usize, p50: bool| -> Vec<f64> {
        s1.rtt_blocking
            .iter()
            .map(|x| if p50 { x[k].0 } else { x[k].1 } * 1000.0)
            .collect()
    };
    let rtt_names = ["SET", "GET", "EVALSHA"];
    for (ci, cmd) in S1_CMDS.iter().enumerate() {
        let ours = s1.slopes(0, ci, |c| c.ms, 1000.0);
        let theirs = s1.slopes(1, ci, |c| c.ms, 1000.0);
        let (mo, mt) = (median(&ours), median(&theirs));
        let rtt_p50 = median(&rtt(ci, true));
        let rtt_avg = median(&rtt(ci, false));
        let b_p50 = median(&blocking(ci, true));
        let b_mean = median(&blocking(ci, false));
        let list = |v: &[f64]| v.iter().map(|x| f(*x, 1)).collect::<Vec<_>>().join(", ");
        let _ = writeln!(
            r,
            "| {cmd} | {} | {} | {} | {} ({}) {} | {} | {} | {} ({}) | {} | {} | {} |",
            f(mo, 1),
            f(mt, 1),
            f(ratio(mo, mt), 3),
            f(rtt_p50, 0),
            f(rtt_avg, 0),
            rtt_names[ci],
            f(ratio(mo, rtt_p50), 3),
            f(ratio(mt, rtt_p50), 3),
            f(b_p50, 1),
            f(b_mean, 1),
            f(ratio(mo, b_p50), 3),
            list(&ours),
            list(&theirs)
        );
        t.add(format!(
            "S1 latency {cmd}: ours/theirs slope {} (target ≤ 1.0): {}; ours slope / Redis {} RTT p50 {} (target ≤ 1.05): {} \
             (vs the blocking-socket RTT p50: {})",
            f(ratio(mo, mt), 3),
            yes_no(ratio(mo, mt) <= 1.0),
            rtt_names[ci],
            f(ratio(mo, rtt_p50), 3),
            yes_no(ratio(mo, rtt_p50) <= 1.05),
            f(ratio(mo, b_p50), 3)
        ));
    }
    let _ = writeln!(r);
    let _ = writeln!(
        r,
        "Redis RTT per repetition (redis-benchmark -c 1, p50 / avg µs): {}\n",
        s1.rtt
            .iter()
            .map(|x| x
                .iter()
                .zip(rtt_names)
                .map(|(v, n)| format!("{n} {}/{}", f(v.0 * 1000.0, 0), f(v.1 * 1000.0, 0)))
                .collect::<Vec<_>>()
                .join(", "))
            .collect::<Vec<_>>()
            .join("; ")
    );
    let _ = writeln!(
        r,
        "redis-benchmark prints its latencies in steps of about 8 µs at this size (see the \
         values above), too coarse for a 5 % target; the blocking RTT is the harness's own \
         client (one connection with TCP_NODELAY, one request at a time, each timed, {} \
         requests per command), which is also how a worker talks to Redis.\n",
        o.rb_requests
    );
    if o.s1_client == S1Client::Wrk {
        let _ = writeln!(
            r,
            "Robustness check: the same slopes from wrk's median latency (p50) instead of \
             the mean, which a few scheduling stalls cannot move (µs, median over repetitions): {}\n",
            S1_CMDS
                .iter()
                .enumerate()
                .map(|(ci, cmd)| {
                    let ours = median(&s1.slopes(0, ci, |c| c.load.p50_ms, 1000.0));
                    let theirs = median(&s1.slopes(1, ci, |c| c.load.p50_ms, 1000.0));
                    format!(
                        "{cmd} ours {} / theirs {} (ratio {})",
                        f(ours, 1),
                        f(theirs, 1),
                        f(ratio(ours, theirs), 3)
                    )
                })
                .collect::<Vec<_>>()
                .join("; ")
        );
    }
    let _ = writeln!(r, "### varnishd child CPU per command (slope, µs)\n");
    let _ = writeln!(
        r,
        "| command | ours µs | theirs µs | ours / theirs | ours per rep | theirs per rep |"
    );
    let _ = writeln!(r, "|---|---:|---:|---:|---|---|");
    for (ci, cmd) in S1_CMDS.iter().enumerate() {
        let ours = s1.slopes(0, ci, |c| c.cpu_us, 1.0);
        let theirs = s1.slopes(1, ci, |c| c.cpu_us, 1.0);
        let (mo, mt) = (median(&ours), median(&theirs));
        let list = |v: &[f64]| v.iter().map(|x| f(*x, 1)).collect::<Vec<_>>().join(", ");
        let _ = writeln!(
            r,
            "| {cmd} | {} | {} | {} | {} | {} |",
            f(mo, 1),
            f(mt, 1),
            f(ratio(mo, mt), 3),
            list(&ours),
            list(&theirs)
        );
        t.add(format!(
            "S1 CPU {cmd}: ours/theirs CPU per command {} (target ≤ 0.8): {}",
            f(ratio(mo, mt), 3),
            yes_no(ratio(mo, mt) <= 0.8)
        ));
    }
    let _ = writeln!(r);
    let _ = writeln!(r, "Sanity per repetition (ours / theirs): db.stats() commands.failed; db.stats() connections.total; Redis total_connections_received during the measured runs ({} requests per VMOD and repetition, all cells):\n",
        s1.cells.first().map_or(0, |rep| rep[0].iter().filter(|((c, n), _)| *n > 0 || *c == 0).map(|(_, cell)| cell.load.requests).sum::<u64>()));
    for (i, s) in s1.sanity.iter().enumerate() {
        let _ = writeln!(
            r,
            "- rep {}: failed {} / {}; connections {} / {}; received {} / {}",
            i + 1,
            opt(s[0].failed),
            opt(s[1].failed),
            opt(s[0].connections),
            opt(s[1].connections),
            opt(s[0].received),
            opt(s[1].received)
        );
    }
    let _ = writeln!(r);
}

fn load_table(
    r: &mut String,
    rows: &[(RunCfg, [Run; 2])],
    first_col: &str,
    label: fn(&RunCfg) -> String,
) {
    let _ = writeln!(
        r,
        "| {first_col} | req/s ours | req/s theirs | ours / theirs | non-2xx o / t | socket err o / t | p50 ms o / t | p99 ms o / t | MAIN.threads o / t | Redis clients o / t | connections received o / t | workers.blocked o / t | commands.failed o / t | RSS MiB o / t | CPU µs/req o / t |"
    );
    let _ = writeln!(
        r,
        "|---|---:|---:|---:|---|---|---|---|---|---|---|---|---|---|---|"
    );
    for (cfg, [o, t]) in rows {
        let mib = |kb: Option<u64>| kb.map_or("–".into(), |k| f(k as f64 / 1024.0, 1));
        let _ = writeln!(
            r,
            "| {} | {} | {} | {} | {} / {} | {} / {} | {} / {} | {} / {} | {} / {} | {} / {} | {} / {} | {} / {} | {} / {} | {} / {} | {} / {} |",
            label(cfg),
            f(o.load.rps, 0),
            f(t.load.rps, 0),
            f(ratio(o.load.rps, t.load.rps), 3),
            o.load.non2xx,
            t.load.non2xx,
            o.load.socket_errors,
            t.load.socket_errors,
            f(o.load.p50_ms, 2),
            f(t.load.p50_ms, 2),
            f(o.load.p99_ms, 1),
            f(t.load.p99_ms, 1),
            opt(o.threads_mid),
            opt(t.threads_mid),
            opt(o.redis_clients_mid),
            opt(t.redis_clients_mid),
            opt(o.conns_received),
            opt(t.conns_received),
            opt(o.blocked),
            opt(t.blocked),
            opt(o.cmds_failed),
            opt(t.cmds_failed),
            mib(o.rss_kb),
            mib(t.rss_kb),
            f(o.cpu_us_per_req, 1),
            f(t.cpu_us_per_req, 1)
        );
    }
    let _ = writeln!(r);
}

fn s2_section(
    r: &mut String,
    rows: &[(RunCfg, [Run; 2])],
    o: &Opts,
    svg_name: &str,
    t: &mut Targets,
) {
    let _ = writeln!(r, "## S2: private vs shared (seed 000)\n");
    let _ = writeln!(
        r,
        "SET + GET + EVAL per request with the seed's reply checks (500 / 501 / 502 on a wrong reply type), \
         `wrk -t{} -c{} -d{}s --latency` after a {} s warm-up with the same load; one fresh varnishd per \
         column and VMOD, ours first. \"no Redis\": the VMOD is imported and `db` created, no command runs. \
         MAIN.threads and Redis connected_clients are sampled once mid-run; connections received is the \
         delta of Redis `total_connections_received` over the measured run; workers.blocked is read from \
         `db.stats()` before and after the measured run (the delta); RSS is the varnishd child's VmRSS after the run.\n",
        o.s2_threads, o.s2_conns, o.s2_secs, o.s2_warm
    );
    let _ = writeln!(r, "![S2 plot]({svg_name})\n");
    load_table(r, rows, "column", RunCfg::column);
    let modes = columns(rows);
    let reps = rows.first().map_or(1, |(c, _)| c.reps);
    if reps > 1 {
        let _ = writeln!(
            r,
            "Median req/s over the {reps} repetitions: {}\n",
            modes
                .iter()
                .map(|&m| {
                    let (o, t) = (
                        median_rps(rows, |c| c.mode == m, 0),
                        median_rps(rows, |c| c.mode == m, 1),
                    );
                    format!(
                        "{} {} / {} (×{})",
                        m.label(),
                        f(o, 0),
                        f(t, 0),
                        f(ratio(o, t), 3)
                    )
                })
                .collect::<Vec<_>>()
                .join("; ")
        );
    }
    let mut all = true;
    let mut worst = (f64::INFINITY, String::new());
    for &m in modes.iter().filter(|m| **m != Mode::NoRedis) {
        let q = ratio(
            median_rps(rows, |c| c.mode == m, 0),
            median_rps(rows, |c| c.mode == m, 1),
        );
        all &= q >= 1.1;
        if q < worst.0 {
            worst = (q, m.label());
        }
    }
    t.add(format!(
        "S2 req/s ours ≥ 1.1 × theirs in every Redis column{} (lowest: {} at {}): {}",
        if reps > 1 { ", medians" } else { "" },
        f(worst.0, 3),
        worst.1,
        yes_no(all)
    ));
    let non2xx: u64 = rows.iter().map(|(_, r)| r[0].load.non2xx).sum();
    t.add(format!(
        "S2 zero non-2xx for ours (total {non2xx}): {}",
        yes_no(non2xx == 0)
    ));
    let find = |m: Mode| {
        rows.iter()
            .find(|(c, _)| c.mode == m)
            .map(|(_, r)| r[0].clone())
    };
    if let (Some(s10), Some(p)) = (find(Mode::Shared(10)), find(Mode::Private)) {
        let q = ratio(
            median_rps(rows, |c| c.mode == Mode::Shared(10), 0),
            median_rps(rows, |c| c.mode == Mode::Private, 0),
        );
        t.add(format!(
            "S2 ours shared(10) / ours private = {} (target ≥ 0.95): {}; Redis clients mid-run {} vs {}",
            f(q, 3),
            yes_no(q >= 0.95),
            opt(s10.redis_clients_mid),
            opt(p.redis_clients_mid)
        ));
    }
    if let Some((_, [o, th])) = rows.iter().find(|(c, _)| c.mode == Mode::Private) {
        t.add(format!(
            "S2 private: Redis connections received during the run, ours {} vs theirs {} for {} / {} requests",
            opt(o.conns_received),
            opt(th.conns_received),
            o.load.requests,
            th.load.requests
        ));
    }
    let rss: Vec<f64> = rows
        .iter()
        .filter_map(|(_, r)| Some(ratio(r[0].rss_kb? as f64, r[1].rss_kb? as f64)))
        .collect();
    let _ = writeln!(
        r,
        "RSS ours / theirs: median {} (range {} – {}).\n",
        f(median(&rss), 2),
        f(min_max(&rss).0, 2),
        f(min_max(&rss).1, 2)
    );
}

fn s3_section(r: &mut String, rows: &[(RunCfg, [Run; 2])], o: &Opts) {
    let _ = writeln!(r, "## S3: connections (seed 003)\n");
    let _ = writeln!(
        r,
        "The S2 load (`wrk -t{} -c{} -d{}s`) on private and shared (max_connections=10), \
         TCP (127.0.0.1) vs UNIX socket location, `connection_ttl` 0 (keep) vs 1 s (reconnect every second). \
         The TCP / ttl 0 rows repeat the S2 columns in a later varnishd: compare them to see the run-to-run noise.\n",
        o.s2_threads, o.s2_conns, o.s2_secs
    );
    load_table(r, rows, "configuration", RunCfg::label);
    let get = |mode: Mode, unix: bool, ttl: u32, vi: usize| {
        median_rps(
            rows,
            |c| c.mode == mode && c.unix == unix && c.ttl == ttl,
            vi,
        )
    };
    let _ = writeln!(r, "| ratio | ours | theirs |");
    let _ = writeln!(r, "|---|---:|---:|");
    for mode in [Mode::Private, Mode::Shared(10)] {
        for ttl in [0, 1] {
            let _ = writeln!(
                r,
                "| {}, ttl {ttl}: unix / tcp | {} | {} |",
                mode.label(),
                f(ratio(get(mode, true, ttl, 0), get(mode, false, ttl, 0)), 3),
                f(ratio(get(mode, true, ttl, 1), get(mode, false, ttl, 1)), 3)
            );
        }
        for unix in [false, true] {
            let _ = writeln!(
                r,
                "| {}, {}: ttl 1 / ttl 0 | {} | {} |",
                mode.label(),
                if unix { "unix" } else { "tcp" },
                f(ratio(get(mode, unix, 1, 0), get(mode, unix, 0, 0)), 3),
                f(ratio(get(mode, unix, 1, 1), get(mode, unix, 0, 1)), 3)
            );
        }
    }
    let _ = writeln!(r);
}

// ---------------------------------------------------------------------------

/// `$TMPDIR/vmod-redis-system.<pid>` (0755), removed by `cleanup_all`.
fn make_tmp() -> Res<PathBuf> {
    let base = support::base_dir()?;
    support::register_dir(&base);
    Ok(base)
}

fn run(o: Opts) -> Res<()> {
    let started = Instant::now();
    let load_start = fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let load_start = load_start
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ");
    let theirs = preflight(&o)?;
    let tmp = make_tmp()?;
    let built = match &o.ours_so {
        Some(p) => p.clone(),
        None => build_ours()?,
    };
    let ours_dir = tmp.join("ours");
    make_dir(&ours_dir)?;
    let ours_so = support::install_so(&built, &ours_dir)?;
    let mut env = Env {
        tmp: tmp.clone(),
        ours_so,
        seq: 0,
    };
    let redis_dir = tmp.join("redis");
    make_dir(&redis_dir)?;
    let mut redis = Redis::start(&redis_dir)?;
    eprintln!(
        "system: redis-server on 127.0.0.1:{} and {}; temporary files in {}",
        redis.port,
        redis.sock.display(),
        tmp.display()
    );

    let s1 = if o.s1 {
        Some(run_s1(&o, &mut env, &mut redis)?)
    } else {
        None
    };
    let s2 = if o.s2 {
        Some(run_pairs(&o, &mut env, &mut redis, &s2_cfgs(&o))?)
    } else {
        None
    };
    let s3 = if o.s3 {
        Some(run_pairs(&o, &mut env, &mut redis, &s3_cfgs())?)
    } else {
        None
    };
    redis.stop();

    // Report.
    let (date, time) = utc_now();
    let host = fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap_or_else(|_| "host".into())
        .trim()
        .to_owned();
    // Only a full run takes the plain name (the one the README links to).
    let kind = match (o.quick, o.given.is_empty()) {
        (true, _) => "quick",
        (false, true) => "full",
        (false, false) => "custom",
    };
    let base = format!(
        "{date}-{host}{}",
        if kind == "full" {
            String::new()
        } else {
            format!("-{kind}")
        }
    );
    fs::create_dir_all(&o.out_dir).map_err(|e| format!("{}: {e}", o.out_dir.display()))?;
    let elapsed = started.elapsed().as_secs();
    let mut r = String::new();
    let _ = writeln!(r, "# vmod-redis vs the C VMOD: system benchmark\n");
    let _ = writeln!(
        r,
        "{date} {time} UTC on `{host}`; {} run (`cargo bench --bench system{}`), {} min {} s. \
         Generated by `benches/system.rs`: ours is this repository's VMOD, theirs the C VMOD \
         (libvmod-redis, Debian `{THEIRS_PKG}`). Ratios are ours / theirs.\n",
        kind,
        if o.given.is_empty() {
            String::new()
        } else {
            format!(" -- {}", o.given.join(" "))
        },
        elapsed / 60,
        elapsed % 60
    );
    let mut targets = Targets { lines: Vec::new() };
    let mut body = String::new();
    if let Some(s1) = &s1 {
        let name = format!("{base}-s1.svg");
        fs::write(o.out_dir.join(&name), s1_svg(s1)).map_err(|e| e.to_string())?;
        s1_section(&mut body, s1, &o, &name, &mut targets);
    }
    if let Some(s2) = &s2 {
        let name = format!("{base}-s2.svg");
        let title = format!(
            "S2: req/s, wrk -t{} -c{} -d{}s, SET+GET+EVAL{}",
            o.s2_threads,
            o.s2_conns,
            o.s2_secs,
            if o.s2_reps > 1 {
                format!("; median of {} runs, whiskers min-max", o.s2_reps)
            } else {
                String::new()
            }
        );
        fs::write(o.out_dir.join(&name), s2_svg(s2, &title)).map_err(|e| e.to_string())?;
        s2_section(&mut body, s2, &o, &name, &mut targets);
    }
    if let Some(s3) = &s3 {
        s3_section(&mut body, s3, &o);
    }
    if !targets.lines.is_empty() {
        let _ = writeln!(r, "## Targets of issue 3\n");
        for line in &targets.lines {
            let _ = writeln!(r, "- {line}");
        }
        let _ = writeln!(r);
    }
    r.push_str(&body);
    machine_section(&mut r, &load_start);
    versions_section(&mut r, &env, &theirs);
    commands_section(&mut r);
    let _ = writeln!(r, "<details><summary>VCL of S1 (ours; theirs says <code>import redis;</code>)</summary>\n\n```vcl\n{}```\n</details>\n",
        s1_vcl("import redis from \"/path/to/libvmod_redis.so\";", "127.0.0.1:PORT"));
    let _ = writeln!(r, "<details><summary>VCL of S2 / S3 (private column; the others change <code>shared_connections</code>, <code>max_connections</code>, <code>location</code>, <code>connection_ttl</code>)</summary>\n\n```vcl\n{}```\n</details>",
        s2_vcl("import redis;", &db_new("127.0.0.1:PORT", 0, false, 1), true));
    let md = o.out_dir.join(format!("{base}.md"));
    fs::write(&md, &r).map_err(|e| e.to_string())?;
    println!("{}", targets.lines.join("\n"));
    println!(
        "system: report written to {} ({} min {} s)",
        md.display(),
        elapsed / 60,
        elapsed % 60
    );
    Ok(())
}

fn main() {
    let opts = match parse_opts() {
        Ok(Some(o)) => o,
        Ok(None) => return,
        Err(e) => {
            eprintln!("system: {e}");
            std::process::exit(2);
        }
    };
    if let Err(e) = ctrlc::set_handler(|| {
        eprintln!("\nsystem: interrupted: stopping every process started");
        cleanup_all();
        std::process::exit(130);
    }) {
        eprintln!("system: cannot install the Ctrl-C handler: {e}");
    }
    let guard = CleanupGuard;
    let result = run(opts);
    drop(guard);
    if let Err(e) = result {
        eprintln!("system: {e}");
        std::process::exit(1);
    }
}
