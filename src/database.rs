//! A database object: its servers, its connections (private or shared),
//! its counters, and the execution of one command with retries.
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::command::{Command, MAX_COMMAND_BYTES};
use crate::config::{DbConfig, Role};
use crate::connection::private::PrivateConnections;
use crate::connection::shared::{SharedLease, SharedPool};
use crate::connection::{Connection, Failure};
use crate::error::{Error, Result};
use crate::reply::Reply;
use crate::server::{role_from_reply, Health, Server};
use crate::stats::{Counter, PrometheusOptions, ServerSnapshot, Stats, StatsContext};

/// The `ROLE` request, packed.
const ROLE: &[u8] = b"*1\r\n$4\r\nROLE\r\n";

/// What [`Database::execute`] tells its caller besides the result.
pub enum Note<'a> {
    /// A routing or connection decision, for `debug=true`.
    Debug(&'a str),
    /// Something the operator should know, reported once (not per command).
    Warning(&'a str),
}

/// Bound of each step of the role check in `vcl_init` (connect, `ROLE`)
/// when the object's timeout is 0 or longer: the CLI thread must not wait
/// long, and a server that does not answer in time is asked again by the
/// first command.
const LOAD_STEP_CAP: Duration = Duration::from_millis(500);

/// What `.stats()` renders.
pub enum StatsFormat<'a> {
    Json,
    Prometheus(&'a PrometheusOptions<'a>),
}

/// How long a worker waits for a pooled connection when
/// `connection_timeout` is 0 ("no timeout"): workers never wait unbounded.
const DEFAULT_POOL_WAIT: Duration = Duration::from_millis(1000);

enum Connections {
    Private(Box<PrivateConnections>),
    /// One pool per server, same index as `Database::servers`.
    Shared(Vec<SharedPool>),
}

/// Everything `new db = redis.db(...)` creates.
pub struct Database {
    name: String,
    config: DbConfig,
    stats: Arc<Stats>,
    servers: Vec<Server>,
    connections: Connections,
}

/// A connection held for one command; goes back to its thread's list or
/// to its pool when dropped, unless it broke.
enum Lease<'a> {
    Private {
        connections: &'a PrivateConnections,
        stats: &'a Stats,
        server: usize,
        conn: Option<Connection>,
    },
    Shared(SharedLease<'a>),
}

impl Lease<'_> {
    fn conn(&mut self) -> &mut Connection {
        match self {
            Lease::Private { conn, .. } => conn.as_mut().expect("private lease holds a connection"),
            Lease::Shared(lease) => lease.conn(),
        }
    }
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        if let Lease::Private {
            connections,
            stats,
            server,
            conn,
        } = self
        {
            if let Some(conn) = conn.take().filter(|conn| !conn.is_broken()) {
                connections.give_back(*server, conn, stats);
            }
        }
    }
}

impl Database {
    /// Builds the object with its counters in its own memory.
    pub fn new(name: &str, config: DbConfig) -> Result<Self> {
        Self::with_stats(name, config, Stats::default())
    }

