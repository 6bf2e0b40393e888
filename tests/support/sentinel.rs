//! Sentinels for the varnishtest harness (`#@ sentinel NAME MASTER
//! [ARG...]`): `redis-server <NAME.conf> --sentinel` on a free loopback
//! port, monitoring the server MASTER of the same file under the master
//! name MASTER, with short delays so that tests run fast.
//!
//! [`BY_NAME`] among the ARGs (taken out, not given to redis-server): the
//! Sentinel monitors MASTER as `localhost` (not 127.0.0.1), with
//! `resolve-hostnames yes` and `announce-hostnames yes`, so that it
//! reports names (replicas too, when they announce `localhost`:
//! `--replica-announce-ip localhost`).
use std::fs;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use crate::support::{
    self, redis_cmd, write_public, OnPort, RedisConfig, RedisServer, TlsPort, Waited,
};

/// A master unreachable this long is down for a Sentinel (`+sdown`).
pub const DOWN_AFTER_MS: u32 = 500;
/// Bound of one failover attempt.
const FAILOVER_TIMEOUT_MS: u32 = 2000;
/// Sentinels needed to agree that a master is down (`+odown`).
const QUORUM: u32 = 2;
/// Up (PING), then knowing the replicas and the other Sentinels.
const READY_DEADLINE: Duration = Duration::from_secs(20);

/// The harness's own ARG: monitor the master by the name `localhost`.
pub const BY_NAME: &str = "--by-name";

/// A started Sentinel.
pub struct Started {
    pub child: Child,
    pub port: u16,
    pub log: PathBuf,
    pub out: PathBuf,
}

/// What a Sentinel should know before the test starts.
pub struct Expected {
    pub name: String,
    pub port: u16,
    pub master: String,
    pub replicas: usize,
    pub sentinels: usize,
    /// `--requirepass` among its ARGs.
    pub password: Option<String>,
}

/// Ports a Sentinel's start tries: one taken between the pick and the
/// bind (its own, or a TLS port among its options) fails only that
/// attempt.
pub const START_ATTEMPTS: usize = 5;

/// Starts a Sentinel monitoring `master_at` as `master` on a free port,
/// on another one (with its options asked again from `options`, so that
/// a port among them is picked afresh too) while the port is taken,
/// [`START_ATTEMPTS`] in all. The options are redis-server's, added to
/// its command line, but [`BY_NAME`].
pub fn start(
    dir: &Path,
    name: &str,
    master: &str,
    master_at: (Ipv4Addr, u16),
    password: Option<&str>,
    mut options: impl FnMut() -> Result<Vec<String>, String>,
) -> Result<Started, String> {
    support::on_free_port(START_ATTEMPTS, |port| {
        let extra = options()?;
        match start_on(dir, name, master, master_at, port, &extra, password) {
            Ok(started) => Ok(OnPort::Up(started)),
            Err(e) if e.contains("Address already in use") => Ok(OnPort::Retry(e)),
            Err(e) => Err(e),
        }
    })
}

