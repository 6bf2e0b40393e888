//! A database object: its servers (a [`Topology`] snapshot), its
//! connections (private or shared), its counters, and the execution of one
//! command along the execution plan ([`crate::routing`]) with retries.
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use crate::command::{Command, MAX_COMMAND_BYTES};
use crate::config::{ConfigError, DbConfig, Location, Role, Subnets};
use crate::connection::private::{Owner, PrivateConnections};
use crate::connection::shared::{SharedLease, SharedPool};
use crate::connection::{Connection, Connector, Failure};
use crate::error::{Error, Result};
use crate::reply::Reply;
use crate::routing::{self, Candidate};
use crate::server::{role_from_reply, Health, Server};
use crate::session::{self, Effect, Session};
use crate::stats::{Counter, PrometheusOptions, ServerSnapshot, Stats, StatsContext};
use crate::topology::{Servers, Topology};

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

/// Everything `new db = redis.db(...)` creates.
pub struct Database {
    name: String,
    /// Unique in the process: keys this database's private connections in
    /// the per-thread lists it shares with the other databases of its VCL.
    id: u64,
    config: DbConfig,
    stats: Arc<Stats>,
    subnets: Subnets,
    servers: Servers,
    /// Private mode: the VCL's per-thread connections (one budget for all
    /// its private databases). Shared mode: `None`, each server has a pool.
    private: Option<Arc<PrivateConnections>>,
}

/// A connection held for one command; goes back to its thread's list or
/// to its pool when dropped, unless it broke or was retired.
enum Lease<'a> {
    Private(PrivateLease<'a>),
    Shared(SharedLease),
}

struct PrivateLease<'a> {
    connections: &'a PrivateConnections,
    owner: Owner,
    stats: Weak<Stats>,
    budget: u32,
    conn: Option<Connection>,
}

impl Lease<'_> {
    fn conn(&mut self) -> &mut Connection {
        match self {
            Lease::Private(lease) => lease
                .conn
                .as_mut()
                .expect("private lease holds a connection"),
            Lease::Shared(lease) => lease.conn(),
        }
    }

    /// Hands the connection to the task, beyond this command.
    fn pin(self, server: Arc<Server>, stats: &Arc<Stats>) -> Pinned {
        let held = match self {
            Lease::Private(mut lease) => {
                Held::Private(lease.conn.take().expect("private lease holds a connection"))
            }
            Lease::Shared(lease) => Held::Shared(lease),
        };
        Pinned {
            server,
            held: Some(held),
            stats: stats.clone(),
        }
    }
}

impl Drop for PrivateLease<'_> {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take().filter(|conn| !conn.is_broken()) {
            self.connections.give_back(
                self.owner,
                std::mem::take(&mut self.stats),
                conn,
                self.budget,
            );
        }
    }
}

/// What one task keeps of a database between its commands: what it left
/// on its connection, and that connection while it matters. Lives in the
/// task's slot of the database object and ends with it.
#[derive(Default)]
pub struct TaskConnection {
    session: Session,
    pinned: Option<Pinned>,
}

/// A connection kept by one task, from `MULTI` / `WATCH` to `EXEC`,
/// `DISCARD` or `UNWATCH`, or from a command that changed its state
/// (`SELECT`...) to the end of the task: the task's commands all go there,
/// and no other task gets it meanwhile (in shared mode it keeps its pool
/// slot). The server is held too: it stays valid whatever the topology
/// becomes meanwhile.
struct Pinned {
    server: Arc<Server>,
    held: Option<Held>,
    stats: Arc<Stats>,
}

enum Held {
    Private(Connection),
    Shared(SharedLease),
}

impl Drop for Pinned {
    /// The task ended with the connection pinned: it still holds queued
    /// commands, watched keys or a changed state, so it is closed, never
    /// handed to another task.
    fn drop(&mut self) {
        if let Some(mut held) = self.held.take() {
            match &mut held {
                Held::Private(conn) => conn.retire(),
                Held::Shared(lease) => lease.conn().retire(),
            }
            self.stats.inc(Counter::DroppedState);
        }
    }
}