    /// Builds the object counting into `stats` (e.g. a varnishstat
    /// segment); with `type=auto` asks the server its role now (a server
    /// that is down is asked again on its first connection).
    pub fn with_stats(name: &str, config: DbConfig, stats: Stats) -> Result<Self> {
        let stats = Arc::new(stats);
        let connector = crate::connection::Connector::new(
            &config.location,
            config.user.as_deref(),
            config.password.as_deref(),
            config.protocol,
            config.connection_timeout,
        )?;
        let health = Arc::new(Health::new(config.sickness_ttl));
        let server = Server::new(
            config.location.clone(),
            connector.clone(),
            config.role,
            health,
        );
        stats.inc(Counter::ServersTotal);
        let connections = if config.shared_connections {
            let wait = config
                .connection_timeout
                .filter(|wait| !wait.is_zero())
                .unwrap_or(DEFAULT_POOL_WAIT);
            Connections::Shared(vec![SharedPool::new(
                connector.location().to_string(),
                config.max_connections,
                wait,
            )])
        } else {
            Connections::Private(Box::new(PrivateConnections::new(config.max_connections)))
        };
        let db = Database {
            name: name.to_string(),
            config,
            stats,
            servers: vec![server],
            connections,
        };
        for server in &db.servers {
            if server.role() == Role::Auto && db.discover_role(server).is_none() {
                db.stats.inc(Counter::ServersFailed);
            }
        }
        Ok(db)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn config(&self) -> &DbConfig {
        &self.config
    }

    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    pub fn servers(&self) -> &[Server] {
        &self.servers
    }

    /// Open and idle connections of the shared pool of each server (zeros
    /// in private mode, where they live in the worker threads).
    pub fn pool_state(&self, server: usize) -> (u32, u32) {
        match &self.connections {
            Connections::Shared(pools) => pools.get(server).map_or((0, 0), SharedPool::state),
            Connections::Private(_) => (0, 0),
        }
    }

    /// Asks `ROLE` on a fresh connection and records the answer. Runs in
    /// `vcl_init`: each step is bounded by its timeout, at most
    /// [`LOAD_STEP_CAP`].
    fn discover_role(&self, server: &Server) -> Option<Role> {
        let cap = |timeout: Option<Duration>| {
            Some(timeout.map_or(LOAD_STEP_CAP, |timeout| timeout.min(LOAD_STEP_CAP)))
        };
        let mut conn = server
            .connector
            .connect_within(&self.stats, cap(self.config.connection_timeout))
            .ok()?;
        let reply = conn.request(ROLE, cap(self.config.command_timeout)).ok()?;
        let role = role_from_reply(&reply)?;
        server.set_role(role);
        Some(role)
    }

    /// The server to send a command to. `master=false` lets a replica
    /// serve it (unless `ignore_slaves`).
    fn pick_server(&self, master: bool) -> Result<usize> {
        let need_master = master || self.config.ignore_slaves;
        let now = Instant::now();
        let usable = |server: &Server| match server.role() {
            Role::Slave => !need_master,
            // Unknown roles (auto, server down at start-up) are learnt on
            // the next connection; give them the benefit of the doubt.
            _ => true,
        };
        let mut candidates = self.servers.iter().enumerate().filter(|(_, s)| usable(s));
        let first = candidates.clone().next();
        candidates
            .find(|(_, server)| !server.health.is_sick(now))
            .or(first)
            .map(|(index, _)| index)
            .ok_or(Error::NoServer {
                role: if need_master {
                    "master"
                } else {
                    "master or replica"
                },
            })
    }

    /// A connection to `server`: this thread's idle one or a new one in
    /// private mode, the one in a pool slot or a new one in shared mode.
    fn lease(&self, index: usize) -> Result<Lease<'_>> {
        let server = &self.servers[index];
        let now = Instant::now();
        match &self.connections {
            Connections::Shared(pools) => pools[index]
                .get(&self.stats, |idle| {
                    let usable = idle.and_then(|conn| self.still_usable(server, conn, now));
                    usable.map_or_else(|| self.connect(server), Ok)
                })
                .map(Lease::Shared),
            Connections::Private(connections) => {
                let usable = std::iter::from_fn(|| connections.take(index))
                    .find_map(|conn| self.still_usable(server, conn, now));
                let conn = usable.map_or_else(|| self.connect(server), Ok)?;
                Ok(Lease::Private {
                    connections,
                    stats: &self.stats,
                    server: index,
                    conn: Some(conn),
                })
            }
        }
    }

    /// `conn` unless it is past `connection_ttl`, older than the server's
    /// last failure, or closed by the server while idle (then dropped and
    /// counted).
    fn still_usable(
        &self,
        server: &Server,
        mut conn: Connection,
        now: Instant,
    ) -> Option<Connection> {
        if conn.expired(self.config.connection_ttl, now) {
            self.stats.inc(Counter::DroppedTtl);
            None
        } else if server.health.outdates(conn.created()) {
            self.stats.inc(Counter::DroppedSick);
            None
        } else if conn.closed_while_idle(now) {
            // Redis `timeout`, a proxy, CLIENT KILL: found before a command
            // is written to it and fails.
            self.stats.inc(Counter::DroppedHungUp);
            None
        } else {
            Some(conn)
        }
    }

