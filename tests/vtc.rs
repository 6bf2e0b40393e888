//! varnishtest harness: one libtest-mimic trial per `vtc/*.vtc`, sorted by name.
//!
//! Run all: `cargo test --test vtc`; a subset: `cargo test --test vtc -- standalone`
//! (substring of the trial name, i.e. of the file name without `.vtc`).
//!
//! # The module under test
//! * `$VMOD_REDIS_SO`, when set, is used as is (no build). Handy with the
//!   system C VMOD to check a vtc: `/usr/lib/x86_64-linux-gnu/varnish/vmods/libvmod_redis.so`.
//! * Otherwise the harness runs `cargo build --lib` itself, once, before the
//!   first trial (`cargo test` does not build a `cdylib`-only lib for
//!   integration tests). It builds into the target directory and profile of
//!   this test binary (so `CARGO_TARGET_DIR`, `--release` and `--target` are
//!   followed) and, should cargo report that the build directory is locked,
//!   falls back to the separate target directory `<target>/vtc-harness`.
//!
//! varnishd drops privileges, so the .so is copied (0644) into a fresh 0755
//! directory under `$TMPDIR` (default `/tmp`) and the vtc files load it with
//! `import redis from "${vmod_so}";`.
//!
//! # Directives
//! A vtc file declares what it needs in comment lines starting with `#@ `
//! (leading blanks allowed), processed in file order:
//!
//! ```text
//! #@ redis NAME [ARG...]           standalone redis-server
//! #@ replica NAME MASTER [ARG...]  redis-server --replicaof <MASTER's address and port>
//! #@ redis-tls NAME [ARG...]       redis-server with a TLS port besides the plain one
//! #@ sentinel NAME MASTER [ARG...] redis-server --sentinel monitoring MASTER (tests/support/sentinel.rs)
//! #@ sentinel-tls NAME MASTER [ARG...]  the same with a TLS port besides the plain one
//! #@ cluster NAME [ARG...]         Redis Cluster, 3 masters x 1 replica (tests/support/cluster.rs)
//! #@ timeout SECONDS               varnishtest -t (default 120, or $VTC_TIMEOUT)
//! #@ env NAME VALUE                environment variable of varnishtest (and so varnishd); ${macros} of servers above expanded
//! ```
//!
//! Every server gets `--bind 127.0.0.1 --port P --save "" --appendonly no
//! --daemonize no --repl-diskless-sync-delay 0 --dir <dir>/NAME.data
//! --unixsocket <dir>/NAME.sock --unixsocketperm 777 --logfile <dir>/NAME.log`
//! (stdout and stderr go to `<dir>/NAME.out`), then the ARGs verbatim (a
//! later redis option overrides an earlier one). `--bind 127.X.Y.Z` among
//! the ARGs puts the server on another loopback address (so that
//! `redis.subnets()` masks can tell servers apart); the harness then
//! checks it, and makes its macros and its replicas' `--replicaof`, there. P is a free loopback port
//! (another is tried when redis reports "Address already in use"). A server
//! is up when it answers PING (`+PONG`, `-NOAUTH`, any reply but `-LOADING`)
//! within 10 s; a replica, in addition, when its `INFO replication` shows
//! `master_link_status:up` within 20 s (the INFO is sent after `AUTH <pw>`
//! when its ARGs hold `--requirepass <pw>`). A vtc may stop or kill a server
//! itself (`kill ${main_pid}`); the harness then finds it gone.
//!
//! Quoting of ARGs, shell-like: words are separated by blanks; `"..."` and
//! `'...'` group (so `""` is an empty argument and `'>p w'` one argument);
//! inside double quotes `\"` and `\\` are escapes; outside quotes a
//! backslash escapes the next character. `${macro}` in ARGs is replaced by the
//! macro of a server declared above (unknown ones are an error). Examples:
//!
//! ```text
//! #@ redis main --requirepass s3cret --user alice on '>pw' '~*' +@all
//! #@ replica r1 main --masterauth s3cret
//! #@ redis other --replicaof 127.0.0.1 ${main_port} --masterauth s3cret
//! ```
//!
//! NAME: letters, digits and `_` only (varnishtest macro names allow
//! `[a-zA-Z0-9_]`); unique within the file.
//!
//! # Macros passed to varnishtest (`-Dname=value`)
//! * `${vmod_so}`: absolute path of the .so to import.
//! * `${vmod_so_copy}`: a copy of it with another file id, which varnishd
//!   loads as a second module (two builds loaded at once, as during an
//!   upgrade). Made only for files that use the macro.
//! * `${vmod_dir}`: the directory holding it, for VCL that says just
//!   `import redis;`: `varnish v1 -arg "-p vmod_path=${vmod_dir}"`.
//! * `${redis_cli}`: path of redis-cli (`/usr/bin/redis-cli`).
//! * `${harness_tmpdir}`: the per-file directory holding the servers' sockets,
//!   logs and data (mode 0755). Note: `${tmpdir}` is varnishtest's own
//!   per-test directory, which varnishtest defines itself (a `-Dtmpdir` would
//!   be ignored).
//! * per server NAME: `${NAME_addr}` (`HOST:PORT`), `${NAME_host}` (`127.0.0.1`
//!   unless `--bind` says otherwise), `${NAME_port}`, `${NAME_restart}` (a
//!   script that starts the server again, same options, after the vtc
//!   killed it; returns once it answers PING; the harness stops it too),
//!   `${NAME_sock}` (unix socket path), `${NAME_pid}`; for `redis-tls`
//!   also `${NAME_tls_addr}` and `${NAME_tls_port}`.
//! * per cluster NAME: `${NAME_seed}`, and `${NAME_<node>_addr}`, `_port`,
//!   `_id`, `_pid`, `_restart` for nodes m0 m1 m2 r0 r1 r2 (see
//!   tests/support/cluster.rs).
//! * with any `redis-tls` server, the test TLS material
//!   (tests/support/tls_material.rs): `${tls_ca}`, `${tls_other_ca}` (a CA
//!   that signed nothing), `${tls_server_cert}`, `${tls_server_key}`,
//!   `${tls_expired_cert}`, `${tls_expired_key}` (the same names, expired
//!   in 2021),
//!   `${tls_client_cert}`, `${tls_client_key}`, in `${tls_dir}`. The server
//!   certificate names 127.0.0.1 and localhost; `--tls-auth-clients
//!   optional` (a vtc may add `--tls-auth-clients yes`).
//!
//! # Result
//! A trial passes when `varnishtest -t T <macros> <file>` exits 0. On a
//! failure its message holds varnishtest's output (the failing log, without
//! the CLI pings; `-q` is not used as it would print only the FAILED line),
//! the tail of each server's log, and last a summary: the last top-level
//! steps and the `----` failure lines. All servers are stopped by PID (SIGTERM, then
//! SIGKILL after 5 s) and the directory is removed, also on failure or panic.
//!
//! Environment: `REDIS_SERVER` (the server program, default `redis-server`;
//! `valkey-server` takes the same options), `REDIS_CLI` (default
//! `redis-cli`), `VMOD_REDIS_SO` (see above), `VTC_TIMEOUT` (default per-file
//! timeout, seconds), `VTC_KEEP=1` (keep the per-file directories and pass
//! `-L` to varnishtest; their paths are printed).

