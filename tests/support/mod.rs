//! Process plumbing shared by `tests/vtc/`, `tests/faults/` and
//! `benches/system/` (the bench includes this file with
//! `#[path = "../../tests/support/mod.rs"] mod support;`).
//!
//! * the temporary directory `$TMPDIR/vmod-redis-<target>.<pid>` (mode 0755,
//!   varnishd drops privileges), one directory per trial, the .so built with
//!   `cargo build --lib` for this binary's profile and copied (0644) into it;
//! * every process started, registered by PID and stopped by PID (SIGTERM,
//!   SIGKILL after a grace period) on every way out;
//! * free loopback ports, waiting for a process to come up, redis-server
//!   started (`redis_server.rs`, shared with the unit tests and
//!   benches/micro.rs), a minimal RESP client (whole replies: `resp.rs`),
//!   varnishd with its cache child, a keep-alive HTTP client (`http.rs`).
//!
//! Messages are prefixed with the target's name (`vtc`, `faults`, `system`).
//! Each target uses a subset of this module.
#![allow(dead_code, reason = "each target uses a subset of this module")]

use parking_lot::{Mutex, MutexGuard};
use std::ffi::OsString;
use std::fs;
use std::io::{BufRead, BufReader, Read};
use std::net::Ipv4Addr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

mod http;
mod redis_server;
mod resp;
#[allow(unused_imports, reason = "each target uses a subset")]
pub use http::{HttpConn, HttpResponse};
#[allow(unused_imports, reason = "each target uses a subset")]
pub use redis_server::{
    cli_program, free_port, on_free_port, server_program, wait_ready, OnPort, RedisConfig,
    RedisServer, TlsPort, Waited,
};
#[allow(unused_imports, reason = "each target uses a subset")]
pub use resp::{info_field, read_value, redis_cmd, redis_cmd_at, RedisConn, Resp};

pub type Res<T> = Result<T, String>;

/// The target this module is compiled into: `vtc`, `faults` or `system`.
pub const PROG: &str = env!("CARGO_CRATE_NAME");
pub const SO_NAME: &str = "libvmod_redis.so";

// ---------------------------------------------------------------------------
// Every process we start (and directories to remove), stopped by PID.

struct Registry {
    pids: Vec<(i32, String)>,
    dirs: Vec<PathBuf>,
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    pids: Vec::new(),
    dirs: Vec::new(),
});

fn registry() -> MutexGuard<'static, Registry> {
    REGISTRY.lock()
}

pub fn register_pid(pid: i32, name: &str) {
    registry().pids.push((pid, name.to_owned()));
}

pub fn unregister_pid(pid: i32) {
    registry().pids.retain(|(p, _)| *p != pid);
}

/// A directory `cleanup_all` removes.
pub fn register_dir(dir: &Path) {
    registry().dirs.push(dir.to_path_buf());
}

/// Alive and not a zombie.
pub fn alive(pid: i32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z'))
    })
}

#[allow(unsafe_code, reason = "libc::kill; std has no way to signal a PID")]
pub fn signal(pid: i32, sig: i32) {
    if pid > 0 {
        // SAFETY: kill(2) on a PID this process started; no memory involved.
        unsafe {
            libc::kill(pid, sig);
        }
    }
}

/// SIGCONT (a frozen process ignores SIGTERM) and SIGTERM to each PID, up
/// to `grace` for them to go, then SIGKILL.
pub fn stop_pids(list: &[(i32, String)], grace: Duration) {
    for (pid, _) in list.iter().rev() {
        signal(*pid, libc::SIGCONT);
        signal(*pid, libc::SIGTERM);
    }
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline && list.iter().any(|(pid, _)| alive(*pid)) {
        thread::sleep(Duration::from_millis(20));
    }
    for (pid, name) in list {
        if alive(*pid) {
            eprintln!("{PROG}: {name} (pid {pid}) ignored SIGTERM: SIGKILL");
            signal(*pid, libc::SIGKILL);
        }
    }
}

/// Stops every registered process (10 s grace) and removes the registered
/// directories.
pub fn cleanup_all() {
    let (pids, dirs) = {
        let mut r = registry();
        (std::mem::take(&mut r.pids), std::mem::take(&mut r.dirs))
    };
    stop_pids(&pids, Duration::from_secs(10));
    for dir in dirs {
        let _ = fs::remove_dir_all(dir);
    }
}

