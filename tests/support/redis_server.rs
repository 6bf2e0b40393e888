//! The one redis-server launcher of the project, after redis-rs's
//! `RedisServer` (redis/tests/support/mod.rs): the unit tests
//! (src/testing.rs), tests/vtc, tests/faults, the Sentinels and cluster
//! nodes of this directory and both benches build their command line and
//! start the server here, and take a free loopback port from here.
//!
//! Only std: the library's unit-test build includes this file
//! (`#[path]` in src/testing.rs) without the rest of tests/support (libc,
//! varnishd). What differs per harness comes in as closures, as the
//! spawner does in redis-rs: how to spawn (a PID registry, CPU pinning, a
//! restart script written from the command) and when the server is ready.
use std::net::{Ipv4Addr, TcpListener};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread;
use std::time::{Duration, Instant};

/// A TCP port free on 127.0.0.1 right now.
pub fn free_port() -> Result<u16, String> {
    let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .map_err(|e| format!("no free loopback port: bind: {e}"))?;
    l.local_addr()
        .map(|a| a.port())
        .map_err(|e| format!("local_addr: {e}"))
}

/// What one start on a free port gave: up, or a failure another port
/// may not have (the port was taken between [`free_port`] and the bind).
pub enum OnPort<T> {
    Up(T),
    /// Try another port; the text is the error if this was the last try.
    Retry(String),
}

/// Starts something on a free port, and on another one while an attempt
/// says [`OnPort::Retry`], `attempts` in all. A failure no other port can
/// fix is `start`'s `Err`, returned at once.
pub fn on_free_port<T>(
    attempts: usize,
    mut start: impl FnMut(u16) -> Result<OnPort<T>, String>,
) -> Result<T, String> {
    let mut last = String::from("no attempt to start");
    for _ in 0..attempts {
        match start(free_port()?)? {
            OnPort::Up(started) => return Ok(started),
            OnPort::Retry(why) => last = why,
        }
    }
    Err(last)
}

/// The server the tests start: `$REDIS_SERVER` (e.g. `valkey-server`, which
/// takes the same options), `redis-server` by default.
pub fn server_program() -> String {
    program_from_env("REDIS_SERVER", "redis-server")
}

/// The command-line client given to tests: `$REDIS_CLI`, `redis-cli` by
/// default (it speaks to Valkey too).
pub fn cli_program() -> String {
    program_from_env("REDIS_CLI", "redis-cli")
}

fn program_from_env(var: &str, default: &str) -> String {
    std::env::var(var)
        .ok()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| default.to_string())
}

/// A TLS port and the files it serves (tls_material.rs writes them).
pub struct TlsPort {
    pub port: u16,
    pub cert: PathBuf,
    pub key: PathBuf,
    pub ca: PathBuf,
    /// `--tls-auth-clients`: `no`, `optional` or `yes`.
    pub auth_clients: &'static str,
}

impl TlsPort {
    /// redis-server's options for this port.
    pub fn args(&self) -> Vec<String> {
        let path = |p: &PathBuf| p.display().to_string();
        vec![
            "--tls-port".into(),
            self.port.to_string(),
            "--tls-cert-file".into(),
            path(&self.cert),
            "--tls-key-file".into(),
            path(&self.key),
            "--tls-ca-cert-file".into(),
            path(&self.ca),
            "--tls-auth-clients".into(),
            self.auth_clients.into(),
        ]
    }
}

/// What a redis-server listens on and where it keeps its files: its
/// command line, the same for every harness.
pub struct RedisConfig {
    /// TCP port on 127.0.0.1; 0 for none.
    pub port: u16,
    /// A UNIX socket, mode 777 (varnishd's workers run as another user).
    pub socket: Option<PathBuf>,
    pub tls: Option<TlsPort>,
    /// Its working directory (`--dir`: RDB, a cluster node's nodes.conf).
    pub dir: PathBuf,
    /// `--logfile`; none: the log goes to stdout.
    pub log: Option<PathBuf>,
    /// A Sentinel: this configuration file (Sentinel rewrites it), and
    /// `--sentinel`.
    pub sentinel_conf: Option<PathBuf>,
}