/// What one attempt on one server gave. (Large, but moved once per
/// attempt: boxing it would cost an allocation per command.)
#[allow(clippy::large_enum_variant)]
enum Outcome<'a> {
    /// The reply, and the lease of the connection it came on.
    Reply(Reply, Lease<'a>),
    /// `ROLE` just said the server is a replica, and a master is needed:
    /// not a failure, the next candidate is tried.
    NotAMaster,
}

/// A rotation per worker thread, so that equal replicas share the load
/// while each thread keeps to one (and to its private connection). A
/// `Cell<usize>` needs no destructor, so this `thread_local!` does not pin
/// the module in memory after `vcl.discard`.
fn rotation() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static ROTATION: Cell<usize> = const { Cell::new(usize::MAX) };
    }
    ROTATION.with(|rotation| {
        if rotation.get() == usize::MAX {
            rotation.set(NEXT.fetch_add(1, Ordering::Relaxed) % (usize::MAX - 1));
        }
        rotation.get()
    })
}

/// `timeout` shortened so that it ends by `deadline`, if there is one.
fn within(timeout: Option<Duration>, deadline: Option<Instant>) -> Option<Duration> {
    match deadline {
        None => timeout,
        Some(deadline) => {
            let left = deadline
                .saturating_duration_since(Instant::now())
                .max(Duration::from_millis(1));
            Some(timeout.map_or(left, |timeout| timeout.min(left)))
        }
    }
}

/// An error reply saying the server's role is not what routing thought:
/// a write to a demoted master, or a replica cut from its master.
fn says_role_changed(reply: &Reply) -> bool {
    matches!(reply, Reply::Error(text) if text.starts_with("READONLY") || text.starts_with("MASTERDOWN"))
}

impl Database {
    /// Builds the object with its counters in its own memory, no subnets
    /// and private connections of its own.
    pub fn new(name: &str, config: DbConfig) -> Result<Self> {
        let private = Arc::new(PrivateConnections::default());
        Self::with_stats(name, config, Stats::default(), Subnets::default(), &private)
    }

    /// Builds the object counting into `stats` (e.g. a varnishstat
    /// segment), weighing servers with `subnets`; in private mode its
    /// connections go into `private`, the lists of its VCL. With
    /// `type=auto` the first server is asked its role now (a server that is
    /// down is asked again on its first connection).
    pub(crate) fn with_stats(
        name: &str,
        config: DbConfig,
        stats: Stats,
        subnets: Subnets,
        private: &Arc<PrivateConnections>,
    ) -> Result<Self> {
        static NEXT_ID: AtomicU64 = AtomicU64::new(0);
        let db = Database {
            name: name.to_string(),
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            private: (!config.shared_connections).then(|| private.clone()),
            config,
            stats: Arc::new(stats),
            subnets,
            servers: Servers::default(),
        };
        if let Some(location) = db.config.location.clone() {
            db.add_server(&location, db.config.role)?;
        }
        Ok(db)
    }