    /// A new connection to `server`; a failure makes the server sick and
    /// spaces the next attempts, which fail at once until then.
    fn connect(&self, server: &Server) -> Result<Connection> {
        if let Err(wait) = server.health.may_connect() {
            return Err(Error::Backoff {
                server: server.connector.location().to_string(),
                retry_in_ms: wait.as_millis().max(1),
            });
        }
        // With connection_timeout=0 (none), a server that accepts and never
        // answers the handshake would hold the worker for good: the
        // command timeout bounds it then.
        let timeout = self
            .config
            .connection_timeout
            .or(self.config.command_timeout);
        match server.connector.connect_within(&self.stats, timeout) {
            Ok(conn) => {
                server.health.connect_succeeded();
                Ok(conn)
            }
            Err(err) => {
                server.health.mark_failed();
                server.health.connect_failed();
                Err(err)
            }
        }
    }

    /// Runs `command` and returns its reply (error replies included). A
    /// failed attempt (connection, I/O, timeout) is retried on a new
    /// connection up to the retry count. `debug` receives routing and
    /// connection decisions when the object has `debug=true`.
    pub fn execute(
        &self,
        command: &mut Command,
        master: bool,
        debug: &mut dyn FnMut(Note),
    ) -> Result<Reply> {
        let timeout = command
            .timeout
            .or(self.config.command_timeout)
            .filter(|timeout| !timeout.is_zero());
        let retries = command.retries.unwrap_or(self.config.max_command_retries);
        if let Err(size) = command.check_size() {
            self.stats.inc(Counter::CommandsFailed);
            return Err(Error::CommandTooLarge {
                size,
                limit: MAX_COMMAND_BYTES,
            });
        }
        let mut attempt = 0;
        loop {
            match self.attempt(command, master, timeout, debug) {
                Ok(reply) => {
                    // As in the C VMOD: `total` counts commands that got a
                    // reply, `failed` every attempt that got none.
                    self.stats.inc(Counter::CommandsTotal);
                    if matches!(reply, Reply::Error(_)) {
                        self.stats.inc(Counter::CommandsError);
                    }
                    return Ok(reply);
                }
                Err(err) if attempt < retries => {
                    self.stats.inc(Counter::CommandsFailed);
                    if self.config.debug {
                        let text = format!("attempt {} failed ({err}); retrying", attempt + 1);
                        debug(Note::Debug(&text));
                    }
                    attempt += 1;
                    self.stats.inc(Counter::CommandsRetried);
                }
                Err(err) => {
                    self.stats.inc(Counter::CommandsFailed);
                    return Err(err);
                }
            }
        }
    }

    fn attempt(
        &self,
        command: &mut Command,
        master: bool,
        timeout: Option<Duration>,
        debug: &mut dyn FnMut(Note),
    ) -> Result<Reply> {
        let index = self.pick_server(master)?;
        let server = &self.servers[index];
        if self.config.debug {
            debug(Note::Debug(&format!(
                "sending {} to {}",
                command.logged_name(),
                server.connector.location()
            )));
        }
        let mut lease = self.lease(index)?;
        let conn = lease.conn();
        // Once per connection at most: a server that does not answer
        // stays `auto` and is asked on the next connection.
        if server.role() == Role::Auto && !conn.role_asked() {
            conn.set_role_asked();
            match self.request(conn, server, ROLE, timeout)? {
                // An ACL user without +role, or ROLE renamed away: it will
                // never answer, so fall back for good. (Other errors, such
                // as LOADING, leave the role to the next connection.)
                Reply::Error(text)
                    if text.starts_with("NOPERM") || text.starts_with("ERR unknown command") =>
                {
                    if server.role_refused() {
                        debug(Note::Warning(&format!(
                            "ROLE refused by {} ({text}): taken as a master",
                            server.connector.location()
                        )));
                    }
                }
                reply => {
                    if let Some(role) = role_from_reply(&reply) {
                        server.set_role(role);
                        if role == Role::Slave && (master || self.config.ignore_slaves) {
                            return Err(Error::NoServer { role: "master" });
                        }
                    }
                }
            }
        }
        match command.packed_as_evalsha() {
            Some(evalsha) => match self.request(conn, server, &evalsha, timeout)? {
                Reply::Error(text) if text.starts_with("NOSCRIPT") => {
                    self.stats.inc(Counter::CommandsNoscript);
                    self.request(conn, server, command.packed(), timeout)
                }
                reply => Ok(reply),
            },
            None => self.request(conn, server, command.packed(), timeout),
        }
    }