#[path = "support/cluster.rs"]
mod cluster;
#[path = "support/sentinel.rs"]
mod sentinel;
mod support;
#[path = "support/tls_material.rs"]
mod tls_material;

use libtest_mimic::{Arguments, Failed, Trial};
use std::collections::HashMap;
use std::ffi::OsString;
use std::fs;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant};
use support::{make_dir, redis_cmd_at, tail_file, Waited};

const DEFAULT_TIMEOUT_SECS: u64 = 120;
const PING_DEADLINE: Duration = Duration::from_secs(10);
const REPLICA_DEADLINE: Duration = Duration::from_secs(20);
const STOP_GRACE: Duration = Duration::from_secs(5);
const PORT_ATTEMPTS: usize = 5;
/// Keep at most this much of varnishtest's output in a failure message.
const MAX_OUTPUT: usize = 512 * 1024;
const LOG_TAIL_LINES: usize = 40;

fn main() {
    let args = Arguments::from_args();
    let vtc_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("vtc");
    let mut files: Vec<PathBuf> = match fs::read_dir(&vtc_dir) {
        Ok(rd) => rd
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "vtc"))
            .collect(),
        Err(_) => Vec::new(),
    };
    files.sort();
    let trials = files
        .into_iter()
        .map(|file| {
            let name = file
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            Trial::test(name, move || run_file(&file))
        })
        .collect();
    let conclusion = libtest_mimic::run(&args, trials);
    if let Some(base) = support::created_base_dir() {
        if !keep() {
            let _ = fs::remove_dir_all(base);
        }
    }
    conclusion.exit();
}