/// One attempt of [`start`], on `port`.
fn start_on(
    dir: &Path,
    name: &str,
    master: &str,
    master_at: (Ipv4Addr, u16),
    port: u16,
    extra: &[String],
    password: Option<&str>,
) -> Result<Started, String> {
    // Sentinel rewrites its configuration file: one per Sentinel, in the
    // test's directory.
    let conf = dir.join(format!("{name}.conf"));
    let (master_ip, master_port) = master_at;
    let by_name = extra.iter().any(|arg| arg == BY_NAME);
    let extra: Vec<String> = extra
        .iter()
        .filter(|arg| *arg != BY_NAME)
        .cloned()
        .collect();
    // A name is refused unless resolve-hostnames comes first.
    let (hostnames, host) = if by_name {
        let yes = "sentinel resolve-hostnames yes\nsentinel announce-hostnames yes\n";
        (yes, "localhost".to_string())
    } else {
        ("", master_ip.to_string())
    };
    write_public(
        &conf,
        &format!(
            "{hostnames}sentinel monitor {master} {host} {master_port} {QUORUM}\n\
             sentinel down-after-milliseconds {master} {DOWN_AFTER_MS}\n\
             sentinel failover-timeout {master} {FAILOVER_TIMEOUT_MS}\n\
             sentinel parallel-syncs {master} 2\n"
        ),
    )?;
    let log = dir.join(format!("{name}.log"));
    let out = dir.join(format!("{name}.out"));
    let data = dir.join(format!("{name}.data"));
    support::make_dir(&data)?;
    let out_file = fs::File::create(&out).map_err(|e| format!("create {}: {e}", out.display()))?;
    let err_file = out_file.try_clone().map_err(|e| format!("dup: {e}"))?;
    let mut config = RedisConfig::new(data);
    config.port = port;
    config.log = Some(log.clone());
    config.sentinel_conf = Some(conf);
    let spawn = |cmd: &mut std::process::Command| {
        cmd.current_dir(dir)
            .stdin(Stdio::null())
            .stdout(out_file)
            .stderr(err_file)
            .spawn()
            .map_err(|e| format!("start {} --sentinel: {e}", support::server_program()))
    };
    let (server, waited) = RedisServer::start(
        &config,
        &extra,
        spawn,
        Duration::from_secs(10),
        Duration::from_millis(50),
        || support::pings(Ipv4Addr::LOCALHOST, port, password).is_ok(),
    )?;
    let child = server.into_child();
    let started = Started {
        child,
        port,
        log,
        out,
    };
    let logs = || support::tail_file(&started.log, 20) + &support::tail_file(&started.out, 20);
    match waited {
        Waited::Ready => Ok(started),
        Waited::Exited(status) => Err(format!("sentinel {name} exited: {status}\n{}", logs())),
        Waited::TimedOut => {
            let text = format!("sentinel {name}: no PONG within 10 s\n{}", logs());
            support::stop_child(started.child, name, Duration::from_secs(5));
            Err(text)
        }
    }
}

/// The options of a TLS port (`port`) with the test material, whose paths
/// are in `macros` (`tls_server_cert`...).
pub fn tls_args(port: u16, macros: &[(String, String)]) -> Result<Vec<String>, String> {
    let path = |name: &str| {
        macros
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| PathBuf::from(v))
            .ok_or_else(|| format!("no {name} macro"))
    };
    let tls = TlsPort {
        port,
        cert: path("tls_server_cert")?,
        key: path("tls_server_key")?,
        ca: path("tls_ca")?,
        auth_clients: "optional",
    };
    Ok(tls.args())
}

/// The length of an array reply (`*N`), 0 for anything else.
fn count(reply: &str) -> usize {
    reply
        .strip_prefix('*')
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// Waits until every Sentinel knows its master's replicas and the other
/// Sentinels (they find each other through the master, every 2 s), so
/// that a test may kill one or ask for a failover at once.
pub fn wait_ready(all: &[Expected]) -> Result<(), String> {
    let deadline = Instant::now() + READY_DEADLINE;
    for s in all {
        let password = s.password.as_deref();
        let ask = |what: &str| {
            redis_cmd(s.port, password, &["SENTINEL", what, &s.master]).map_or(0, |r| count(&r))
        };
        support::poll_until(deadline, Duration::from_millis(100), || {
            let (replicas, sentinels) = (ask("replicas"), ask("sentinels"));
            if replicas >= s.replicas && sentinels >= s.sentinels {
                return Ok(());
            }
            Err(format!(
                "sentinel {}: knows {replicas} of {} replicas and {sentinels} of {} other sentinels after {} s",
                s.name,
                s.replicas,
                s.sentinels,
                READY_DEADLINE.as_secs()
            ))
        })?;
    }
    Ok(())
}