/// Spawns and registers the PID.
pub fn spawn(cmd: &mut Command, name: &str) -> Res<Child> {
    let child = cmd.spawn().map_err(|e| {
        format!(
            "start {name} ({:?}; installed? see scripts/deps): {e}",
            cmd.get_program()
        )
    })?;
    register_pid(child.id() as i32, name);
    Ok(child)
}

/// Stops a registered child by PID (SIGTERM, SIGKILL after `grace`), reaps
/// it and forgets its PID.
pub fn stop_child(mut child: Child, name: &str, grace: Duration) {
    let pid = child.id() as i32;
    stop_pids(&[(pid, name.to_owned())], grace);
    let _ = child.wait();
    unregister_pid(pid);
}

/// Runs `cmd` to its end (stdin null, stdout and stderr captured, its PID
/// registered meanwhile), at most `bound` when given (then SIGKILL), and
/// returns (success, stdout + stderr).
pub fn run_capture(cmd: &mut Command, name: &str, bound: Option<Duration>) -> Res<(bool, String)> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = spawn(cmd, name)?;
    let pid = child.id() as i32;
    // Both pipes read at once: a full one would stall the command.
    let out = read_to_end(child.stdout.take());
    let err = read_to_end(child.stderr.take());
    let status = match bound {
        None => child.wait().ok(),
        Some(bound) => {
            let deadline = Instant::now() + bound;
            loop {
                match child.try_wait() {
                    Ok(Some(status)) => break Some(status),
                    Ok(None) if Instant::now() < deadline => {
                        thread::sleep(Duration::from_millis(5))
                    }
                    _ => {
                        let _ = child.kill();
                        let _ = child.wait();
                        break None;
                    }
                }
            }
        }
    };
    unregister_pid(pid);
    let mut text = String::from_utf8_lossy(&out.join().unwrap_or_default()).into_owned();
    text.push_str(&String::from_utf8_lossy(&err.join().unwrap_or_default()));
    match (status, bound) {
        (Some(status), _) => Ok((status.success(), text)),
        (None, Some(bound)) => Err(format!(
            "{name} still running after {bound:?}: killed\n{text}"
        )),
        (None, None) => Err(format!("{name}: wait failed\n{text}")),
    }
}

/// A thread reading `pipe` to its end.
fn read_to_end(pipe: Option<impl Read + Send + 'static>) -> thread::JoinHandle<Vec<u8>> {
    thread::spawn(move || {
        let mut bytes = Vec::new();
        if let Some(mut pipe) = pipe {
            let _ = pipe.read_to_end(&mut bytes);
        }
        bytes
    })
}

/// SIGKILL (no SIGTERM first: a trial's crash of Redis), reaped, its PID
/// forgotten.
pub fn kill_child(mut child: Child) {
    let _ = child.kill();
    let _ = child.wait();
    unregister_pid(child.id() as i32);
}

/// Whether the server (or Sentinel) at `host`:`port` is up, which every
/// harness waits for: it answers PING with anything but `-LOADING`
/// (`+PONG`; `-NOAUTH` from one whose password was not given). What it
/// said instead is the error.
pub fn pings(host: Ipv4Addr, port: u16, password: Option<&str>) -> Res<()> {
    match redis_cmd_at(host, port, password, &["PING"]) {
        Ok(r) if !r.is_empty() && !r.starts_with("-LOADING") => Ok(()),
        Ok(r) => Err(format!("PING: {r:?}")),
        Err(e) => Err(format!("PING: {e}")),
    }
}

// ---------------------------------------------------------------------------
// Waiting for a server to reach a state

/// Asks `check` every `poll` until it says Ok, or `deadline` has passed:
/// then the last thing it said.
pub fn poll_until(
    deadline: Instant,
    poll: Duration,
    mut check: impl FnMut() -> Res<()>,
) -> Res<()> {
    loop {
        let last = match check() {
            Ok(()) => return Ok(()),
            Err(e) => e,
        };
        if Instant::now() >= deadline {
            return Err(last);
        }
        thread::sleep(poll);
    }
}

