//! varnishtest harness: one libtest-mimic trial per `vtc/*.vtc`, sorted by name.
//!
//! One more trial, `sweep.commands`, is not a vtc file: every command the
//! server lists, through four databases of one varnishd (tests/vtc/sweep/).
//! And one per ```` ```vcl ```` block of README.md and docs/*.md, `docs.FILE:LINE`:
//! the block `vcl.load`ed as written (tests/vtc/docs.rs).
//!
//! Run all: `cargo test --test vtc`; a subset: `cargo test --test vtc -- standalone`
//! (substring of the trial name, i.e. of the file name without `.vtc`).
//! Trials run two per core (`--test-threads N` to change it).
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
//! #@ sentinel NAME MASTER [ARG...] redis-server --sentinel monitoring MASTER (tests/support/sentinel.rs;
//!                                  ARG --by-name: MASTER monitored as localhost, Sentinel announcing names)
//! #@ sentinel-tls NAME MASTER [ARG...]  the same with a TLS port besides the plain one
//! #@ cluster NAME [ARG...]         Redis Cluster, 3 masters x 1 replica (tests/support/cluster.rs)
//! #@ trickle NAME TARGET DELAY_MS [AFTER_MS]  TCP proxy to TARGET (HOST:PORT) passing TARGET's bytes one every DELAY_MS
//!                                  after AFTER_MS (default 0) at full speed per connection (tests/vtc/trickle.rs)
//! #@ timeout SECONDS               varnishtest -t (default 120, or $VTC_TIMEOUT)
//! #@ env NAME VALUE                environment variable of varnishtest (and so varnishd); ${macros} of servers above expanded
//! #@ not-in MODE[,MODE]: REASON    not run in these modes (tls, resp3): reported ignored with the reason (see Modes)
//! #@ vrt >= N | #@ vrt < N         run only against a Varnish of that VRT major (vrt.h; 7.1: 15, 7.7: 21,
//!                                  8.0 and trunk: 22), else the trial is listed as ignored
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
//! * `${varnish_vmod_dir}`: the vmod directory of the Varnish under test
//!   (its pkg-config `vmoddir`), for `import std;` next to `import redis;`:
//!   `-p vmod_path=${vmod_dir}:${varnish_vmod_dir}`.
//! * `${vmod_version}`: the crate's version (Cargo.toml), which
//!   `redis.version()` reports.
//! * `${redis_cli}`: path of redis-cli (`/usr/bin/redis-cli`).
//! * `${project_dir}`: this clone's root, for files of the project a vtc
//!   checks (monitoring/, tests/monitoring/).
//! * `${harness_tmpdir}`: the per-file directory holding the servers' sockets,
//!   logs and data (mode 0755). Note: `${tmpdir}` is varnishtest's own
//!   per-test directory, which varnishtest defines itself (a `-Dtmpdir` would
//!   be ignored).
//! * per server NAME: `${NAME_addr}` (`HOST:PORT`), `${NAME_host}` (`127.0.0.1`
//!   unless `--bind` says otherwise), `${NAME_port}`, `${NAME_restart}` (a
//!   script that starts the server again, same options, after the vtc
//!   killed it; returns once it answers PING; the harness stops it too),
//!   `${NAME_sock}` (unix socket path), `${NAME_pid}`, `${NAME_tcp_port}`
//!   (the plain port, what `INFO` calls `tcp_port`: `${NAME_port}` but in
//!   TLS mode); for `redis-tls` also `${NAME_tls_addr}` and `${NAME_tls_port}`.
//! * per cluster NAME: `${NAME_seed}`, and `${NAME_<node>_addr}`, `_port`,
//!   `_id`, `_pid`, `_restart` for nodes m0 m1 m2 r0 r1 r2 (see
//!   tests/support/cluster.rs).
//! * per trickle proxy NAME: `${NAME_addr}`, `${NAME_host}` (127.0.0.1),
//!   `${NAME_port}`.
//! * with any `redis-tls` server, the test TLS material
//!   (tests/support/tls_material.rs): `${tls_ca}`, `${tls_other_ca}` (a CA
//!   that signed nothing), `${tls_server_cert}`, `${tls_server_key}`,
//!   `${tls_expired_cert}`, `${tls_expired_key}` (the same names, expired
//!   in 2021),
//!   `${tls_client_cert}`, `${tls_client_key}`, in `${tls_dir}` (rehashed
//!   as `openssl rehash` does: a `tls_capath`). The server
//!   certificate names 127.0.0.1, localhost and the other loopback addresses of
//!   vtc servers (127.0.0.2, 127.0.1.1, 127.0.1.2); `--tls-auth-clients
//!   optional` (a vtc may add `--tls-auth-clients yes`). Besides, X.509 v1
//!   certificates as Redis's utils/gen-test-certs.sh makes them, under
//!   their own CA `${tls_v1_ca}`: `${tls_v1_server_cert}`,
//!   `${tls_v1_server_key}` (CN=Server-only, no other name),
//!   `${tls_v1_expired_cert}`, `${tls_v1_expired_key}`,
//!   `${tls_v1_client_cert}`, `${tls_v1_client_key}` (CN=Client-only).
//!
//! # Modes
//! Every file runs as well with TLS on every server and Sentinel, with
//! RESP3, or both, as the C VMOD's runner.sh does (`TLS=true`,
//! `PROTOCOL=RESP3`): `VTC_TLS=1`, `VTC_PROTOCOL=RESP3` (or `RESP2`) in
//! the environment, e.g. `VTC_TLS=1 VTC_PROTOCOL=RESP3 cargo test --test
//! vtc`. TLS mode moves `${NAME_addr}`, `${NAME_port}` (and a cluster's
//! macros) to the servers' TLS ports and makes `${redis_cli}` speak TLS
//! (but with `-s`); the files pass the mode to the module with `${db_mode}`
//! appended to the arguments of `redis.db()` and `redis.sentinels()`
//! (`${db_protocol}` for UNIX sockets, `${db_tls}` where the file sets
//! `protocol` itself), all empty in plain mode; `${redis_tls}` and
//! `${redis_protocol}` say the mode. A file that cannot run in a mode
//! says why with `#@ not-in`. The TLS material macros (below) are defined
//! in TLS mode for every file. Details: tests/vtc/modes.rs.
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
//! `-L` to varnishtest; their paths are printed), `VTC_TLS`, `VTC_PROTOCOL`
//! (see Modes). varnishtest and varnishd
//! are the first found in `PATH` (then the system dirs), and the module is
//! built against the Varnish pkg-config finds: `bash scripts/varnish 8.0
//! cargo test --test vtc` runs the suite on Varnish 8.0.