fn keep() -> bool {
    std::env::var_os("VTC_KEEP").is_some_and(|v| !v.is_empty() && v != "0")
}

// ---------------------------------------------------------------------------
// Directives

#[derive(Debug)]
enum Directive {
    Redis {
        name: String,
        args: Vec<String>,
        /// `#@ redis-tls`: a TLS port besides the plain one.
        tls: bool,
    },
    Replica {
        name: String,
        master: String,
        args: Vec<String>,
    },
    Sentinel {
        name: String,
        master: String,
        args: Vec<String>,
        /// `#@ sentinel-tls`: a TLS port besides the plain one.
        tls: bool,
    },
    Cluster {
        name: String,
        args: Vec<String>,
    },
    Timeout(u64),
    Env(String, String),
}

fn parse_directives(text: &str) -> Result<Vec<Directive>, String> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let Some(rest) = line.trim_start().strip_prefix("#@ ") else {
            continue;
        };
        let at = |msg: String| format!("line {}: {msg}: {line}", i + 1);
        let words = split_words(rest).map_err(at)?;
        let Some((kind, params)) = words.split_first() else {
            return Err(at("empty directive".into()));
        };
        let directive = match kind.as_str() {
            "redis" | "redis-tls" => {
                let (name, args) = params
                    .split_first()
                    .ok_or_else(|| at(format!("usage: #@ {kind} NAME [ARG...]")))?;
                Directive::Redis {
                    name: name.clone(),
                    args: args.to_vec(),
                    tls: kind == "redis-tls",
                }
            }
            "replica" => {
                if params.len() < 2 {
                    return Err(at("usage: #@ replica NAME MASTER [ARG...]".into()));
                }
                Directive::Replica {
                    name: params[0].clone(),
                    master: params[1].clone(),
                    args: params[2..].to_vec(),
                }
            }
            "sentinel" | "sentinel-tls" => match params {
                [name, master, args @ ..] => Directive::Sentinel {
                    name: name.clone(),
                    master: master.clone(),
                    args: args.to_vec(),
                    tls: kind == "sentinel-tls",
                },
                _ => return Err(at(format!("usage: #@ {kind} NAME MASTER [ARG...]"))),
            },
            "cluster" => {
                let (name, args) = params
                    .split_first()
                    .ok_or_else(|| at("usage: #@ cluster NAME [ARG...]".into()))?;
                Directive::Cluster {
                    name: name.clone(),
                    args: args.to_vec(),
                }
            }
            "timeout" => match params {
                [secs] => Directive::Timeout(
                    secs.parse()
                        .map_err(|_| at("usage: #@ timeout SECONDS".into()))?,
                ),
                _ => return Err(at("usage: #@ timeout SECONDS".into())),
            },
            "env" => match params {
                [name, value] => Directive::Env(name.clone(), value.clone()),
                _ => return Err(at("usage: #@ env NAME VALUE".into())),
            },
            other => return Err(at(format!("unknown directive {other:?}"))),
        };
        out.push(directive);
    }
    Ok(out)
}

/// Shell-like word splitting; see the module documentation.
fn split_words(s: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(e @ ('"' | '\\')) => cur.push(e),
                            Some(e) => {
                                cur.push('\\');
                                cur.push(e);
                            }
                            None => return Err("unterminated double quote".into()),
                        },
                        Some(c) => cur.push(c),
                        None => return Err("unterminated double quote".into()),
                    }
                }
            }
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => cur.push(c),
                        None => return Err("unterminated single quote".into()),
                    }
                }
            }
            '\\' => {
                in_word = true;
                match chars.next() {
                    Some(e) => cur.push(e),
                    None => return Err("trailing backslash".into()),
                }
            }
            c => {
                in_word = true;
                cur.push(c);
            }
        }
    }
    if in_word {
        words.push(cur);
    }
    Ok(words)
}

/// Replaces `${name}` by the macro's value; unknown macros are an error.
fn expand(arg: &str, macros: &[(String, String)]) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = arg;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after
            .find('}')
            .ok_or_else(|| format!("unterminated macro in {arg:?}"))?;
        let name = &after[..end];
        let value = macros
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v)
            .ok_or_else(|| format!("unknown macro ${{{name}}} in {arg:?}"))?;
        out.push_str(value);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