/// Whether the replica at `host`:`port` has its link to its master up
/// (`master_link_status:up`); if not, what `INFO replication` said.
pub fn replica_linked(host: Ipv4Addr, port: u16, password: Option<&str>) -> Res<()> {
    match redis_cmd_at(host, port, password, &["INFO", "replication"]) {
        Ok(r) if r.contains("master_link_status:up") => Ok(()),
        Ok(r) => Err(r),
        Err(e) => Err(e.to_string()),
    }
}

// ---------------------------------------------------------------------------
// Files and directories

/// `create_dir_all`, then mode 0755 (varnishd drops privileges).
pub fn make_dir(dir: &Path) -> Res<()> {
    fs::create_dir_all(dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
    fs::set_permissions(dir, fs::Permissions::from_mode(0o755))
        .map_err(|e| format!("chmod {}: {e}", dir.display()))
}

/// Writes a file readable by all (0644).
pub fn write_public(path: &Path, text: &str) -> Res<()> {
    fs::write(path, text).map_err(|e| format!("write {}: {e}", path.display()))?;
    fs::set_permissions(path, fs::Permissions::from_mode(0o644))
        .map_err(|e| format!("chmod {}: {e}", path.display()))
}

/// Writes a script runnable by all (0755).
pub fn write_script(path: &Path, text: &str) -> Res<()> {
    fs::write(path, text).map_err(|e| format!("write {}: {e}", path.display()))?;
    fs::set_permissions(path, fs::Permissions::from_mode(0o755))
        .map_err(|e| format!("chmod {}: {e}", path.display()))
}

/// `s` as one shell word: as it is when that is safe, else single-quoted.
pub fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:=,@%+".contains(c))
    {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// `cmd` as a shell command line (for a script, or to show what ran).
pub fn command_line(cmd: &Command) -> String {
    let mut line = shell_quote(&cmd.get_program().to_string_lossy());
    for arg in cmd.get_args() {
        line.push(' ');
        line.push_str(&shell_quote(&arg.to_string_lossy()));
    }
    line
}

/// Copies the .so `src` into `dir` as `libvmod_redis.so`, mode 0644.
pub fn install_so(src: &Path, dir: &Path) -> Res<PathBuf> {
    if !src.is_file() {
        return Err(format!("{}: no such file", src.display()));
    }
    let dst = dir.join(SO_NAME);
    fs::copy(src, &dst).map_err(|e| format!("copy {} to {}: {e}", src.display(), dst.display()))?;
    fs::set_permissions(&dst, fs::Permissions::from_mode(0o644))
        .map_err(|e| format!("chmod {}: {e}", dst.display()))?;
    Ok(dst)
}

/// The last `n` lines of `text`.
pub fn tail(text: &str, n: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(n)..].join("\n")
}

/// The last `n` lines of a file (empty when unreadable).
pub fn tail_file(path: &Path, n: usize) -> String {
    let text = fs::read(path)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default();
    tail(&text, n)
}

static BASE_DIR: OnceLock<Res<PathBuf>> = OnceLock::new();
static VMOD_SO: OnceLock<Res<PathBuf>> = OnceLock::new();
static TRIAL_SEQ: AtomicUsize = AtomicUsize::new(0);

/// `$TMPDIR/vmod-redis-<target>.<pid>`, mode 0755, holding the .so copy and
/// one directory per trial. Created on first use.
pub fn base_dir() -> Res<PathBuf> {
    BASE_DIR
        .get_or_init(|| {
            let dir =
                std::env::temp_dir().join(format!("vmod-redis-{PROG}.{}", std::process::id()));
            let _ = fs::remove_dir_all(&dir);
            make_dir(&dir)?;
            Ok(dir)
        })
        .clone()
}

/// The base directory if it was created (for removing it at the end).
pub fn created_base_dir() -> Option<PathBuf> {
    BASE_DIR.get().and_then(|r| r.clone().ok())
}

/// A fresh 0755 directory for one trial: `<base>/<seq>-<name>`.
pub fn trial_dir(name: &str) -> Res<PathBuf> {
    let dir = base_dir()?.join(format!(
        "{}-{name}",
        TRIAL_SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    make_dir(&dir)?;
    Ok(dir)
}

/// The installed (copied, 0644) .so: `$VMOD_REDIS_SO` when set, else built
/// first with `cargo build --lib`. Once per run.
pub fn vmod_so() -> Res<PathBuf> {
    VMOD_SO
        .get_or_init(|| {
            let src = match std::env::var_os("VMOD_REDIS_SO").filter(|v| !v.is_empty()) {
                Some(p) => PathBuf::from(p),
                None => build_so()?,
            };
            install_so(&src, &base_dir()?)
        })
        .clone()
}

static VMOD_SO_COPY: OnceLock<Res<PathBuf>> = OnceLock::new();

/// A second build of the module, as after an upgrade with old VCLs still
/// loaded: [`vmod_so`] with another file id (varnishd caches and loads a
/// VMOD by file id, so this one is loaded beside the first, with its own
/// code and statics), in `<base>/copy/`. Once per run.
pub fn vmod_so_copy() -> Res<PathBuf> {
    VMOD_SO_COPY
        .get_or_init(|| {
            let src = vmod_so()?;
            let mut bytes = fs::read(&src).map_err(|e| format!("read {}: {e}", src.display()))?;
            let at = file_id_offset(&bytes)
                .ok_or_else(|| format!("{}: no single file id found", src.display()))?;
            // Same length, another value: the first digit moved by one, in
            // every copy of the id (Varnish 7.7 also reads it from the
            // module's JSON description).
            let id = bytes[at..at + FILE_ID_LEN].to_vec();
            let mut other = id.clone();
            other[0] = if other[0] == b'0' { b'1' } else { b'0' };
            let mut from = 0;
            while let Some(pos) = bytes[from..]
                .windows(FILE_ID_LEN)
                .position(|w| w == id.as_slice())
            {
                let pos = from + pos;
                bytes[pos..pos + FILE_ID_LEN].copy_from_slice(&other);
                from = pos + FILE_ID_LEN;
            }
            let dir = base_dir()?.join("copy");
            make_dir(&dir)?;
            let dst = dir.join(SO_NAME);
            fs::write(&dst, &bytes).map_err(|e| format!("write {}: {e}", dst.display()))?;
            fs::set_permissions(&dst, fs::Permissions::from_mode(0o644))
                .map_err(|e| format!("chmod {}: {e}", dst.display()))?;
            Ok(dst)
        })
        .clone()
}

/// Length of vmodtool's file id: 64 lowercase hex digits.
const FILE_ID_LEN: usize = 64;

/// Where the file id (a C string of its own) is in the .so; `None` unless
/// there is exactly one such string.
fn file_id_offset(bytes: &[u8]) -> Option<usize> {
    const LEN: usize = FILE_ID_LEN;
    let is_id = |at: usize| {
        bytes.get(at + LEN) == Some(&0)
            && (at == 0 || bytes[at - 1] == 0)
            && bytes[at..at + LEN]
                .iter()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b))
    };
    let mut found = (0..bytes.len().saturating_sub(LEN)).filter(|&at| is_id(at));
    let first = found.next()?;
    found.next().is_none().then_some(first)
}

// ---------------------------------------------------------------------------
// Building the .so

/// Where cargo put this binary: `<target-dir>[/<triple>]/<profile-dir>/deps/NAME-HASH`.
struct BuildLayout {
    target_dir: PathBuf,
    triple: Option<String>,
    profile_dir_name: String,
}

fn build_layout() -> Option<BuildLayout> {
    let exe = std::env::current_exe().ok()?;
    let deps = exe.parent()?;
    if deps.file_name()? != "deps" {
        return None;
    }
    let profile_dir = deps.parent()?;
    let profile_dir_name = profile_dir.file_name()?.to_str()?.to_string();
    let above = profile_dir.parent()?;
    // cargo marks the target directory with CACHEDIR.TAG.
    if above.join("CACHEDIR.TAG").is_file() {
        return Some(BuildLayout {
            target_dir: above.to_path_buf(),
            triple: None,
            profile_dir_name,
        });
    }
    let top = above.parent()?;
    if top.join("CACHEDIR.TAG").is_file() {
        return Some(BuildLayout {
            target_dir: top.to_path_buf(),
            triple: Some(above.file_name()?.to_str()?.to_string()),
            profile_dir_name,
        });
    }
    None
}

/// `cargo build --lib` for the profile (and target) of this binary, into
/// its target directory, or `<target>/<prog>-harness` when that one is
/// locked.
pub fn build_so() -> Res<PathBuf> {
    let manifest_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let layout = build_layout();
    let mut args: Vec<OsString> = ["build", "--lib", "--message-format=json-render-diagnostics"]
        .iter()
        .map(OsString::from)
        .collect();
    let target_dir = match &layout {
        Some(l) => {
            match l.profile_dir_name.as_str() {
                "debug" => {}
                "release" => args.push("--release".into()),
                other => {
                    args.push("--profile".into());
                    args.push(other.into());
                }
            }
            if let Some(t) = &l.triple {
                args.push("--target".into());
                args.push(t.into());
            }
            l.target_dir.clone()
        }
        None => std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| manifest_dir.join("target")),
    };
    match cargo_build(manifest_dir, &args, &target_dir)? {
        Some(so) => Ok(so),
        None => {
            let alt = target_dir.join(format!("{PROG}-harness"));
            eprintln!(
                "{PROG}: build directory locked, building into {} instead",
                alt.display()
            );
            cargo_build(manifest_dir, &args, &alt)?
                .ok_or_else(|| format!("{} is locked too", alt.display()))
        }
    }
}