#[path = "../support/cluster.rs"]
mod cluster;
mod directives;
mod docs;
mod modes;
mod report;
#[path = "../support/sentinel.rs"]
mod sentinel;
mod servers;
#[path = "../support/mod.rs"]
mod support;
mod sweep;
#[path = "../support/tls_material.rs"]
mod tls_material;
mod trickle;

use directives::*;
use libtest_mimic::{Arguments, Completion, Failed, Trial};
use modes::Mode;
use report::*;
use servers::*;
use std::collections::HashMap;
use std::ffi::OsString;
use std::fs;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};
use support::{make_dir, tail_file, RedisConfig, RedisServer, Waited};

const DEFAULT_TIMEOUT_SECS: u64 = 120;
const PING_DEADLINE: Duration = Duration::from_secs(10);
const REPLICA_DEADLINE: Duration = Duration::from_secs(20);
const STOP_GRACE: Duration = Duration::from_secs(5);
const PORT_ATTEMPTS: usize = 5;
/// Keep at most this much of varnishtest's output in a failure message.
const MAX_OUTPUT: usize = 512 * 1024;
const LOG_TAIL_LINES: usize = 40;
/// The VRT major of the Varnish the module is built against (build.rs).
fn built_vrt_major() -> u32 {
    env!("VMOD_REDIS_VRT_MAJOR")
        .parse()
        .expect("build.rs sets VMOD_REDIS_VRT_MAJOR to a number")
}