impl RedisConfig {
    /// Listens on nothing yet, keeps its files in `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> RedisConfig {
        RedisConfig {
            port: 0,
            socket: None,
            tls: None,
            dir: dir.into(),
            log: None,
            sentinel_conf: None,
        }
    }

    /// `$REDIS_SERVER [CONF --sentinel] --bind 127.0.0.1 --port PORT
    /// --daemonize no --dir DIR [--logfile LOG]`, with no persistence
    /// (a server, not a Sentinel), the UNIX socket and the TLS port when
    /// set; callers add their options (later ones win) and stdio.
    pub fn command(&self) -> Command {
        let mut cmd = Command::new(server_program());
        match &self.sentinel_conf {
            Some(conf) => {
                cmd.arg(conf).arg("--sentinel");
            }
            None => {
                cmd.args(["--save", "", "--appendonly", "no"]);
            }
        }
        cmd.args(["--bind", "127.0.0.1", "--port", &self.port.to_string()])
            .args(["--daemonize", "no"])
            .arg("--dir")
            .arg(&self.dir);
        if let Some(log) = &self.log {
            cmd.arg("--logfile").arg(log);
        }
        if let Some(socket) = &self.socket {
            cmd.arg("--unixsocket")
                .arg(socket)
                .args(["--unixsocketperm", "777"]);
        }
        if let Some(tls) = &self.tls {
            cmd.args(tls.args());
        }
        cmd
    }
}

/// How a wait for a process ended.
pub enum Waited {
    Ready,
    Exited(ExitStatus),
    TimedOut,
}

/// Polls `ready` every `poll` until it says yes, `child` exits or `bound`
/// has passed.
pub fn wait_ready(
    child: &mut Child,
    bound: Duration,
    poll: Duration,
    mut ready: impl FnMut() -> bool,
) -> Waited {
    let deadline = Instant::now() + bound;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Waited::Exited(status);
        }
        if ready() {
            return Waited::Ready;
        }
        if Instant::now() >= deadline {
            return Waited::TimedOut;
        }
        thread::sleep(poll);
    }
}

/// A started redis-server (or Sentinel): killed (SIGKILL) on drop unless
/// its caller took the process with [`RedisServer::into_child`] to stop
/// it its own way.
pub struct RedisServer {
    child: Option<Child>,
    pub port: u16,
    pub socket: Option<PathBuf>,
    /// The directory [`RedisServer::start_on_socket`] made, removed on drop.
    temp_dir: Option<PathBuf>,
}

impl RedisServer {
    /// Runs `config`'s command line with `args` added through `spawn`,
    /// then polls `ready` every `poll` for `bound` at most. The server is
    /// returned however the wait ended, so that the caller shows its log
    /// and stops it as it does for its other processes.
    pub fn start(
        config: &RedisConfig,
        args: &[String],
        spawn: impl FnOnce(&mut Command) -> Result<Child, String>,
        bound: Duration,
        poll: Duration,
        ready: impl FnMut() -> bool,
    ) -> Result<(RedisServer, Waited), String> {
        let mut cmd = config.command();
        cmd.args(args);
        let mut child = spawn(&mut cmd)?;
        let waited = wait_ready(&mut child, bound, poll, ready);
        let server = RedisServer {
            child: Some(child),
            port: config.port,
            socket: config.socket.clone(),
            temp_dir: None,
        };
        Ok((server, waited))
    }

    /// A server on a UNIX socket only (no TCP port, so that parallel
    /// tests never collide; `tls` adds a TLS port), in a fresh directory
    /// `$TMPDIR/vmod-redis-<tag>-<pid>-<n>` removed on drop, its output
    /// discarded: up once the socket accepts (10 s at most).
    pub fn start_on_socket(
        tag: &str,
        tls: Option<TlsPort>,
        args: &[String],
    ) -> Result<(RedisServer, Waited), String> {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "vmod-redis-{tag}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
        let socket = dir.join("redis.sock");
        let mut config = RedisConfig::new(&dir);
        config.socket = Some(socket.clone());
        config.tls = tls;
        let spawn = |cmd: &mut Command| {
            cmd.stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .map_err(|e| format!("start {}: {e}", server_program()))
        };
        let started = RedisServer::start(
            &config,
            args,
            spawn,
            Duration::from_secs(10),
            Duration::from_millis(10),
            || UnixStream::connect(&socket).is_ok(),
        );
        match started {
            Ok((mut server, waited)) => {
                server.temp_dir = Some(dir);
                Ok((server, waited))
            }
            Err(e) => {
                let _ = std::fs::remove_dir_all(&dir);
                Err(e)
            }
        }
    }

    /// The process, for a caller that stops it its own way (a server of
    /// [`RedisServer::start_on_socket`] keeps its directory then).
    pub fn into_child(mut self) -> Child {
        self.child.take().expect("the child until dropped")
    }

    /// SIGKILL, and reaped.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        if let Some(dir) = &self.temp_dir {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}