/// Builds; `None` when cargo waits for the build directory's lock.
fn cargo_build(manifest_dir: &Path, args: &[OsString], target_dir: &Path) -> Res<Option<PathBuf>> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    eprintln!(
        "{PROG}: building {SO_NAME}: cargo {} --target-dir {}",
        args.iter()
            .map(|a| a.to_string_lossy())
            .collect::<Vec<_>>()
            .join(" "),
        target_dir.display()
    );
    let mut child = Command::new(&cargo)
        .args(args)
        .arg("--target-dir")
        .arg(target_dir)
        .current_dir(manifest_dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("run {}: {e}", cargo.to_string_lossy()))?;
    let stdout = child.stdout.take().expect("piped stdout");
    let out_reader = thread::spawn(move || {
        let mut s = String::new();
        let _ = BufReader::new(stdout).read_to_string(&mut s);
        s
    });
    let stderr = child.stderr.take().expect("piped stderr");
    let (tx, rx) = mpsc::channel::<String>();
    let err_reader = thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut err_text = String::new();
    let mut locked = false;
    for line in rx {
        eprintln!("{line}");
        if line.contains("Blocking waiting for file lock") && !line.contains("package cache") {
            locked = true;
            let _ = child.kill();
        }
        err_text.push_str(&line);
        err_text.push('\n');
    }
    let status = child.wait().map_err(|e| format!("wait for cargo: {e}"))?;
    let _ = err_reader.join();
    let json = out_reader.join().unwrap_or_default();
    if locked {
        return Ok(None);
    }
    if !status.success() {
        return Err(format!("cargo build --lib failed ({status}):\n{err_text}"));
    }
    artifact_path(&json)
        .map(Some)
        .ok_or_else(|| format!("cargo build did not report {SO_NAME}:\n{err_text}"))
}