fn valid_name(name: &str) -> bool {
    !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

// ---------------------------------------------------------------------------
// One trial

struct Server {
    name: String,
    host: Ipv4Addr,
    port: u16,
    child: Child,
    log: PathBuf,
    out: PathBuf,
}

/// Owns the per-file directory and the servers; cleans both up on drop.
struct Fixture {
    dir: PathBuf,
    servers: Vec<Server>,
}

impl Drop for Fixture {
    fn drop(&mut self) {
        // Only the ones still running: a PID is not reused before its
        // child is reaped, which happens just below.
        let running: Vec<(i32, String)> = self
            .servers
            .iter_mut()
            .filter_map(|s| match s.child.try_wait() {
                Ok(None) => Some((s.child.id() as i32, format!("redis {}", s.name))),
                _ => None,
            })
            .collect();
        support::stop_pids(&running, STOP_GRACE);
        for s in &mut self.servers {
            let _ = s.child.wait();
        }
        // Servers a vtc started again with `${NAME_restart}`.
        let restarted: Vec<(i32, String)> = self
            .servers
            .iter()
            .filter_map(|s| {
                let pid = fs::read_to_string(restarted_pidfile(&self.dir, &s.name)).ok()?;
                let pid: i32 = pid.trim().parse().ok()?;
                support::alive(pid).then(|| (pid, format!("redis {} (restarted)", s.name)))
            })
            .collect();
        support::stop_pids(&restarted, STOP_GRACE);
        if keep() {
            eprintln!("vtc: kept {}", self.dir.display());
        } else {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

impl Fixture {
    fn logs(&self) -> String {
        let mut s = String::new();
        for srv in &self.servers {
            for path in [&srv.log, &srv.out] {
                let tail = tail_file(path, LOG_TAIL_LINES) + "\n";
                if !tail.trim().is_empty() {
                    s.push_str(&format!(
                        "\n--- redis {} (port {}, pid {}): tail of {} ---\n{tail}",
                        srv.name,
                        srv.port,
                        srv.child.id(),
                        path.display()
                    ));
                }
            }
        }
        s
    }
}

fn run_file(file: &Path) -> Result<(), Failed> {
    let text = fs::read_to_string(file).map_err(|e| format!("read {}: {e}", file.display()))?;
    let directives = parse_directives(&text)?;
    let so = support::vmod_so()?;

    let stem = file
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let short: String = stem.chars().take(40).collect();
    let dir = support::trial_dir(&short)?;
    let mut fx = Fixture {
        dir: dir.clone(),
        servers: Vec::new(),
    };

    let mut macros: Vec<(String, String)> = vec![
        ("vmod_so".into(), so.display().to_string()),
        (
            "vmod_dir".into(),
            so.parent().unwrap_or(&dir).display().to_string(),
        ),
        (
            "redis_cli".into(),
            which(&support::cli_program(), "/usr/bin/redis-cli"),
        ),
        ("harness_tmpdir".into(), dir.display().to_string()),
    ];
    if text.contains("${vmod_so_copy}") {
        let copy = support::vmod_so_copy()?;
        macros.push(("vmod_so_copy".into(), copy.display().to_string()));
    }
    let mut ports: HashMap<String, (Ipv4Addr, u16)> = HashMap::new();
    let mut env: Vec<(String, String)> = Vec::new();
    let mut timeout = std::env::var("VTC_TIMEOUT")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_TIMEOUT_SECS);

    let mut sentinels: Vec<sentinel::Expected> = Vec::new();
    for d in &directives {
        let (name, master, raw_args) = match d {
            Directive::Sentinel { .. } => {
                let started =
                    start_sentinel(d, &directives, &dir, &mut ports, &mut macros, &mut fx);
                sentinels.push(started?);
                continue;
            }
            Directive::Timeout(t) => {
                timeout = *t;
                continue;
            }
            Directive::Env(name, value) => {
                env.push((name.clone(), expand(value, &macros)?));
                continue;
            }
            Directive::Cluster { name, args } => {
                if !valid_name(name) {
                    return Err(format!("cluster name {name:?}: only [a-zA-Z0-9_] allowed").into());
                }
                match cluster::start(&dir, name, args, &mut fx.servers) {
                    Ok(cluster_macros) => macros.extend(cluster_macros),
                    Err(e) => return Err(format!("{e}{}", fx.logs()).into()),
                }
                continue;
            }
            Directive::Redis { name, args, .. } => (name, None, args),
            Directive::Replica { name, master, args } => (name, Some(master), args),
        };
        let tls_port = match d {
            Directive::Redis { tls: true, .. } => {
                if !macros.iter().any(|(k, _)| k == "tls_ca") {
                    macros.extend(make_tls_material(&dir)?);
                }
                Some(support::free_port()?)
            }
            _ => None,
        };
        if !valid_name(name) {
            return Err(format!("server name {name:?}: only [a-zA-Z0-9_] allowed").into());
        }
        if ports.contains_key(name) {
            return Err(format!("server {name:?} declared twice").into());
        }
        let master_at = match master {
            Some(m) => Some(*ports.get(m).ok_or_else(|| {
                format!("replica {name}: unknown master {m:?} (declare it above)")
            })?),
            None => None,
        };
        let mut args = Vec::new();
        if let Some(tls_port) = tls_port {
            let tls_args = [
                "--tls-port",
                &tls_port.to_string(),
                "--tls-cert-file",
                "${tls_server_cert}",
                "--tls-key-file",
                "${tls_server_key}",
                "--tls-ca-cert-file",
                "${tls_ca}",
                "--tls-auth-clients",
                "optional",
            ];
            args.extend(
                tls_args
                    .iter()
                    .map(|a| expand(a, &macros))
                    .collect::<Result<Vec<_>, _>>()?,
            );
        }
        args.extend(
            raw_args
                .iter()
                .map(|a| expand(a, &macros))
                .collect::<Result<Vec<_>, _>>()?,
        );
        let host = bind_of(&args)?;
        if let Err(e) = start_redis(&dir, name, host, master_at, &args, &mut fx.servers) {
            return Err(format!("{e}{}", fx.logs()).into());
        }
        let srv = fx.servers.last().expect("started server");
        let (port, pid) = (srv.port, srv.child.id());
        if master_at.is_some() {
            if let Err(e) = wait_replica_up(host, port, password_of(&args)) {
                return Err(format!("replica {name}: {e}{}", fx.logs()).into());
            }
        }
        ports.insert(name.clone(), (host, port));
        let sock = dir.join(format!("{name}.sock")).display().to_string();
        macros.push((format!("{name}_addr"), format!("{host}:{port}")));
        macros.push((format!("{name}_host"), host.to_string()));
        macros.push((
            format!("{name}_restart"),
            dir.join(format!("{name}.restart")).display().to_string(),
        ));
        macros.push((format!("{name}_port"), port.to_string()));
        macros.push((format!("{name}_sock"), sock));
        macros.push((format!("{name}_pid"), pid.to_string()));
        if let Some(tls_port) = tls_port {
            macros.push((format!("{name}_tls_addr"), format!("{host}:{tls_port}")));
            macros.push((format!("{name}_tls_port"), tls_port.to_string()));
        }
    }

    for s in &mut sentinels {
        s.sentinels = sentinels_of(&directives, &s.master) - 1;
    }
    sentinel::wait_ready(&sentinels).map_err(|e| format!("{e}{}", fx.logs()))?;

    // Not -q: at the default verbosity varnishtest prints the whole log of a
    // failing test (-q prints only its FAILED line).
    let mut cmd = Command::new("varnishtest");
    cmd.arg("-t").arg(timeout.to_string());
    if keep() {
        cmd.arg("-L");
    }
    for (k, v) in &macros {
        cmd.arg(format!("-D{k}={v}"));
    }
    cmd.arg(file);
    cmd.env("PATH", path_with_sbin());
    cmd.envs(env);
    cmd.stdin(Stdio::null());
    let output = cmd
        .output()
        .map_err(|e| format!("run varnishtest (installed? see scripts/deps): {e}"))?;
    if output.status.success() {
        return Ok(());
    }
    let mut raw = String::from_utf8_lossy(&output.stdout).into_owned();
    raw.push_str(&String::from_utf8_lossy(&output.stderr));
    let mut text = without_cli_pings(&raw);
    let steps = steps_summary(&text);
    if text.len() > MAX_OUTPUT {
        let mut cut = text.len() - MAX_OUTPUT;
        while !text.is_char_boundary(cut) {
            cut += 1;
        }
        text = format!("[... first {cut} bytes cut ...]\n{}", &text[cut..]);
    }
    // The steps go last: a CI log viewer that shows only the tail of a long
    // failure still shows which command hung or failed.
    Err(format!(
        "varnishtest {} {}\n{text}{}{steps}",
        file.display(),
        describe(output.status),
        fx.logs()
    )
    .into())
}

/// `#@ sentinel` / `#@ sentinel-tls`: starts the Sentinel (see
/// tests/support/sentinel.rs), adds its macros (`${NAME_addr}`, `_host`,
/// `_port`, `_pid`; `_tls_addr`, `_tls_port`) and hands it to the fixture.
fn start_sentinel(
    directive: &Directive,
    directives: &[Directive],
    dir: &Path,
    ports: &mut HashMap<String, (Ipv4Addr, u16)>,
    macros: &mut Vec<(String, String)>,
    fx: &mut Fixture,
) -> Result<sentinel::Expected, String> {
    let Directive::Sentinel {
        name,
        master,
        args,
        tls,
    } = directive
    else {
        return Err("not a sentinel directive".into());
    };
    if !valid_name(name) || ports.contains_key(name) {
        return Err(format!("sentinel name {name:?}: [a-zA-Z0-9_], unique"));
    }
    let at = *ports
        .get(master)
        .ok_or_else(|| format!("sentinel {name}: unknown master {master:?}"))?;
    let tls_port = if *tls {
        if !macros.iter().any(|(k, _)| k == "tls_ca") {
            macros.extend(make_tls_material(dir)?);
        }
        Some(support::free_port()?)
    } else {
        None
    };
    let mut expanded = match tls_port {
        Some(port) => sentinel::tls_args(port, macros)?,
        None => Vec::new(),
    };
    for arg in args {
        expanded.push(expand(arg, macros)?);
    }
    let password = password_of(&expanded);
    let started = sentinel::start(dir, name, master, at, &expanded, password.as_deref())
        .map_err(|e| format!("{e}{}", fx.logs()))?;
    let (host, port, pid) = (Ipv4Addr::LOCALHOST, started.port, started.child.id());
    ports.insert(name.clone(), (host, port));
    macros.push((format!("{name}_addr"), format!("{host}:{port}")));
    macros.push((format!("{name}_host"), host.to_string()));
    macros.push((format!("{name}_port"), port.to_string()));
    macros.push((format!("{name}_pid"), pid.to_string()));
    if let Some(tls_port) = tls_port {
        macros.push((format!("{name}_tls_addr"), format!("{host}:{tls_port}")));
        macros.push((format!("{name}_tls_port"), tls_port.to_string()));
    }
    fx.servers.push(Server {
        name: name.clone(),
        host,
        port,
        child: started.child,
        log: started.log,
        out: started.out,
    });
    Ok(sentinel::Expected {
        name: name.clone(),
        port,
        master: master.clone(),
        replicas: replicas_of(directives, master),
        sentinels: 0,
        password,
    })
}

/// How many `#@ replica` of `master` the file declares.
fn replicas_of(directives: &[Directive], master: &str) -> usize {
    directives
        .iter()
        .filter(|d| matches!(d, Directive::Replica { master: m, .. } if m == master))
        .count()
}

/// How many `#@ sentinel` monitor `master`.
fn sentinels_of(directives: &[Directive], master: &str) -> usize {
    directives
        .iter()
        .filter(|d| matches!(d, Directive::Sentinel { master: m, .. } if m == master))
        .count()
}

/// varnishtest's output without the manager's CLI pings (two `vsl|` lines
/// and a `dT` line every 3 s per varnishd), which fill the log of a test
/// that hangs until its timeout.
fn without_cli_pings(text: &str) -> String {
    let mut kept: Vec<&str> = Vec::new();
    for line in text.lines() {
        if line.contains(" CLI ") && (line.ends_with("Rd ping") || line.contains("Wr 200 19 PONG"))
        {
            // Drop the dT line announcing the ping too.
            if kept.last().is_some_and(|l| l.starts_with("**** dT")) {
                kept.pop();
            }
            continue;
        }
        kept.push(line);
    }
    kept.join("\n") + "\n"
}

/// The test's top-level commands (`**   top   === ...`), last ones only, and
/// every failure line (`---- `): what ran, and what went wrong where.
fn steps_summary(text: &str) -> String {
    const LAST_STEPS: usize = 12;
    let steps: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("**   top   === "))
        .collect();
    let failures: Vec<&str> = text.lines().filter(|l| l.starts_with("---- ")).collect();
    let mut out = format!(
        "\n--- last {} of {} top-level steps ---\n",
        LAST_STEPS.min(steps.len()),
        steps.len()
    );
    for l in &steps[steps.len().saturating_sub(LAST_STEPS)..] {
        out.push_str(l);
        out.push('\n');
    }
    out.push_str("--- failure lines ---\n");
    for l in &failures {
        out.push_str(l);
        out.push('\n');
    }
    if failures.is_empty() {
        out.push_str("(none: the test was stopped, most likely at the last step above)\n");
    }
    out
}

fn describe(status: ExitStatus) -> String {
    match status.code() {
        Some(c) => format!("exited with {c}"),
        None => format!("ended by {status}"),
    }
}

fn which(prog: &str, fallback: &str) -> String {
    std::env::split_paths(&path_with_sbin())
        .map(|d| d.join(prog))
        .find(|p| p.is_file())
        .map(|p| p.display().to_string())
        .unwrap_or_else(|| fallback.to_string())
}

/// `$PATH` plus the usual system dirs (varnishtest runs `varnishd` from PATH).
fn path_with_sbin() -> OsString {
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    for d in [
        "/usr/local/sbin",
        "/usr/local/bin",
        "/usr/sbin",
        "/usr/bin",
        "/sbin",
        "/bin",
    ] {
        if !dirs.iter().any(|x| x == Path::new(d)) {
            dirs.push(d.into());
        }
    }
    std::env::join_paths(dirs).unwrap_or_default()
}

fn password_of(args: &[String]) -> Option<String> {
    args.iter()
        .position(|a| a == "--requirepass")
        .and_then(|i| args.get(i + 1))
        .cloned()
}

/// Writes the test TLS material into `<dir>/tls` and returns its macros
/// (`tls_ca`, `tls_other_ca`, `tls_server_cert`, ...).
fn make_tls_material(dir: &Path) -> Result<Vec<(String, String)>, String> {
    let tls_dir = dir.join("tls");
    make_dir(&tls_dir)?;
    let m = tls_material::write_material(&tls_dir)?;
    let files = [
        ("tls_dir", &tls_dir),
        ("tls_ca", &m.ca),
        ("tls_other_ca", &m.other_ca),
        ("tls_server_cert", &m.server_cert),
        ("tls_server_key", &m.server_key),
        ("tls_expired_cert", &m.expired_cert),
        ("tls_expired_key", &m.expired_key),
        ("tls_client_cert", &m.client_cert),
        ("tls_client_key", &m.client_key),
    ];
    for (_, path) in &files[1..] {
        // varnishd's workers (and redis) read them under their own users.
        fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o644))
            .map_err(|e| format!("chmod {}: {e}", path.display()))?;
    }
    Ok(files
        .iter()
        .map(|(name, path)| (name.to_string(), path.display().to_string()))
        .collect())
}

