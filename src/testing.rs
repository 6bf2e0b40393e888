//! Test support: a real redis-server on a UNIX socket in a temp dir (no TCP
//! port, so parallel tests never collide), stopped when dropped. Started by
//! the launcher every harness shares (tests/support/redis_server.rs).
use std::path::PathBuf;
use std::process::Command;

// Included, not copied: the integration tests and the benches start their
// servers with the same file. Each includer uses a part of it.
#[allow(dead_code, reason = "each includer uses a part of the shared launcher")]
#[path = "../tests/support/redis_server.rs"]
mod redis_server;

use redis_server::{RedisServer, TlsPort, Waited};

/// Stopped and its directory removed on drop.
pub struct RedisProcess {
    // Held for its drop.
    _server: RedisServer,
    pub socket: PathBuf,
}

impl RedisProcess {
    /// Starts `redis-server` with `extra` arguments. Panics when it cannot:
    /// these tests need the real server (`scripts/deps` installs it).
    pub fn start(extra: &[&str]) -> RedisProcess {
        RedisProcess::start_with(None, extra)
    }

    fn start_with(tls: Option<TlsPort>, extra: &[&str]) -> RedisProcess {
        let mut args = vec!["--enable-debug-command".to_string(), "yes".to_string()];
        args.extend(extra.iter().map(|a| a.to_string()));
        let (server, waited) = RedisServer::start_on_socket("unit", tls, &args)
            .expect("redis-server (install it: bash scripts/deps)");
        assert!(
            matches!(waited, Waited::Ready),
            "redis-server did not start"
        );
        let socket = server.socket.clone().expect("a UNIX socket");
        RedisProcess {
            _server: server,
            socket,
        }
    }

    /// Runs redis-cli against this server and returns its output.
    pub fn cli(&self, args: &[&str]) -> String {
        let out = Command::new(redis_server::cli_program())
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

/// A TCP port free on 127.0.0.1 right now, as text for a command line
/// (for the few tests that need TCP: TLS, a cluster bus).
pub fn free_port() -> String {
    redis_server::free_port().expect("a free port").to_string()
}

/// A redis-server with TLS on a TCP port of 127.0.0.1 (the test material
/// of `tag`), its TLS port, and that material.
pub fn tls_redis(tag: &str) -> (RedisProcess, String, crate::tls::testing::Material) {
    let files = crate::tls::testing::material(tag);
    let port = redis_server::free_port().expect("a free port");
    let tls = TlsPort {
        port,
        cert: files.server_cert.clone(),
        key: files.server_key.clone(),
        ca: files.ca.clone(),
        auth_clients: "no",
    };
    let redis = RedisProcess::start_with(Some(tls), &[]);
    (redis, port.to_string(), files)
}

/// The same on the X.509 v1 certificates Redis's utils/gen-test-certs.sh
/// makes (the `v1_*` material), client certificates required, `extra`
/// arguments added.
pub fn v1_tls_redis(
    tag: &str,
    extra: &[&str],
) -> (RedisProcess, String, crate::tls::testing::Material) {
    let files = crate::tls::testing::material(tag);
    let port = redis_server::free_port().expect("a free port");
    let tls = TlsPort {
        port,
        cert: files.v1_server_cert.clone(),
        key: files.v1_server_key.clone(),
        ca: files.v1_ca.clone(),
        auth_clients: "yes",
    };
    let redis = RedisProcess::start_with(Some(tls), extra);
    (redis, port.to_string(), files)
}

/// A [`ManageConnection`](crate::connection::ManageConnection) for tests of
/// the connection layer: opens with its function, takes any idle
/// connection back, prepares nothing.
pub struct Opener<F>(pub F);

impl<E, F> crate::connection::ManageConnection for Opener<F>
where
    E: std::fmt::Display,
    F: Fn() -> Result<crate::connection::Connection, E>,
{
    type Error = E;

    fn connect(
        &self,
        _deadline: Option<std::time::Instant>,
        _timeout: Option<std::time::Duration>,
    ) -> Result<crate::connection::Connection, E> {
        (self.0)()
    }

    fn is_usable(
        &self,
        _conn: &mut crate::connection::Connection,
        _now: std::time::Instant,
    ) -> bool {
        true
    }

    fn prepare(
        &self,
        conn: crate::connection::Connection,
        _timeout: Option<std::time::Duration>,
        _deadline: Option<std::time::Instant>,
    ) -> Result<crate::connection::Connection, E> {
        Ok(conn)
    }
}