/// The `.so` named in cargo's `compiler-artifact` JSON messages.
pub fn artifact_path(json: &str) -> Option<PathBuf> {
    json.lines()
        .filter(|l| l.contains("\"reason\":\"compiler-artifact\""))
        .find_map(|l| {
            let files = &l[l.find("\"filenames\":[")? + 13..];
            let files = &files[..files.find(']')?];
            files
                .split(',')
                .map(|f| f.trim().trim_matches('"'))
                .find(|f| f.ends_with(&format!("/{SO_NAME}")))
                .map(|f| PathBuf::from(f.replace("\\\\", "\\")))
        })
}

/// A number field of `/proc/<pid>/status` (`Threads`, `VmRSS` in kB...).
pub fn proc_status(pid: i32, key: &str) -> Option<u64> {
    status_field(&format!("/proc/{pid}/status"), key)
}

/// The number after `key:` in a `/proc` file of that shape (`status`,
/// `meminfo`), without its unit.
pub fn status_field(path: &str, key: &str) -> Option<u64> {
    fs::read_to_string(path).ok()?.lines().find_map(|l| {
        l.strip_prefix(key)
            .and_then(|r| r.strip_prefix(':'))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
    })
}

// ---------------------------------------------------------------------------
// varnishd

/// The varnishd child: the `cache-main` process whose parent is `manager`
/// (else any child of it).
pub fn find_cache_child(manager: i32) -> Option<i32> {
    let mut found = None;
    for entry in fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let parent = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<i32>().ok());
        if parent != Some(manager) {
            continue;
        }
        let comm = fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        if comm.trim() == "cache-main" {
            return Some(pid);
        }
        found = Some(pid);
    }
    found
}