/// Starts a redis-server, waits for PING and adds it to `servers`. A server
/// that started but did not come up is added too, so that its log is shown
/// and it is stopped.
fn start_redis(
    dir: &Path,
    name: &str,
    host: Ipv4Addr,
    replicaof: Option<(Ipv4Addr, u16)>,
    extra: &[String],
    servers: &mut Vec<Server>,
) -> Result<(), String> {
    let sock = dir.join(format!("{name}.sock"));
    if sock.as_os_str().len() > 100 {
        return Err(format!("unix socket path too long: {}", sock.display()));
    }
    let log = dir.join(format!("{name}.log"));
    let out = dir.join(format!("{name}.out"));
    // Own data dir: replicas write the RDB they receive (and cluster nodes
    // their nodes.conf) there, which another server must not load.
    let data = dir.join(format!("{name}.data"));
    make_dir(&data)?;
    let mut last_err = String::new();
    for _ in 0..PORT_ATTEMPTS {
        let port = support::free_port()?;
        let _ = fs::remove_file(&log);
        let out_file =
            fs::File::create(&out).map_err(|e| format!("create {}: {e}", out.display()))?;
        let err_file = out_file.try_clone().map_err(|e| format!("dup: {e}"))?;
        let mut cmd = support::redis_server(port, &data, &log);
        cmd.args(["--repl-diskless-sync-delay", "0"])
            .arg("--unixsocket")
            .arg(&sock)
            .args(["--unixsocketperm", "777"]);
        if let Some((master_host, master_port)) = replicaof {
            cmd.arg("--replicaof")
                .arg(master_host.to_string())
                .arg(master_port.to_string());
        }
        cmd.args(extra)
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(out_file)
            .stderr(err_file);
        write_restart_script(dir, name, host, port, &cmd)?;
        let child = cmd
            .spawn()
            .map_err(|e| format!("start redis-server (installed? see scripts/deps): {e}"))?;
        let mut srv = Server {
            name: name.to_string(),
            host,
            port,
            child,
            log: log.clone(),
            out: out.clone(),
        };
        match wait_ping(&mut srv) {
            Ok(()) => {
                servers.push(srv);
                return Ok(());
            }
            Err(e) => {
                let exited = !matches!(srv.child.try_wait(), Ok(None));
                let logs =
                    tail_file(&log, LOG_TAIL_LINES) + "\n" + &tail_file(&out, LOG_TAIL_LINES);
                if exited && logs.contains("Address already in use") {
                    last_err = format!("redis {name}: port {port} in use");
                    continue;
                }
                servers.push(srv);
                return Err(format!("redis {name}: {e}"));
            }
        }
    }
    Err(format!("{last_err} ({PORT_ATTEMPTS} attempts)"))
}