    /// Adds a server (`.add_server()`), or, as the C VMOD does, gives a
    /// server already there the type now declared (`servers.total`
    /// unchanged). A `type=auto` server is asked its role now.
    pub fn add_server(&self, location: &Location, role: Role) -> Result<()> {
        if role == Role::Cluster {
            return Err(Error::Unsupported {
                feature: "type=cluster",
            });
        }
        if let (Location::Unix(path), Some(_)) = (location, &self.config.tls) {
            return Err(ConfigError::TlsOverUnix {
                location: path.display().to_string(),
            }
            .into());
        }
        let connector = Connector::new(
            location,
            self.config.user.as_deref(),
            self.config.password.as_deref(),
            self.config.protocol,
            self.config.connection_timeout,
            self.config.tls.clone(),
        )?;
        let mut added = None;
        self.servers.update(|current| {
            let existing = current.by_location(connector.location());
            let (id, health) = match existing {
                Some(server) => (server.id, server.health.clone()),
                None => (
                    self.servers.new_id(),
                    Arc::new(Health::new(self.config.sickness_ttl)),
                ),
            };
            let pool = self.config.shared_connections.then(|| {
                Arc::new(SharedPool::new(
                    connector.location().to_string(),
                    self.config.max_connections,
                ))
            });
            let server = Arc::new(Server::new(
                id,
                connector.clone(),
                role,
                health,
                self.subnets.weight(location),
                pool,
            ));
            let mut servers = current.servers.clone();
            match servers.iter().position(|s| s.id == id) {
                Some(at) => servers[at] = server.clone(),
                None => {
                    self.stats.inc(Counter::ServersTotal);
                    servers.push(server.clone());
                }
            }
            added = Some(server);
            Some(Topology { servers })
        });
        if let Some(server) = added.filter(|server| server.declared() == Role::Auto) {
            self.discover_role(&server);
        }
        Ok(())
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

    /// The servers as they are now.
    pub(crate) fn topology(&self) -> Arc<Topology> {
        self.servers.snapshot()
    }

    /// Open and idle connections of the shared pool of the `index`th server
    /// (zeros in private mode, where they live in the worker threads).
    pub fn pool_state(&self, index: usize) -> (u32, u32) {
        self.topology()
            .servers
            .get(index)
            .map_or((0, 0), |server| server.pool_state())
    }

    /// Asks `ROLE` on a fresh connection and records the answer. Runs in
    /// `vcl_init`: each step is bounded by its timeout, at most
    /// [`LOAD_STEP_CAP`]. As in the C VMOD, this probe is not counted in
    /// the database's counters, and a server that cannot be reached is
    /// marked sick (avoided while others can serve).
    fn discover_role(&self, server: &Server) -> Option<Role> {
        let cap = |timeout: Option<Duration>| {
            Some(timeout.map_or(LOAD_STEP_CAP, |timeout| timeout.min(LOAD_STEP_CAP)))
        };
        let probe_stats = Stats::default();
        let mut conn = match server
            .connector
            .connect_within(&probe_stats, cap(self.config.connection_timeout))
        {
            Ok(conn) => conn,
            Err(_) => {
                server.health.mark_failed();
                return None;
            }
        };
        let reply = conn.request(ROLE, cap(self.config.command_timeout)).ok()?;
        let role = role_from_reply(&reply)?;
        server.set_role(role);
        Some(role)
    }

    /// A connection to `server`: this thread's idle one or a new one in
    /// private mode, the one in a pool slot or a new one in shared mode,
    /// waiting for a pooled one until `deadline` at most.
    fn lease(&self, server: &Server, deadline: Option<Instant>) -> Result<Lease<'_>> {
        let now = Instant::now();
        if let Some(pool) = &server.pool {
            return pool
                .get(&self.stats, deadline, |idle| {
                    let usable = idle.and_then(|conn| self.still_usable(server, conn, now));
                    usable.map_or_else(|| self.connect(server, deadline), Ok)
                })
                .map(Lease::Shared);
        }
        let connections = self
            .private
            .as_deref()
            .expect("a database without pools has private connections");
        let owner = Owner {
            db: self.id,
            server: server.id,
        };
        let usable = std::iter::from_fn(|| connections.take(owner))
            .find_map(|conn| self.still_usable(server, conn, now));
        let conn = usable.map_or_else(|| self.connect(server, deadline), Ok)?;
        Ok(Lease::Private(self.private_lease(
            connections,
            server,
            conn,
        )))
    }