fn main() {
    let mut args = Arguments::from_args();
    // Two trials per core unless told otherwise: a trial mostly waits (on
    // servers starting, timeouts, sleeps), about 40 % of a core each with
    // one per core, and the suite runs three times in CI.
    if args.test_threads.is_none() {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        args.test_threads = Some(2 * cores);
    }
    let vtc_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("vtc");
    let mut files: Vec<PathBuf> = match fs::read_dir(&vtc_dir) {
        Ok(rd) => rd
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "vtc"))
            .collect(),
        Err(_) => Vec::new(),
    };
    files.sort();
    let mode = match Mode::from_env() {
        Ok(mode) => mode,
        Err(e) => {
            eprintln!("vtc: {e}");
            std::process::exit(2);
        }
    };
    let mut trials: Vec<Trial> = files
        .into_iter()
        .map(|file| {
            let name = file
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            Trial::ignorable_test(name, move || run_file(&file, mode))
        })
        .collect();
    // Not a vtc file: every command the server lists, through varnishd
    // (tests/vtc/sweep/).
    let described = mode.describe();
    trials.push(match described.as_str() {
        "plain" => Trial::test("sweep.commands", sweep::run),
        _ => Trial::ignorable_test("sweep.commands", move || {
            Ok(Completion::ignored_with(format!(
                "not in {described}: its VCL is written by tests/vtc/sweep, which has no modes"
            )))
        }),
    });
    trials.extend(docs::trials(mode));
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
// One trial

struct Server {
    name: String,
    port: u16,
    child: Child,
    log: PathBuf,
    out: PathBuf,
}

/// Owns the per-file directory and the servers; cleans both up on drop.
struct Fixture {
    dir: PathBuf,
    servers: Vec<Server>,
    /// `#@ trickle` proxies, stopped on drop.
    trickles: Vec<trickle::Trickle>,
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

fn run_file(file: &Path, mode: Mode) -> Result<Completion, Failed> {
    let text = fs::read_to_string(file).map_err(|e| format!("read {}: {e}", file.display()))?;
    let directives = parse_directives(&text)?;
    for d in &directives {
        if let Directive::NotIn { modes, reason } = d {
            if let Some(m) = modes.iter().find(|m| mode.is(m)) {
                return Ok(Completion::ignored_with(format!("not in {m}: {reason}")));
            }
        }
        if !d.runs_on_vrt(built_vrt_major()) {
            return Ok(Completion::ignored_with(format!(
                "not on VRT {}: written for another release's interface",
                built_vrt_major()
            )));
        }
    }
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
        trickles: Vec::new(),
    };