fn restarted_pidfile(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.restarted.pid"))
}

/// `<dir>/NAME.restart`: starts the server again with the same command line
/// (after a vtc killed it), daemonized with a pid file that the harness
/// stops it by, and returns once it answers PING (10 s at most).
fn write_restart_script(
    dir: &Path,
    name: &str,
    host: Ipv4Addr,
    port: u16,
    cmd: &Command,
) -> Result<(), String> {
    let quote =
        |arg: &std::ffi::OsStr| format!("'{}'", arg.to_string_lossy().replace('\'', "'\\''"));
    let mut line = quote(cmd.get_program());
    for arg in cmd.get_args() {
        line.push(' ');
        line.push_str(&quote(arg));
    }
    let pidfile = restarted_pidfile(dir, name);
    let script = format!(
        "#!/bin/bash\ncd {dir} || exit 1\n\
         # Close what varnishtest leaves open (its output pipe among them): the\n\
         # daemon would keep it, and the harness would wait for its EOF.\n\
         for fd in $(ls /proc/$$/fd); do [ \"$fd\" -gt 2 ] && eval \"exec $fd>&-\"; done 2>/dev/null\n\
         {line} --daemonize yes --pidfile {pidfile} || exit 1\n\
         for i in $(seq 100); do {cli} -h {host} -p {port} PING >/dev/null 2>&1 && exit 0; sleep 0.1; done\n\
         echo 'redis {name} not up after restart' >&2; exit 1\n",
        dir = quote(dir.as_os_str()),
        pidfile = quote(pidfile.as_os_str()),
        cli = support::cli_program(),
    );
    let path = dir.join(format!("{name}.restart"));
    support::write_public(&path, &script)?;
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(&path, fs::Permissions::from_mode(0o755))
        .map_err(|e| format!("chmod {}: {e}", path.display()))
}

