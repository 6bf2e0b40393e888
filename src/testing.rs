//! Test support: a real redis-server on a UNIX socket in a temp dir (no TCP
//! port, so parallel tests never collide), stopped by PID when dropped.
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct RedisProcess {
    child: Child,
    dir: PathBuf,
    pub socket: PathBuf,
}

impl RedisProcess {
    /// Starts `redis-server` with `extra` arguments. Panics when it cannot:
    /// these tests need the real server (`scripts/deps` installs it).
    pub fn start(extra: &[&str]) -> RedisProcess {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "vmod-redis-unit-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).expect("test directory");
        let socket = dir.join("redis.sock");
        let child = Command::new(program("REDIS_SERVER", "redis-server"))
            .args(["--port", "0", "--save", "", "--appendonly", "no"])
            .args(["--enable-debug-command", "yes"])
            .arg("--unixsocket")
            .arg(&socket)
            .arg("--dir")
            .arg(&dir)
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server (install it: bash scripts/deps)");
        let redis = RedisProcess { child, dir, socket };
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::os::unix::net::UnixStream::connect(&redis.socket).is_err() {
            assert!(Instant::now() < deadline, "redis-server did not start");
            std::thread::sleep(Duration::from_millis(10));
        }
        redis
    }

    /// Runs redis-cli against this server and returns its output.
    pub fn cli(&self, args: &[&str]) -> String {
        let out = Command::new(program("REDIS_CLI", "redis-cli"))
            .arg("-s")
            .arg(&self.socket)
            .args(args)
            .output()
            .expect("redis-cli");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    pub fn location(&self) -> String {
        self.socket.display().to_string()
    }
}

impl Drop for RedisProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A TCP port free on 127.0.0.1 right now, as text for a command line
/// (for the few tests that need TCP: TLS, a cluster bus).
pub fn free_port() -> String {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
        .to_string()
}

/// The server (or client) program the tests run: `$VAR` when set (e.g.
/// `REDIS_SERVER=valkey-server`), else `default`.
fn program(var: &str, default: &str) -> String {
    std::env::var(var)
        .ok()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| default.to_string())
}

/// A redis-server with TLS on a TCP port of 127.0.0.1 (the test material
/// of `tag`), its TLS port, and that material.
pub fn tls_redis(tag: &str) -> (RedisProcess, String, crate::tls::testing::Material) {
    let files = crate::tls::testing::material(tag);
    let port = crate::testing::free_port();
    let redis = RedisProcess::start(&[
        "--bind",
        "127.0.0.1",
        "--tls-port",
        &port,
        "--tls-cert-file",
        crate::tls::testing::text(&files.server_cert),
        "--tls-key-file",
        crate::tls::testing::text(&files.server_key),
        "--tls-ca-cert-file",
        crate::tls::testing::text(&files.ca),
        "--tls-auth-clients",
        "no",
    ]);
    (redis, port, files)
}
