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
                let text = describe_plan(&name, master_only, &topology, &candidates, &plan);
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

/// The `debug=true` line for a plan: the candidates in order with why they
/// rank there, and the servers left out. Locations and roles only: no
/// arguments, no credentials.
fn describe_plan(
    name: &str,
    master_only: bool,
    topology: &Topology,
    candidates: &[Candidate],
    plan: &[usize],
) -> String {
    let describe = |index: usize| {
        let c = &candidates[index];
        let weight = if c.weight == Subnets::WORST {
            "no subnet".to_string()
        } else {
            format!("weight {}", c.weight)
        };
        let role = match c.role {
            Role::Auto => "role unknown",
            role => role.as_str(),
        };
        let health = if c.sick { "sick" } else { "healthy" };
        format!(
            "{} ({role}, {weight}, {health})",
            topology.servers[index].location()
        )
    };
    let order: Vec<String> = plan.iter().map(|&i| describe(i)).collect();
    let left_out: Vec<String> = (0..candidates.len())
        .filter(|i| !plan.contains(i))
        .map(|i| {
            format!(
                "{} (replica, master needed)",
                topology.servers[i].location()
            )
        })
        .collect();
    let mut text = format!(
        "plan for {name} (master={master_only}): {}",
        if order.is_empty() {
            "no candidate".to_string()
        } else {
            order.join(", ")
        }
    );
    if !left_out.is_empty() {
        text.push_str("; left out: ");
        text.push_str(&left_out.join(", "));
    }
    text
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
        run_in(db, &mut TaskConnection::default(), args)
    }

    /// `args` as a command of the task that holds `task`.
    fn run_in(db: &Database, task: &mut TaskConnection, args: &[&str]) -> Result<Reply> {
        let mut command = Command::new(args[0].as_bytes());
        for arg in &args[1..] {
            command.push(arg.as_bytes());
        }
        db.execute(&mut command, true, task, &mut |_| {})
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
        let err = db
            .execute(
                &mut command,
                true,
                &mut TaskConnection::default(),
                &mut |_| {},
            )
            .unwrap_err();
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
            assert!(db.topology().servers[0].health.is_sick(Instant::now()));
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

    /// Captured from the C VMOD (libvmod-redis 15.1, Varnish 7.1.1) with a
    /// database of five servers (`add_server()` of two masters, a replica,
    /// a location added twice and two refused ports): no per-server data
    /// and no `server` label, whatever the number of servers.
    const C_JSON_FIVE_SERVERS: &str = r#"{"servers": {"total": 5,"failed": 0},"connections": {"total": 2,"failed": 0,"dropped": {"error": 0,"hung_up": 0,"overflow": 0,"ttl": 0,"version": 0,"sick": 0}},"workers": {"blocked": 0},"commands": {"total": 2,"failed": 0,"retried": 0,"error": 0,"noscript": 0},"cluster": {"discoveries": {"total": 0,"failed": 0},"replies": {"moved": 0,"ask": 0}}}"#;
    const C_PROM_FIVE_SERVERS_HEAD: &str = "# TYPE vmod_redis_servers_total counter
vmod_redis_servers_total{name=\"db\"} 5
# TYPE vmod_redis_servers_failed counter
vmod_redis_servers_failed{name=\"db\"} 0
# TYPE vmod_redis_connections_total counter
vmod_redis_connections_total{name=\"db\"} 3
# TYPE vmod_redis_connections_failed counter
vmod_redis_connections_failed{name=\"db\"} 1
# TYPE vmod_redis_connections_dropped counter
vmod_redis_connections_dropped{name=\"db\",reason=\"error\"} 0
";

    #[test]
    fn stats_of_several_servers_are_the_c_vmods() {
        let args = DbArgs {
            location: "",
            role: "master",
            ..DbArgs::default()
        };
        let db = Database::new("db", DbConfig::from_args(&args).unwrap()).unwrap();
        // type=master: nothing is connected at load.
        for location in [
            "127.0.0.1:1",
            "127.0.0.2:1",
            "127.0.1.1:1",
            "/nowhere.sock",
            "127.0.0.3:2",
        ] {
            db.add_server(&location.parse().unwrap(), Role::Master)
                .unwrap();
        }
        // Added again: the same server.
        db.add_server(&"127.0.0.2:1".parse().unwrap(), Role::Slave)
            .unwrap();
        assert_eq!(db.topology().servers.len(), 5);
        assert_eq!(db.topology().servers[1].role(), Role::Slave);
        db.stats().add(Counter::ConnectionsTotal, 2);
        db.stats().add(Counter::CommandsTotal, 2);
        let mut json = String::new();
        db.write_stats(&mut json, &StatsFormat::Json, false);
        assert_eq!(json, C_JSON_FIVE_SERVERS);
        db.stats().inc(Counter::ConnectionsTotal);
        db.stats().inc(Counter::ConnectionsFailed);
        let mut prom = String::new();
        let options = PrometheusOptions::default();
        db.write_stats(&mut prom, &StatsFormat::Prometheus(&options), false);
        assert!(prom.starts_with(C_PROM_FIVE_SERVERS_HEAD), "{prom}");
        assert!(!prom.contains("server="), "{prom}");
        // [ext] only on request: one entry per server.
        let mut ext = String::new();
        db.write_stats(&mut ext, &StatsFormat::Json, true);
        assert_eq!(ext.matches("\"location\": ").count(), 5, "{ext}");
    }

    #[test]
    fn a_pool_wait_ends_within_the_bound_of_the_whole_execute() {
        let redis = RedisProcess::start(&[]);
        let db = database(&redis, |args| {
            args.shared_connections = true;
            args.max_connections = 1;
            args.connection_timeout = 100;
            args.command_timeout = 100;
        });
        let holding = std::sync::Barrier::new(2);
        std::thread::scope(|scope| {
            scope.spawn(|| {
                // No timeout for this one: it holds the only connection.
                let mut sleep = Command::new(b"DEBUG");
                sleep.push(b"SLEEP");
                sleep.push(b"0.8");
                sleep.timeout = Some(Duration::ZERO);
                holding.wait();
                db.execute(
                    &mut sleep,
                    true,
                    &mut TaskConnection::default(),
                    &mut |_| {},
                )
                .unwrap();
            });
            holding.wait();
            // Let it take the connection first.
            std::thread::sleep(Duration::from_millis(150));
            // (connection_timeout + command_timeout) x (1 + 0 retries).
            let started = Instant::now();
            let err = run(&db, &["PING"]).unwrap_err();
            let waited = started.elapsed();
            assert!(matches!(err, Error::PoolTimeout { .. }), "{err}");
            assert!(
                waited >= Duration::from_millis(190) && waited < Duration::from_millis(400),
                "{waited:?}"
            );
        });
        assert_eq!(db.stats().get(Counter::WorkersBlocked), 1);
    }

    #[test]
    fn private_connections_are_one_budget_per_thread_across_databases() {
        // The example of the C VMOD's documentation (issue 9): two
        // databases on two servers, max_connections=1 each, one thread.
        let (one, two) = (RedisProcess::start(&[]), RedisProcess::start(&[]));
        let private = Arc::new(PrivateConnections::default());
        let make = |redis: &RedisProcess| {
            let location = redis.location();
            let args = DbArgs {
                location: &location,
                role: "master",
                shared_connections: false,
                max_connections: 1,
                ..DbArgs::default()
            };
            let config = DbConfig::from_args(&args).unwrap();
            Database::with_stats("db", config, Stats::default(), Subnets::default(), &private)
                .unwrap()
        };
        let (db1, db2) = (make(&one), make(&two));
        run(&db1, &["SET", "k", "1"]).unwrap();
        run(&db1, &["GET", "k"]).unwrap();
        run(&db2, &["GET", "k"]).unwrap();
        run(&db2, &["SET", "k", "2"]).unwrap();
        run(&db2, &["GET", "k"]).unwrap();
        run(&db1, &["GET", "k"]).unwrap();
        let counts = |db: &Database| {
            (
                db.stats().get(Counter::ConnectionsTotal),
                db.stats().get(Counter::DroppedOverflow),
            )
        };
        assert_eq!(counts(&db1), (2, 1));
        assert_eq!(counts(&db2), (1, 1));
        // Another thread has a budget of its own.
        std::thread::scope(|scope| {
            scope.spawn(|| run(&db2, &["GET", "k"]).unwrap());
        });
        assert_eq!(counts(&db2), (2, 1));
        // Cold: each database closes its own idle connections only.
        assert_eq!(db1.close_idle(), 1);
        assert_eq!(db2.close_idle(), 1);
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
            assert!(!db.topology().servers[0].health.is_sick(Instant::now()));
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

    fn queued() -> Reply {
        Reply::Status("QUEUED".into())
    }

    #[test]
    fn a_transaction_keeps_its_connection_until_exec_in_both_modes() {
        let redis = RedisProcess::start(&[]);
        for shared in [false, true] {
            let db = database(&redis, |args| {
                args.shared_connections = shared;
                args.max_connections = 2;
            });
            let mut task = TaskConnection::default();
            run_in(&db, &mut task, &["MULTI"]).unwrap();
            assert_eq!(
                run_in(&db, &mut task, &["SET", "t", "1"]).unwrap(),
                queued()
            );
            // Another task meanwhile: its own connection, not queued.
            assert_eq!(
                run(&db, &["GET", "t"]).unwrap(),
                Reply::Nil,
                "shared={shared}"
            );
            assert_eq!(run_in(&db, &mut task, &["INCR", "t"]).unwrap(), queued());
            assert_eq!(
                run_in(&db, &mut task, &["EXEC"]).unwrap(),
                Reply::Array(vec![Reply::Status("OK".into()), Reply::Integer(2)])
            );
            assert_eq!(db.stats().get(Counter::ConnectionsTotal), 2);
            // Released: the next command reuses it and runs at once.
            assert_eq!(
                run_in(&db, &mut task, &["GET", "t"]).unwrap(),
                Reply::String(b"2".to_vec())
            );
            assert_eq!(db.stats().get(Counter::ConnectionsTotal), 2);
            assert_eq!(db.stats().get(Counter::DroppedState), 0);
            redis.cli(&["DEL", "t"]);
        }
    }

    #[test]
    fn a_task_ending_in_a_transaction_closes_its_connection() {
        let redis = RedisProcess::start(&[]);
        for shared in [false, true] {
            let db = database(&redis, |args| {
                args.shared_connections = shared;
                args.max_connections = 1;
            });
            for open in [&["MULTI"][..], &["WATCH", "w"]] {
                let mut task = TaskConnection::default();
                run_in(&db, &mut task, open).unwrap();
                drop(task);
                assert_eq!(
                    run(&db, &["SET", "w", "1"]).unwrap(),
                    Reply::Status("OK".into())
                );
                // A WATCH left on the connection would abort this.
                let mut task = TaskConnection::default();
                run_in(&db, &mut task, &["MULTI"]).unwrap();
                run_in(&db, &mut task, &["SET", "w", "2"]).unwrap();
                assert_eq!(
                    run_in(&db, &mut task, &["EXEC"]).unwrap(),
                    Reply::Array(vec![Reply::Status("OK".into())]),
                    "shared={shared} {open:?}"
                );
            }
            assert_eq!(db.stats().get(Counter::DroppedState), 2, "shared={shared}");
            assert_eq!(db.stats().get(Counter::ConnectionsTotal), 3);
        }
    }

    #[test]
    fn eval_inside_multi_goes_out_as_eval() {
        let redis = RedisProcess::start(&[]);
        let db = database(&redis, |_| {});
        let mut task = TaskConnection::default();
        run_in(&db, &mut task, &["MULTI"]).unwrap();
        run_in(&db, &mut task, &["EVAL", "return ARGV[1]", "0", "ran"]).unwrap();
        assert_eq!(
            run_in(&db, &mut task, &["EXEC"]).unwrap(),
            Reply::Array(vec![Reply::String(b"ran".to_vec())])
        );
        assert_eq!(db.stats().get(Counter::CommandsNoscript), 0);
    }

    #[test]
    fn a_changed_connection_serves_its_task_then_is_closed() {
        let redis = RedisProcess::start(&[]);
        for shared in [false, true] {
            let db = database(&redis, |args| {
                args.shared_connections = shared;
                args.max_connections = 1;
            });
            let mut task = TaskConnection::default();
            run_in(&db, &mut task, &["SELECT", "5"]).unwrap();
            run_in(&db, &mut task, &["SET", "s", "db5"]).unwrap();
            run_in(&db, &mut task, &["CLIENT", "SETNAME", "x"]).unwrap();
            assert_eq!(
                run_in(&db, &mut task, &["CLIENT", "GETNAME"]).unwrap(),
                Reply::String(b"x".to_vec())
            );
            drop(task);
            assert_eq!(
                redis.cli(&["-n", "5", "GET", "s"]),
                "db5",
                "shared={shared}"
            );
            assert_eq!(run(&db, &["GET", "s"]).unwrap(), Reply::Nil);
            assert_eq!(run(&db, &["CLIENT", "GETNAME"]).unwrap(), Reply::Nil);
            // QUIT: closed at once, not counted as a failure.
            run(&db, &["QUIT"]).unwrap();
            assert_eq!(run(&db, &["PING"]).unwrap(), Reply::Status("PONG".into()));
            let stats = db.stats();
            assert_eq!(stats.get(Counter::DroppedState), 2);
            assert_eq!(stats.get(Counter::ConnectionsTotal), 3);
            assert_eq!(stats.get(Counter::CommandsFailed), 0);
            assert_eq!(stats.get(Counter::DroppedHungUp), 0);
            redis.cli(&["-n", "5", "DEL", "s"]);
        }
    }

    #[test]
    fn refused_commands_are_not_sent() {
        let redis = RedisProcess::start(&[]);
        let db = database(&redis, |_| {});
        for args in [
            &["subscribe", "ch"][..],
            &["MONITOR"],
            &["CLIENT", "REPLY", "OFF"],
        ] {
            let err = run(&db, args).unwrap_err();
            assert!(matches!(&err, Error::Refused { .. }), "{err}");
        }
        assert_eq!(db.stats().get(Counter::ConnectionsTotal), 0);
        assert_eq!(db.stats().get(Counter::CommandsFailed), 3);
    }

    #[test]
    fn a_failed_pinned_connection_loses_the_transaction() {
        let redis = RedisProcess::start(&[]);
        for shared in [false, true] {
            let db = database(&redis, |args| {
                args.shared_connections = shared;
                args.max_command_retries = 3;
            });
            let mut task = TaskConnection::default();
            run_in(&db, &mut task, &["MULTI"]).unwrap();
            redis.cli(&["CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"]);
            // Not retried elsewhere, where it would run at once.
            assert!(matches!(
                run_in(&db, &mut task, &["SET", "lost", "1"]),
                Err(Error::Io { .. })
            ));
            assert!(matches!(
                run_in(&db, &mut task, &["SET", "lost", "2"]),
                Err(Error::Lost(session::Lost::Transaction))
            ));
            assert!(matches!(
                run_in(&db, &mut task, &["EXEC"]),
                Err(Error::Lost(session::Lost::Transaction))
            ));
            assert_eq!(redis.cli(&["EXISTS", "lost"]), "0");
            assert_eq!(db.stats().get(Counter::CommandsRetried), 0);
            assert_eq!(
                run_in(&db, &mut task, &["PING"]).unwrap(),
                Reply::Status("PONG".into())
            );
        }
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