    fn private_lease<'a>(
        &'a self,
        connections: &'a PrivateConnections,
        server: &Server,
        conn: Connection,
    ) -> PrivateLease<'a> {
        PrivateLease {
            connections,
            owner: Owner {
                db: self.id,
                server: server.id,
            },
            stats: Arc::downgrade(&self.stats),
            budget: self.config.max_connections,
            conn: Some(conn),
        }
    }

    /// The lease of a pinned connection, to run a command on it and then
    /// release or pin it again.
    fn unpin(&self, mut pinned: Pinned) -> Lease<'_> {
        let held = pinned.held.take().expect("a pin holds its connection");
        match (held, self.private.as_deref()) {
            (Held::Shared(lease), _) => Lease::Shared(lease),
            (Held::Private(conn), Some(connections)) => {
                Lease::Private(self.private_lease(connections, &pinned.server, conn))
            }
            (Held::Private(_), None) => {
                unreachable!("a private pin comes from a private database")
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
    fn connect(&self, server: &Server, deadline: Option<Instant>) -> Result<Connection> {
        if let Err(wait) = server.health.may_connect() {
            return Err(Error::Backoff {
                server: server.location().to_string(),
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
        match server
            .connector
            .connect_within(&self.stats, within(timeout, deadline))
        {
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

    /// When one `execute()` must be over: `(connection_timeout +
    /// command_timeout) x (1 + retries)` from now when both timeouts are
    /// set, else no bound (a worker waits for a pooled connection as long
    /// as it takes, as in the C VMOD).
    fn deadline(&self, timeout: Option<Duration>, retries: u32) -> Option<Instant> {
        let per_attempt = self.config.connection_timeout? + timeout?;
        Some(Instant::now() + per_attempt.saturating_mul(retries.saturating_add(1)))
    }

    /// Runs `command` for the task that holds `task` and returns its reply
    /// (error replies included), trying the servers of the execution plan
    /// in order: a failed attempt (connection, I/O, timeout) is retried on
    /// the next one, up to the retry count, except on a connection the
    /// task's transaction pinned. `debug` receives routing and connection
    /// decisions when the object has `debug=true`.
    pub fn execute(
        &self,
        command: &mut Command,
        master: bool,
        task: &mut TaskConnection,
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
        let effect = session::effect(command);
        let refused = match effect {
            Effect::Refused(reason) => Err(Error::Refused { reason }),
            _ => task.session.admit(effect).map_err(Error::Lost),
        };
        if let Err(err) = refused {
            self.stats.inc(Counter::CommandsFailed);
            return Err(err);
        }
        let deadline = self.deadline(timeout, retries);
        if let Some(pinned) = task.pinned.take() {
            return self.execute_pinned(command, effect, pinned, timeout, deadline, task, debug);
        }
        let master_only = master || self.config.ignore_slaves;
        let topology = self.topology();
        // For debug lines only (no allocation otherwise).
        let name = if self.config.debug {
            command.logged_name()
        } else {
            String::new()
        };
        let plan_now = |debug: &mut dyn FnMut(Note)| {
            let now = Instant::now();
            let candidates: Vec<Candidate> = topology
                .servers
                .iter()
                .map(|server| Candidate {
                    weight: server.weight,
                    role: server.role(),
                    sick: server.health.is_sick(now),
                })
                .collect();
            let plan = routing::plan(&candidates, master_only, rotation());
            if self.config.debug {
                let locations: Vec<&str> = topology.servers.iter().map(|s| s.location()).collect();
                let text = routing::describe(&name, master_only, &locations, &candidates, &plan);
                debug(Note::Debug(&text));
            }
            plan
        };
        let mut plan = plan_now(debug);
        let mut replanned = false;
        let no_server = || Error::NoServer {
            role: if master_only {
                "master"
            } else {
                "master or replica"
            },
        };
        let mut failed: u32 = 0;
        // Candidates found to be replicas when a master is needed: passed
        // over from then on, without using up a retry.
        let mut not_masters: Vec<usize> = Vec::new();
        let mut position = 0;
        loop {
            if not_masters.len() == plan.len() {
                // Every candidate turned out to be a replica: roles were
                // stale (a failover), and the new master may have been
                // left out of this plan as a replica. Once more, on the
                // roles just learnt.
                if replanned || not_masters.is_empty() {
                    self.stats.inc(Counter::CommandsFailed);
                    return Err(no_server());
                }
                replanned = true;
                not_masters.clear();
                plan = plan_now(debug);
                position = 0;
                continue;
            }
            // Past the end of the plan (more retries than servers), round
            // again from its start.
            let index = plan[position % plan.len()];
            position += 1;
            if not_masters.contains(&index) {
                continue;
            }
            let server = &topology.servers[index];
            if self.config.debug {
                debug(Note::Debug(&format!(
                    "sending {} to {}",
                    command.logged_name(),
                    server.location()
                )));
            }
            let outcome = self.attempt(command, server, master_only, timeout, deadline, debug);
            match outcome {
                Ok(Outcome::Reply(reply, lease)) => {
                    if says_role_changed(&reply) {
                        self.roles_changed(server, debug);
                    }
                    return Ok(self.settle(reply, effect, lease, server, task));
                }
                Ok(Outcome::NotAMaster) => {
                    if self.config.debug {
                        debug(Note::Debug(&format!(
                            "skipping {}: ROLE says it is a replica, a master is needed",
                            server.location()
                        )));
                    }
                    not_masters.push(index);
                }
                Err(err) if failed < retries => {
                    self.stats.inc(Counter::CommandsFailed);
                    if self.config.debug {
                        let text = format!(
                            "attempt {} failed ({err}); retrying on the next candidate",
                            failed + 1
                        );
                        debug(Note::Debug(&text));
                    }
                    failed += 1;
                    self.stats.inc(Counter::CommandsRetried);
                }
                Err(err) => {
                    self.stats.inc(Counter::CommandsFailed);
                    return Err(err);
                }
            }
        }
    }

    /// A reply said `server` is not what routing thought: a failover
    /// happened. Every `type=auto` server is asked its role again before
    /// its next command, so the promoted replica is found too.
    fn roles_changed(&self, server: &Server, debug: &mut dyn FnMut(Note)) {
        if self.config.debug {
            debug(Note::Debug(&format!(
                "{} changed role (a failover?): asking every role again",
                server.location()
            )));
        }
        for server in &self.topology().servers {
            server.forget_role();
        }
    }

    fn attempt(
        &self,
        command: &mut Command,
        server: &Server,
        master_only: bool,
        timeout: Option<Duration>,
        deadline: Option<Instant>,
        debug: &mut dyn FnMut(Note),
    ) -> Result<Outcome<'_>> {
        let mut lease = self.lease(server, deadline)?;
        let conn = lease.conn();
        if server.wants_role(conn.role_asked()) {
            conn.set_role_asked();
            match self.request(conn, server, ROLE, within(timeout, deadline))? {
                // An ACL user without +role, or ROLE renamed away: it will
                // never answer, so fall back for good. (Other errors, such
                // as LOADING, leave the role to the next connection.)
                Reply::Error(text)
                    if text.starts_with("NOPERM") || text.starts_with("ERR unknown command") =>
                {
                    if server.role_refused() {
                        debug(Note::Warning(&format!(
                            "ROLE refused by {} ({text}): taken as a master",
                            server.location()
                        )));
                    }
                }
                reply => {
                    if let Some(role) = role_from_reply(&reply) {
                        let before = server.role();
                        if before != Role::Auto && before != role {
                            // A failover: the other servers' roles are
                            // stale too (the replica promoted, ...).
                            self.roles_changed(server, debug);
                        }
                        server.set_role(role);
                        if role == Role::Slave && master_only {
                            return Ok(Outcome::NotAMaster);
                        }
                    }
                }
            }
        }
        let reply = self.send(conn, server, command, timeout, deadline, false)?;
        Ok(Outcome::Reply(reply, lease))
    }

    /// A command of a task that keeps a connection. No retry: another
    /// connection would run it outside the task's transaction (or without
    /// the state it set), so a failure closes the connection and loses
    /// them.
    #[allow(clippy::too_many_arguments)]
    fn execute_pinned(
        &self,
        command: &mut Command,
        effect: Effect,
        pinned: Pinned,
        timeout: Option<Duration>,
        deadline: Option<Instant>,
        task: &mut TaskConnection,
        debug: &mut dyn FnMut(Note),
    ) -> Result<Reply> {
        let server = pinned.server.clone();
        if self.config.debug {
            let text = format!(
                "sending {} to {} on the connection this task keeps",
                command.logged_name(),
                server.location()
            );
            debug(Note::Debug(&text));
        }
        let mut lease = self.unpin(pinned);
        let in_multi = task.session.in_multi();
        match self.send(lease.conn(), &server, command, timeout, deadline, in_multi) {
            Ok(reply) => Ok(self.settle(reply, effect, lease, &server, task)),
            Err(err) => {
                // Failed requests leave the connection broken; make sure
                // nothing left on it can reach another task.
                lease.conn().retire();
                task.session.lose();
                self.stats.inc(Counter::CommandsFailed);
                Err(err)
            }
        }
    }

    /// Counts a reply and decides where its connection goes: kept by the
    /// task while what it left there matters, closed after `QUIT`, else
    /// released.
    fn settle(
        &self,
        reply: Reply,
        effect: Effect,
        mut lease: Lease<'_>,
        server: &Arc<Server>,
        task: &mut TaskConnection,
    ) -> Reply {
        // As in the C VMOD: `total` counts commands that got a reply,
        // `failed` every attempt that got none.
        self.stats.inc(Counter::CommandsTotal);
        if matches!(reply, Reply::Error(_)) {
            self.stats.inc(Counter::CommandsError);
        }
        task.session.after_reply(effect, &reply);
        if effect == Effect::Quit {
            // Closed by the server: not a failure, nor a connection to reuse.
            lease.conn().retire();
            self.stats.inc(Counter::DroppedState);
        } else if task.session.keeps_connection() {
            task.pinned = Some(lease.pin(server.clone(), &self.stats));
        }
        reply
    }

    /// Sends `command` on `conn`: an `EVAL` as `EVALSHA` first, unless
    /// `in_multi`, where the `NOSCRIPT` would only come with the `EXEC`.
    /// Each request ends by `deadline`.
    fn send(
        &self,
        conn: &mut Connection,
        server: &Server,
        command: &mut Command,
        timeout: Option<Duration>,
        deadline: Option<Instant>,
        in_multi: bool,
    ) -> Result<Reply> {
        let evalsha = if in_multi {
            None
        } else {
            command.packed_as_evalsha()
        };
        match evalsha {
            Some(evalsha) => {
                match self.request(conn, server, &evalsha, within(timeout, deadline))? {
                    Reply::Error(text) if text.starts_with("NOSCRIPT") => {
                        self.stats.inc(Counter::CommandsNoscript);
                        self.request(conn, server, command.packed(), within(timeout, deadline))
                    }
                    reply => Ok(reply),
                }
            }
            None => self.request(conn, server, command.packed(), within(timeout, deadline)),
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
            let server_name = server.location().to_string();
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

    /// Renders the counters as `.stats()` shows them: the C VMOD's output
    /// (which has no per-server data, however many servers), plus each
    /// server's state when `extended` ([ext]).
    pub fn write_stats(&self, out: &mut String, format: &StatsFormat, extended: bool) {
        let topology = self.topology();
        let now = Instant::now();
        let servers: Vec<ServerSnapshot> = topology
            .servers
            .iter()
            .filter(|_| extended)
            .map(|server| {
                let (open, idle) = server.pool_state();
                ServerSnapshot {
                    location: server.location().to_string(),
                    role: server.role(),
                    sick: server.health.is_sick(now),
                    connections_open: u64::from(open),
                    connections_idle: u64::from(idle),
                }
            })
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

    /// Closes idle connections (VCL cold). Returns how many were closed.
    pub fn close_idle(&self) -> usize {
        match &self.private {
            Some(private) => private.close_idle(self.id),
            None => self
                .topology()
                .servers
                .iter()
                .filter_map(|server| server.pool.as_ref())
                .map(|pool| pool.close_idle())
                .sum(),
        }
    }
}

#[cfg(test)]
mod tests;