    /// One request on `conn`, turning transport failures into counted,
    /// logged errors (and the server sick when it went away).
    fn request(
        &self,
        conn: &mut Connection,
        server: &Server,
        packed: &[u8],
        timeout: Option<Duration>,
    ) -> Result<Reply> {
        // Left out of step by the previous request of this attempt (ROLE,
        // or EVALSHA before EVAL): counted then.
        let was_broken = conn.is_broken();
        let result = conn.request(packed, timeout);
        if result.is_ok() && conn.is_broken() {
            // A reply followed by bytes nobody asked for: the connection
            // is out of step and dropped after this command.
            self.stats.inc(Counter::DroppedError);
        }
        result.map_err(|failure| {
            let server_name = server.connector.location().to_string();
            match failure {
                Failure::Timeout => {
                    self.stats.inc(Counter::DroppedError);
                    return Error::Timeout {
                        server: server_name,
                        timeout_ms: timeout.map_or(0, |t| t.as_millis()),
                    };
                }
                _ if was_broken => {}
                Failure::HungUp(_) => self.stats.inc(Counter::DroppedHungUp),
                Failure::Io(_) | Failure::Protocol(_) => self.stats.inc(Counter::DroppedError),
            }
            server.health.mark_failed();
            Error::Io {
                server: server_name,
                source: failure,
            }
        })
    }

    /// Renders the counters as `.stats()` shows them: the C VMOD's output,
    /// plus each server's state when `extended` ([ext]).
    pub fn write_stats(&self, out: &mut String, format: &StatsFormat, extended: bool) {
        let servers: Vec<ServerSnapshot> = self
            .servers
            .iter()
            .enumerate()
            .filter(|_| extended)
            .map(|(index, server)| self.server_snapshot(index, server))
            .collect();
        let context = StatsContext {
            db_name: &self.name,
            servers: &servers,
        };
        match format {
            StatsFormat::Json => self.stats.write_json(out, &context),
            StatsFormat::Prometheus(options) => self.stats.write_prometheus(out, &context, options),
        }
    }

    fn server_snapshot(&self, index: usize, server: &Server) -> ServerSnapshot {
        let (open, idle) = self.pool_state(index);
        ServerSnapshot {
            location: server.connector.location().to_string(),
            role: server.role(),
            sick: server.health.is_sick(Instant::now()),
            connections_open: u64::from(open),
            connections_idle: u64::from(idle),
        }
    }