fn wait_ping(srv: &mut Server) -> Result<(), String> {
    let mut last = String::new();
    let (host, port) = (srv.host, srv.port);
    let waited = support::wait_ready(
        &mut srv.child,
        PING_DEADLINE,
        Duration::from_millis(50),
        || match redis_cmd_at(host, port, None, &["PING"]) {
            Ok(r) if !r.is_empty() && !r.starts_with("-LOADING") => true,
            Ok(r) => {
                last = format!("PING: {r:?}");
                false
            }
            Err(e) => {
                last = format!("PING: {e}");
                false
            }
        },
    );
    match waited {
        Waited::Ready => Ok(()),
        Waited::Exited(status) => Err(format!("redis-server {}", describe(status))),
        Waited::TimedOut => Err(format!(
            "not up after {} s on port {port} ({last})",
            PING_DEADLINE.as_secs()
        )),
    }
}

/// The loopback address a server's ARGs bind it to (the last `--bind`,
/// first address), 127.0.0.1 by default.
fn bind_of(args: &[String]) -> Result<Ipv4Addr, String> {
    let Some(at) = args.iter().rposition(|a| a == "--bind") else {
        return Ok(Ipv4Addr::LOCALHOST);
    };
    let first = args
        .get(at + 1)
        .and_then(|value| value.split_whitespace().next())
        .unwrap_or_default();
    match first.parse::<Ipv4Addr>() {
        Ok(ip) if ip.is_loopback() => Ok(ip),
        _ => Err(format!("--bind {first:?}: only IPv4 loopback addresses")),
    }
}

fn wait_replica_up(host: Ipv4Addr, port: u16, password: Option<String>) -> Result<(), String> {
    let deadline = Instant::now() + REPLICA_DEADLINE;
    let mut last;
    loop {
        match redis_cmd_at(host, port, password.as_deref(), &["INFO", "replication"]) {
            Ok(r) if r.contains("master_link_status:up") => return Ok(()),
            Ok(r) => last = r,
            Err(e) => last = e.to_string(),
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "master_link_status not up after {} s; last INFO replication:\n{last}",
                REPLICA_DEADLINE.as_secs()
            ));
        }
        thread::sleep(Duration::from_millis(100));
    }
}