/// A running `varnishd -F`: the manager and its cache child, both
/// registered; stopped by PID on `stop` and on drop.
pub struct Varnishd {
    manager: Option<Child>,
    pub manager_pid: i32,
    /// The child (cache process) found at start.
    pub child_pid: i32,
    pub port: u16,
}

impl Varnishd {
    /// `varnishd -F -a 127.0.0.1:<free port> -n WORKDIR -f VCL ARGS...`, its
    /// stdout and stderr to `log`; up when `ready(port)` (polled every 50 ms,
    /// 60 s at most) and its cache child is found. Another port is tried
    /// (3 in all) when the log says "Address already in use". `seen` gets
    /// each command line before it runs.
    pub fn start(
        workdir: &Path,
        vcl: &Path,
        log: &Path,
        args: &[String],
        ready: impl Fn(u16) -> bool,
        seen: impl Fn(&Command),
    ) -> Res<Varnishd> {
        on_free_port(3, |port| {
            let logfile = fs::File::create(log).map_err(|e| e.to_string())?;
            let errfile = logfile.try_clone().map_err(|e| e.to_string())?;
            let mut cmd = Command::new("varnishd");
            cmd.arg("-F")
                .arg("-a")
                .arg(format!("127.0.0.1:{port}"))
                .arg("-n")
                .arg(workdir)
                .arg("-f")
                .arg(vcl)
                .args(args)
                .stdin(Stdio::null())
                .stdout(logfile)
                .stderr(errfile);
            seen(&cmd);
            let mut manager = spawn(&mut cmd, "varnishd")?;
            let manager_pid = manager.id() as i32;
            let up = matches!(
                wait_ready(
                    &mut manager,
                    Duration::from_secs(60),
                    Duration::from_millis(50),
                    || ready(port),
                ),
                Waited::Ready
            );
            let child = if up {
                find_cache_child(manager_pid)
            } else {
                None
            };
            if let Some(pid) = child {
                register_pid(pid, "varnishd child");
            }
            let mut varnishd = Varnishd {
                manager: Some(manager),
                manager_pid,
                child_pid: child.unwrap_or(0),
                port,
            };
            if child.is_some() {
                return Ok(OnPort::Up(varnishd));
            }
            varnishd.stop();
            let output = format!(
                "varnishd did not start; its output:\n{}",
                tail_file(log, 40)
            );
            if output.contains("Address already in use") {
                Ok(OnPort::Retry(output))
            } else {
                Err(output)
            }
        })
    }

    /// SIGTERM to the manager (15 s, then SIGKILL), then to the child if
    /// it outlived it (5 s). Varnish 8.0's stop waits for every VCL
    /// reference, that is for every client connection still open (with
    /// no timeout): the child is SIGKILLed when the manager has not gone
    /// within [`STOP_WAIT`] (a test checks the child before it stops it).
    pub fn stop(&mut self) {
        if let Some(manager) = self.manager.take() {
            let manager_pid = manager.id() as i32;
            signal(manager_pid, libc::SIGTERM);
            let deadline = Instant::now() + STOP_WAIT;
            while Instant::now() < deadline && alive(manager_pid) {
                thread::sleep(Duration::from_millis(20));
            }
            if alive(manager_pid) && self.child_pid > 0 && alive(self.child_pid) {
                signal(self.child_pid, libc::SIGKILL);
            }
            stop_child(manager, "varnishd", Duration::from_secs(15));
            if self.child_pid > 0 && alive(self.child_pid) {
                stop_pids(
                    &[(self.child_pid, "varnishd child".into())],
                    Duration::from_secs(5),
                );
            }
            unregister_pid(self.child_pid);
        }
    }
}

/// How long [`Varnishd::stop`] lets the manager stop its child.
const STOP_WAIT: Duration = Duration::from_secs(2);

impl Drop for Varnishd {
    fn drop(&mut self) {
        self.stop();
    }
}