    /// Closes idle connections (VCL cold). Returns how many were closed.
    pub fn close_idle(&self) -> usize {
        match &self.connections {
            Connections::Private(connections) => connections.close_idle(),
            Connections::Shared(pools) => pools.iter().map(SharedPool::close_idle).sum(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{DbArgs, Secret};
    use crate::testing::RedisProcess;

    /// Longer than a connection must be idle to be checked before use.
    const IDLE_CHECK_WAIT: Duration = Duration::from_millis(600);

    fn database(redis: &RedisProcess, edit: impl FnOnce(&mut DbArgs)) -> Database {
        let location = redis.location();
        let mut args = DbArgs {
            location: &location,
            role: "master",
            ..DbArgs::default()
        };
        edit(&mut args);
        Database::new("db", DbConfig::from_args(&args).expect("valid config")).expect("database")
    }

    fn run(db: &Database, args: &[&str]) -> Result<Reply> {
        let mut command = Command::new(args[0].as_bytes());
        for arg in &args[1..] {
            command.push(arg.as_bytes());
        }
        db.execute(&mut command, true, &mut |_| {})
    }

    #[test]
    fn private_connection_is_reused_by_the_thread() {
        let redis = RedisProcess::start(&[]);
        let db = database(&redis, |args| args.shared_connections = false);
        assert_eq!(
            run(&db, &["SET", "k", "v"]).unwrap(),
            Reply::Status("OK".into())
        );
        assert_eq!(
            run(&db, &["GET", "k"]).unwrap(),
            Reply::String(b"v".to_vec())
        );
        assert_eq!(db.stats().get(Counter::ConnectionsTotal), 1);
        assert_eq!(db.stats().get(Counter::CommandsTotal), 2);
        // Another thread opens its own connection.
        std::thread::scope(|scope| {
            scope.spawn(|| run(&db, &["PING"]).unwrap());
        });
        assert_eq!(db.stats().get(Counter::ConnectionsTotal), 2);
        assert_eq!(db.close_idle(), 2);
    }

    #[test]
    fn too_large_a_command_fails_without_touching_the_connection() {
        let redis = RedisProcess::start(&[]);
        let db = database(&redis, |_| {});
        let mut command = Command::new(b"SET");
        command.push(b"big");
        command.push(&vec![b'x'; MAX_COMMAND_BYTES]);
        let err = db.execute(&mut command, true, &mut |_| {}).unwrap_err();
        assert!(
            err.to_string().starts_with("command of 16777")
                && err
                    .to_string()
                    .ends_with("larger than the 16777216 bytes limit"),
            "{err}"
        );
        assert_eq!(db.stats().get(Counter::CommandsFailed), 1);
        assert_eq!(
            db.stats().get(Counter::ConnectionsTotal),
            0,
            "nothing was sent"
        );
        assert_eq!(redis.cli(&["EXISTS", "big"]), "0");
        assert_eq!(run(&db, &["PING"]).unwrap(), Reply::Status("PONG".into()));
    }

    #[test]
    fn error_reply_is_a_reply_and_counted() {
        let redis = RedisProcess::start(&[]);
        let db = database(&redis, |_| {});
        let reply = run(&db, &["NOSUCHCOMMAND"]).unwrap();
        assert!(matches!(&reply, Reply::Error(text) if text.starts_with("ERR unknown command")));
        assert_eq!(db.stats().get(Counter::CommandsError), 1);
        assert_eq!(db.stats().get(Counter::CommandsFailed), 0);
    }

    #[test]
    fn eval_goes_out_as_evalsha_and_falls_back_once() {
        let redis = RedisProcess::start(&[]);
        let db = database(&redis, |_| {});
        let script = "return ARGV[1]";
        for _ in 0..3 {
            let reply = run(&db, &["EVAL", script, "0", "hello"]).unwrap();
            assert_eq!(reply, Reply::String(b"hello".to_vec()));
        }
        assert_eq!(db.stats().get(Counter::CommandsNoscript), 1);
        redis.cli(&["SCRIPT", "FLUSH"]);
        run(&db, &["EVAL", script, "0", "again"]).unwrap();
        assert_eq!(db.stats().get(Counter::CommandsNoscript), 2);
    }

    #[test]
    fn retry_reconnects_after_the_server_closed_the_connection() {
        let redis = RedisProcess::start(&[]);
        for shared in [false, true] {
            let db = database(&redis, |args| {
                args.shared_connections = shared;
                args.max_command_retries = 1;
            });
            run(&db, &["PING"]).unwrap();
            redis.cli(&["CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"]);
            assert_eq!(run(&db, &["PING"]).unwrap(), Reply::Status("PONG".into()));
            let stats = db.stats();
            assert_eq!(stats.get(Counter::CommandsRetried), 1, "shared={shared}");
            assert_eq!(stats.get(Counter::CommandsFailed), 1, "shared={shared}");
            assert_eq!(stats.get(Counter::CommandsTotal), 2, "shared={shared}");
            assert_eq!(stats.get(Counter::ConnectionsTotal), 2, "shared={shared}");
        }
    }

    #[test]
    fn without_retries_a_dead_connection_fails_once_then_recovers() {
        let redis = RedisProcess::start(&[]);
        for shared in [false, true] {
            let db = database(&redis, |args| args.shared_connections = shared);
            run(&db, &["PING"]).unwrap();
            redis.cli(&["CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"]);
            assert!(run(&db, &["PING"]).is_err(), "shared={shared}");
            assert_eq!(db.stats().get(Counter::CommandsFailed), 1);
            assert_eq!(run(&db, &["PING"]).unwrap(), Reply::Status("PONG".into()));
            assert_eq!(db.stats().get(Counter::ConnectionsTotal), 2);
            if shared {
                // The broken connection left its slot; the next worker
                // filled it: one connection open, idle.
                assert_eq!(db.pool_state(0), (1, 1));
            }
        }
    }

    #[test]
    fn a_shared_pool_opens_only_the_connections_workers_need_at_once() {
        let redis = RedisProcess::start(&[]);
        let db = database(&redis, |args| {
            args.shared_connections = true;
            args.max_connections = 100;
        });
        for _ in 0..20 {
            run(&db, &["PING"]).unwrap();
        }
        assert_eq!(db.stats().get(Counter::ConnectionsTotal), 1);
        assert_eq!(db.pool_state(0), (1, 1));
        // Two commands in flight at once (the first one's sleep holds the
        // server): a second connection, then both reused.
        let ready = std::sync::Barrier::new(2);
        std::thread::scope(|scope| {
            for _ in 0..2 {
                scope.spawn(|| {
                    ready.wait();
                    run(&db, &["DEBUG", "SLEEP", "0.2"]).unwrap();
                });
            }
        });
        assert_eq!(db.stats().get(Counter::ConnectionsTotal), 2);
        for _ in 0..20 {
            run(&db, &["PING"]).unwrap();
        }
        assert_eq!(db.stats().get(Counter::ConnectionsTotal), 2);
        assert_eq!(db.pool_state(0), (2, 2));
        // Redis agrees (its list has redis-cli's own connection too).
        assert_eq!(redis.cli(&["CLIENT", "LIST"]).lines().count(), 3);
    }

    #[test]
    fn a_failure_makes_older_connections_of_other_threads_stale() {
        let redis = RedisProcess::start(&[]);
        let db = database(&redis, |args| args.shared_connections = false);
        let (ready, go) = (std::sync::Barrier::new(2), std::sync::Barrier::new(2));
        std::thread::scope(|scope| {
            // A second worker holds an idle connection across the restart.
            scope.spawn(|| {
                run(&db, &["PING"]).unwrap();
                ready.wait();
                go.wait();
                // Its connection predates the failure: dropped as sick and
                // replaced, instead of failing the command.
                assert_eq!(run(&db, &["PING"]).unwrap(), Reply::Status("PONG".into()));
            });
            run(&db, &["PING"]).unwrap();
            ready.wait();
            redis.cli(&["CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"]);
            assert!(run(&db, &["PING"]).is_err());
            assert!(db.servers()[0].health.is_sick(Instant::now()));
            go.wait();
        });
        assert_eq!(db.stats().get(Counter::DroppedHungUp), 1);
        assert_eq!(db.stats().get(Counter::DroppedSick), 1);
        assert_eq!(db.stats().get(Counter::CommandsFailed), 1);
    }

    #[test]
    fn command_timeout_fails_the_command_and_drops_the_connection() {
        let redis = RedisProcess::start(&[]);
        let db = database(&redis, |args| {
            args.shared_connections = false;
            args.command_timeout = 100;
        });
        let started = Instant::now();
        let err = run(&db, &["DEBUG", "SLEEP", "0.5"]).unwrap_err();
        assert!(matches!(err, Error::Timeout { .. }), "{err}");
        assert!(started.elapsed() < Duration::from_millis(450));
        assert_eq!(db.stats().get(Counter::DroppedError), 1);
        std::thread::sleep(Duration::from_millis(500));
        assert_eq!(run(&db, &["PING"]).unwrap(), Reply::Status("PONG".into()));
    }

    #[test]
    fn connection_ttl_replaces_old_connections() {
        let redis = RedisProcess::start(&[]);
        for shared in [false, true] {
            let db = database(&redis, |args| {
                args.shared_connections = shared;
                args.connection_ttl = 1;
            });
            run(&db, &["PING"]).unwrap();
            std::thread::sleep(Duration::from_millis(1100));
            run(&db, &["PING"]).unwrap();
            assert_eq!(db.stats().get(Counter::DroppedTtl), 1, "shared={shared}");
            assert_eq!(
                db.stats().get(Counter::ConnectionsTotal),
                2,
                "shared={shared}"
            );
        }
    }

    #[test]
    fn shared_pool_is_bounded_and_counts_blocked_workers() {
        let redis = RedisProcess::start(&[]);
        let db = database(&redis, |args| {
            args.shared_connections = true;
            args.max_connections = 1;
            args.connection_timeout = 2000;
        });
        std::thread::scope(|scope| {
            for _ in 0..4 {
                scope.spawn(|| {
                    let reply = run(&db, &["DEBUG", "SLEEP", "0.05"]).unwrap();
                    assert_eq!(reply, Reply::Status("OK".into()));
                });
            }
        });
        assert_eq!(db.stats().get(Counter::ConnectionsTotal), 1);
        assert!(db.stats().get(Counter::WorkersBlocked) >= 1);
        assert_eq!(db.pool_state(0), (1, 1));
        assert_eq!(db.close_idle(), 1);
        assert_eq!(db.pool_state(0), (0, 0));
    }

    #[test]
    fn a_huge_max_connections_makes_a_bounded_pool() {
        let redis = RedisProcess::start(&[]);
        let db = database(&redis, |args| {
            args.shared_connections = true;
            args.max_connections = i64::from(u32::MAX);
            // Making the slots must not be bounded by this.
            args.connection_timeout = 1;
        });
        assert_eq!(run(&db, &["PING"]).unwrap(), Reply::Status("PONG".into()));
        assert_eq!(db.pool_state(0), (1, 1));
    }

    #[test]
    fn a_burst_on_a_fresh_pool_opens_no_more_connections_than_workers() {
        let redis = RedisProcess::start(&[]);
        let db = database(&redis, |args| {
            args.shared_connections = true;
            args.max_connections = 100;
            args.connection_timeout = 5000;
            // HELLO on connect: opening waits while Redis sleeps.
            args.protocol = "RESP3";
        });
        let sleeper = std::thread::spawn({
            let cli = redis.location();
            move || {
                std::process::Command::new("redis-cli")
                    .args(["-s", &cli, "DEBUG", "SLEEP", "0.3"])
                    .output()
                    .expect("redis-cli")
            }
        });
        std::thread::sleep(Duration::from_millis(50));
        std::thread::scope(|scope| {
            for _ in 0..8 {
                scope.spawn(|| run(&db, &["PING"]).unwrap());
            }
        });
        sleeper.join().unwrap();
        let opened = db.stats().get(Counter::ConnectionsTotal);
        assert!(
            (1..=8).contains(&opened),
            "{opened} connections for 8 workers"
        );
    }

    #[test]
    fn private_lru_drops_connections_over_the_limit() {
        let redis = RedisProcess::start(&[]);
        let db = database(&redis, |args| args.shared_connections = false);
        let connections = PrivateConnections::new(1);
        let stats = Stats::default();
        let server = &db.servers()[0];
        connections.give_back(0, server.connector.connect(&stats).unwrap(), &stats);
        connections.give_back(1, server.connector.connect(&stats).unwrap(), &stats);
        assert_eq!(stats.get(Counter::DroppedOverflow), 1);
        assert!(connections.take(0).is_none());
        assert!(connections.take(1).is_some());
    }

    #[test]
    fn auth_with_acl_user_and_wrong_password() {
        let redis = RedisProcess::start(&["--user", "alice", "on", ">secret", "~*", "+@all"]);
        let good = database(&redis, |args| {
            args.user = "alice";
            args.password = Secret("secret");
        });
        assert_eq!(run(&good, &["PING"]).unwrap(), Reply::Status("PONG".into()));
        let bad = database(&redis, |args| {
            args.user = "alice";
            args.password = Secret("wrong");
            args.shared_connections = false;
        });
        let err = run(&bad, &["PING"]).unwrap_err();
        assert!(matches!(err, Error::Connect { .. }), "{err}");
        assert!(bad.stats().get(Counter::ConnectionsFailed) >= 1);
    }

    #[test]
    fn an_idle_connection_the_server_closed_is_replaced_before_use() {
        let redis = RedisProcess::start(&[]);
        for shared in [false, true] {
            let db = database(&redis, |args| args.shared_connections = shared);
            run(&db, &["PING"]).unwrap();
            redis.cli(&["CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"]);
            std::thread::sleep(IDLE_CHECK_WAIT);
            assert_eq!(run(&db, &["PING"]).unwrap(), Reply::Status("PONG".into()));
            let stats = db.stats();
            assert_eq!(stats.get(Counter::CommandsFailed), 0, "shared={shared}");
            assert_eq!(stats.get(Counter::DroppedHungUp), 1, "shared={shared}");
            assert_eq!(stats.get(Counter::ConnectionsTotal), 2, "shared={shared}");
            // The server is not blamed for it.
            assert!(!db.servers()[0].health.is_sick(Instant::now()));
        }
    }

    #[test]
    fn without_hello_the_password_goes_in_auth_and_never_in_errors() {
        let redis = RedisProcess::start(&[
            "--requirepass",
            "Sup3rS3cret",
            "--rename-command",
            "HELLO",
            "",
        ]);
        for protocol in ["RESP2", "RESP3"] {
            let good = database(&redis, |args| {
                args.password = Secret("Sup3rS3cret");
                args.protocol = protocol;
            });
            assert_eq!(run(&good, &["PING"]).unwrap(), Reply::Status("PONG".into()));
            // RESP2 replies whatever was asked: the server has no HELLO.
            assert_eq!(
                run(&good, &["HGETALL", "none"]).unwrap(),
                Reply::Array(vec![])
            );
            let bad = database(&redis, |args| {
                args.password = Secret("Wr0ngS3cret");
                args.protocol = protocol;
            });
            let err = run(&bad, &["PING"]).unwrap_err().to_string();
            assert!(err.contains("authentication failed (WRONGPASS"), "{err}");
            assert!(!err.contains("S3cret"), "{err}");
        }
    }

    #[test]
    fn a_failed_connect_makes_the_next_commands_fail_fast_until_the_spacing_ends() {
        let redis = RedisProcess::start(&["--requirepass", "right"]);
        let db = database(&redis, |args| args.password = Secret("wrong"));
        assert!(matches!(run(&db, &["PING"]), Err(Error::Connect { .. })));
        // 100 ms of commands: attempts at 0, 25 and 75 ms at most.
        let started = Instant::now();
        let mut spaced = 0;
        while started.elapsed() < Duration::from_millis(100) {
            if matches!(run(&db, &["PING"]), Err(Error::Backoff { .. })) {
                spaced += 1;
            }
        }
        assert!(spaced > 0);
        assert!((1..=3).contains(&db.stats().get(Counter::ConnectionsFailed)));
        redis.cli(&["-a", "right", "CONFIG", "SET", "requirepass", "wrong"]);
        std::thread::sleep(crate::server::MAX_BACKOFF);
        assert_eq!(run(&db, &["PING"]).unwrap(), Reply::Status("PONG".into()));
    }

    #[test]
    fn resp3_replies_keep_their_types() {
        let redis = RedisProcess::start(&[]);
        let db = database(&redis, |args| args.protocol = "RESP3");
        run(&db, &["HSET", "h", "f", "v"]).unwrap();
        assert_eq!(
            run(&db, &["HGETALL", "h"]).unwrap(),
            Reply::Array(vec![
                Reply::String(b"f".to_vec()),
                Reply::String(b"v".to_vec())
            ])
        );
        let double = run(&db, &["EVAL", "redis.setresp(3); return {double=1.5}", "0"]).unwrap();
        assert_eq!(double, Reply::Double(1.5));
    }

    #[test]
    fn down_server_fails_fast_in_both_modes() {
        let dir = std::env::temp_dir().join(format!("vmod-redis-unit-down-{}", std::process::id()));
        let location = dir.join("nobody.sock").display().to_string();
        for shared in [false, true] {
            let args = DbArgs {
                location: &location,
                role: "master",
                shared_connections: shared,
                ..DbArgs::default()
            };
            let db = Database::new("db", DbConfig::from_args(&args).unwrap()).unwrap();
            // The first failure marks the server sick; then no waiting.
            let _ = run(&db, &["PING"]);
            let started = Instant::now();
            assert!(run(&db, &["PING"]).is_err());
            assert!(
                started.elapsed() < Duration::from_millis(200),
                "shared={shared}"
            );
            assert!(db.stats().get(Counter::CommandsFailed) == 2);
        }
    }
}