    let mut macros: Vec<(String, String)> = vec![
        ("vmod_so".into(), so.display().to_string()),
        (
            "vmod_dir".into(),
            so.parent().unwrap_or(&dir).display().to_string(),
        ),
        ("varnish_vmod_dir".into(), varnish_vmod_dir()),
        ("vmod_version".into(), env!("CARGO_PKG_VERSION").into()),
        (
            "redis_cli".into(),
            which(&support::cli_program(), "/usr/bin/redis-cli"),
        ),
        ("harness_tmpdir".into(), dir.display().to_string()),
        ("project_dir".into(), env!("CARGO_MANIFEST_DIR").into()),
    ];
    if mode.tls {
        let material = make_tls_material(&dir)?;
        let ca = material
            .iter()
            .find(|(k, _)| k == "tls_ca")
            .map(|(_, v)| v.clone());
        let ca = ca.ok_or("no tls_ca in the TLS material")?;
        macros.retain(|(k, _)| k != "redis_cli");
        let cli = which(&support::cli_program(), "/usr/bin/redis-cli");
        macros.push(("redis_cli".into(), modes::write_tls_cli(&dir, &cli, &ca)?));
        macros.extend(mode.macros(Some(&ca)));
        macros.extend(material);
    } else {
        macros.extend(mode.macros(None));
    }
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
                    start_sentinel(d, &directives, &dir, mode, &mut ports, &mut macros, &mut fx);
                sentinels.push(started?);
                continue;
            }
            Directive::Timeout(t) => {
                timeout = *t;
                continue;
            }
            Directive::Vrt { .. } => continue, // decided before the servers start
            Directive::Trickle {
                name,
                target,
                delay_ms,
                after_ms,
            } => {
                if !valid_name(name) || ports.contains_key(name) {
                    return Err(format!("trickle name {name:?}: [a-zA-Z0-9_], unique").into());
                }
                let proxy = trickle::Trickle::start(
                    &expand(target, &macros)?,
                    Duration::from_millis(*delay_ms),
                    Duration::from_millis(*after_ms),
                )?;
                ports.insert(name.clone(), (Ipv4Addr::LOCALHOST, proxy.port));
                macros.push((format!("{name}_addr"), format!("127.0.0.1:{}", proxy.port)));
                macros.push((format!("{name}_host"), "127.0.0.1".into()));
                macros.push((format!("{name}_port"), proxy.port.to_string()));
                fx.trickles.push(proxy);
                continue;
            }
            Directive::Env(name, value) => {
                env.push((name.clone(), expand(value, &macros)?));
                continue;
            }
            Directive::NotIn { .. } => continue,
            Directive::Cluster { name, args } => {
                if !valid_name(name) {
                    return Err(format!("cluster name {name:?}: only [a-zA-Z0-9_] allowed").into());
                }
                let servers = &mut fx.servers;
                let material = &macros;
                let tls_args = |port| modes::server_tls_args(port, material);
                let tls = TlsPort {
                    pick: modes::cluster_tls_port,
                    args: &tls_args,
                };
                let tls = mode.tls.then_some(&tls);
                let mut start_node = |node: &str, node_args: &[String]| {
                    let localhost = Ipv4Addr::LOCALHOST;
                    let tls_port =
                        start_redis(&dir, node, localhost, None, node_args, tls, servers)?;
                    let server = servers.last().expect("started node");
                    Ok(cluster::Node {
                        port: server.port,
                        client_port: tls_port.unwrap_or(server.port),
                        pid: server.child.id(),
                    })
                };
                match cluster::start(&dir, name, args, &mut start_node) {
                    Ok(cluster_macros) => macros.extend(cluster_macros),
                    Err(e) => return Err(format!("{e}{}", fx.logs()).into()),
                }
                continue;
            }
            Directive::Redis { name, args, .. } => (name, None, args),
            Directive::Replica { name, master, args } => (name, Some(master), args),
        };
        let own_tls = matches!(d, Directive::Redis { tls: true, .. });
        if own_tls && !macros.iter().any(|(k, _)| k == "tls_ca") {
            macros.extend(make_tls_material(&dir)?);
        }
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
        let args = raw_args
            .iter()
            .map(|a| expand(a, &macros))
            .collect::<Result<Vec<_>, _>>()?;
        let host = bind_of(&args)?;
        let own_tls_args = |port| sentinel::tls_args(port, &macros);
        let mode_tls_args = |port| modes::server_tls_args(port, &macros);
        let tls = TlsPort {
            pick: support::free_port,
            args: if own_tls {
                &own_tls_args
            } else {
                &mode_tls_args
            },
        };
        let tls = (own_tls || mode.tls).then_some(&tls);
        let tls_port = match start_redis(&dir, name, host, master_at, &args, tls, &mut fx.servers) {
            Ok(tls_port) => tls_port,
            Err(e) => return Err(format!("{e}{}", fx.logs()).into()),
        };
        // `#@ redis-tls`: a TLS port besides the plain one, which its
        // macros keep; TLS mode: its macros are the TLS port's.
        let (tls_port, tls_mode_port) = match own_tls {
            true => (tls_port, None),
            false => (None, tls_port),
        };
        let srv = fx.servers.last().expect("started server");
        let (port, pid) = (srv.port, srv.child.id());
        if master_at.is_some() {
            if let Err(e) = wait_replica_up(host, port, password_of(&args)) {
                return Err(format!("replica {name}: {e}{}", fx.logs()).into());
            }
        }
        let client_port = tls_mode_port.unwrap_or(port);
        ports.insert(name.clone(), (host, client_port));
        let sock = dir.join(format!("{name}.sock")).display().to_string();
        macros.push((format!("{name}_addr"), format!("{host}:{client_port}")));
        macros.push((format!("{name}_host"), host.to_string()));
        macros.push((
            format!("{name}_restart"),
            dir.join(format!("{name}.restart")).display().to_string(),
        ));
        macros.push((format!("{name}_port"), client_port.to_string()));
        macros.push((format!("{name}_tcp_port"), port.to_string()));
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
        return Ok(Completion::Completed);
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
