//! A database object: its servers (a [`Topology`] snapshot), its
//! connections (private or shared), its counters, and the execution of one
//! command along the execution plan ([`crate::routing`]) with retries.
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::commands::Commands;
use crate::config::{ConfigError, DbConfig, Location, Preference, Role};
use crate::connection::private::{Owner, PrivateAccess, PrivateConnections};
use crate::connection::shared::SharedPool;
use crate::connection::{within, Connections, Connector, Pipelined};
use crate::error::Result;
use crate::logger::Log;
use crate::near_cache::NearCache;
use crate::server::{ConnectionPolicy, Health, Server};
use crate::stats::{
    every_database, Counter, PrometheusOptions, ServerSnapshot, Stats, StatsContext,
};
use crate::topology::{Servers, Topology};

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
const PROBE_STEP_CAP: Duration = Duration::from_millis(500);

/// `timeout` for one step of a probe (the role check in `vcl_init`, a
/// cluster discovery): at most [`PROBE_STEP_CAP`], also when it is 0 (none).
fn probe_step(timeout: Option<Duration>) -> Option<Duration> {
    Some(timeout.map_or(PROBE_STEP_CAP, |timeout| timeout.min(PROBE_STEP_CAP)))
}

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
    /// `redis.subnets()` or `redis.weights()`: each server's weight.
    preference: Preference,
    servers: Servers,
    /// The VCL's per-thread lists (one budget for all its private
    /// databases): where this database's private connections are kept
    /// (none in shared mode, where each server has a pool).
    private: Arc<PrivateConnections>,
    /// `type=cluster`: the seeds and the discovery of the slot map.
    cluster: Option<Cluster>,
    /// The command model its servers gave (`src/commands/`).
    commands: Commands,
    /// [ext] `near_cache` > 0 (`src/near_cache/`).
    near_cache: Option<Arc<NearCache>>,
    /// Sentinel fails over one of its masters: master commands wait.
    hold: FailoverHold,
    /// What Sentinel discovery (`discover=true`) did to its servers.
    discovery: Mutex<Discovered>,
}

/// The servers Sentinel discovery added and removed, kept with the
/// database rather than in a Sentinel thread: the thread of a later warm
/// period must know them too.
#[derive(Default)]
struct Discovered {
    /// Servers discovery added and has not removed: only these it removes.
    added: HashSet<Location>,
    /// The id of each server removed, by location. A server added again at
    /// the same location gets it back, and with it the private connections
    /// the workers kept to it: under a new id each worker's idle one to the
    /// old server stayed open, unused, at every flap of a replica.
    removed: HashMap<Location, u32>,
}

mod cluster;
mod discovery;
mod execute;
mod execution;
mod hold;
mod lease;
mod near;
mod pinned;
mod plan;
mod send;
mod standalone;
mod verdict;

use discovery::Cluster;
pub(crate) use hold::FailoverHold;

pub use lease::TaskConnection;

impl Database {
    /// Builds the object with its counters in its own memory, no subnets
    /// nor weights, and private connections of its own.
    pub fn new(name: &str, config: DbConfig) -> Result<Self> {
        let private = Arc::new(PrivateConnections::default());
        let log = Log::discard();
        Self::with_stats(
            name,
            config,
            Stats::default(),
            Preference::default(),
            &private,
            &mut |_| {},
            &log,
        )
    }

    /// Builds the object counting into `stats` (e.g. a varnishstat
    /// segment), weighing servers by `preference`; in private mode its
    /// connections go into `private`, the lists of its VCL. With
    /// `type=auto` the first server is asked its role now (a server that is
    /// down is asked again on its first connection); with `type=cluster`
    /// the slot map is read from it now (see [`Self::add_server`]), `note`
    /// receiving what that discovery logs. `log` takes what is said outside
    /// any task: a server whose TLS certificate does not name it.
    pub(crate) fn with_stats(
        name: &str,
        config: DbConfig,
        stats: Stats,
        preference: Preference,
        private: &Arc<PrivateConnections>,
        note: &mut dyn FnMut(Note),
        log: &Log,
    ) -> Result<Self> {
        static NEXT_ID: AtomicU64 = AtomicU64::new(0);
        let stats = Arc::new(stats);
        if let Some(tls) = &config.tls {
            // Before the first connection (a role probe, a discovery).
            let (counters, name, log) = (Arc::downgrade(&stats), name.to_owned(), log.clone());
            tls.report_name_mismatches_to(Log::to(move |level, text| {
                if let Some(stats) = counters.upgrade() {
                    stats.inc(Counter::TlsNameMismatch);
                }
                log.line(level, &format!("[REDIS] db {name}: {text}"));
            }));
        }
        let near_cache = (config.near_cache > 0).then(|| {
            Arc::new(NearCache::new(
                config.near_cache,
                config.near_cache_ttl,
                stats.clone(),
            ))
        });
        let db = Database {
            name: name.to_string(),
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            private: private.clone(),
            cluster: (config.role == Role::Cluster).then(Cluster::default),
            config,
            stats,
            preference,
            servers: Servers::default(),
            commands: Commands::default(),
            near_cache,
            hold: FailoverHold::default(),
            discovery: Mutex::default(),
        };
        if let Some(location) = db.config.location.clone() {
            db.add_server(&location, db.config.role, note)?;
        }
        Ok(db)
    }

    /// Adds a server (`.add_server()`), or, as the C VMOD does, gives a
    /// server already there the type now declared (`servers.total`
    /// unchanged). A `type=auto` server is asked its role now. In a
    /// cluster database every server is a seed (`type=cluster`), asked
    /// for the slot map now while none has been read
    /// ([`Self::discover_at_load`]); `note` receives what that discovery
    /// logs (its failure, the costly private setting, `debug` lines).
    pub fn add_server(
        &self,
        location: &Location,
        role: Role,
        note: &mut dyn FnMut(Note),
    ) -> Result<()> {
        if (role == Role::Cluster) != self.cluster.is_some() {
            return Err(ConfigError::ClusterMixed {
                role,
                db_role: self.config.role,
            }
            .into());
        }
        let mut new_seed = false;
        if let Some(cluster) = &self.cluster {
            if let Location::Unix(path) = location {
                return Err(ConfigError::ClusterOverUnix {
                    location: path.display().to_string(),
                }
                .into());
            }
            new_seed = cluster.add_seed(location.clone());
        }
        if let (Location::Unix(path), Some(_)) = (location, &self.config.tls) {
            return Err(ConfigError::TlsOverUnix {
                location: path.display().to_string(),
            }
            .into());
        }
        let mut added = None;
        self.servers.update(|current| {
            let server = Arc::new(match current.by_location(location) {
                Some(existing) => existing.redeclared(role),
                None => self.new_server(location, role),
            });
            let id = server.id;
            let mut servers = current.servers.clone();
            match servers.iter().position(|s| s.id == id) {
                Some(at) => servers[at] = server.clone(),
                None => {
                    self.stats.inc(Counter::ServersTotal);
                    servers.push(server.clone());
                }
            }
            added = Some(server);
            Some(Topology {
                servers,
                slots: current.slots.clone(),
            })
        });
        if let Some(server) = added.filter(|server| server.declared() == Role::Auto) {
            self.discover_role(&server);
        }
        if new_seed {
            self.discover_at_load(location, note);
        }
        Ok(())
    }

    /// Removes the server at `location` (a replica Sentinel no longer
    /// reports, with `discover=true`): workers routing on an older snapshot
    /// finish with it; its pool closes when the last of them lets it go.
    /// False when there is no such server.
    pub(crate) fn remove_server(&self, location: &Location) -> bool {
        let mut removed = false;
        self.servers.update(|current| {
            if current.slots.is_some() {
                // A cluster's servers come and go with its slot map, whose
                // indexes a removal here would shift.
                return None;
            }
            let servers: Vec<Arc<Server>> = current
                .servers
                .iter()
                .filter(|server| server.location() != location)
                .cloned()
                .collect();
            removed = servers.len() != current.servers.len();
            let mut discovery = self.discovery.lock();
            for server in current.servers.iter().filter(|s| s.location() == location) {
                discovery.removed.insert(location.clone(), server.id);
                // Workers close their idle private connections to it at
                // their next lease (nothing would take them again).
                self.private.retire(self.owner(server.id));
            }
            removed.then_some(Topology {
                servers,
                slots: None,
            })
        });
        // servers.total counts servers added (a varnishstat counter never
        // goes down); the extended server_list shows the ones left.
        removed
    }

    /// Adds a server Sentinel discovery found (`discover=true`), marked as
    /// such: [`Self::remove_discovered`] removes only these.
    pub(crate) fn add_discovered(&self, location: &Location, role: Role) -> Result<()> {
        self.add_server(location, role, &mut |_| {})?;
        self.discovery.lock().added.insert(location.clone());
        Ok(())
    }

    /// Whether the server at `location` is one discovery added.
    pub(crate) fn is_discovered(&self, location: &Location) -> bool {
        self.discovery.lock().added.contains(location)
    }

    /// The servers discovery added, by location.
    pub(crate) fn discovered(&self) -> Vec<Location> {
        self.discovery.lock().added.iter().cloned().collect()
    }

    /// Removes a server discovery added ([`Self::remove_server`]). False
    /// when there is none at `location`.
    pub(crate) fn remove_discovered(&self, location: &Location) -> bool {
        let was_added = self.discovery.lock().added.remove(location);
        was_added && self.remove_server(location)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn config(&self) -> &DbConfig {
        &self.config
    }

    /// [ext] Its near cache, if `near_cache` > 0.
    pub(crate) fn near_cache(&self) -> Option<&Arc<NearCache>> {
        self.near_cache.as_ref()
    }

    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// How this database reaches the server at `location`: its
    /// credentials, protocol, connect timeout and TLS settings.
    pub(crate) fn connector(&self, location: &Location) -> Connector {
        Connector::new(
            location,
            self.config.user.as_deref(),
            self.config.password.as_deref(),
            self.config.protocol,
            self.config.connection_timeout,
            self.config.tls.clone(),
        )
    }

    /// A server of this database at `location`, new to it: a new id (or
    /// the one of the server removed from there before), health and connections (private, pooled or pipelined as the
    /// database says). The one place servers are made; one already known
    /// keeps all that when its role changes ([`Server::redeclared`]).
    pub(crate) fn new_server(&self, location: &Location, role: Role) -> Server {
        // A server removed before comes back under its id, and with it
        // the private connections workers have not closed yet.
        let reused = self.discovery.lock().removed.remove(location);
        if let Some(id) = reused {
            self.private.reinstate(self.owner(id));
        }
        let id = reused.unwrap_or_else(|| self.servers.new_id());
        let connector = self.connector(location);
        let config = &self.config;
        let pool = || SharedPool::new(connector.location().to_string(), config.max_connections);
        let connections = match (config.shared_connections, config.pipelining) {
            (false, _) => Connections::Private(PrivateAccess::new(
                self.private.clone(),
                self.owner(id),
                config.max_connections,
                Arc::downgrade(&self.stats),
            )),
            (true, false) => Connections::Pooled(Arc::new(pool())),
            (true, true) => Connections::Pipelined(Pipelined::new(pool())),
        };
        let policy = ConnectionPolicy {
            stats: self.stats.clone(),
            connect_timeout: config.connection_timeout,
            ttl: config.connection_ttl,
            readonly_replicas: self.cluster.is_some(),
            identify: self.near_cache.is_some(),
        };
        Server::new(
            id,
            connector,
            role,
            Arc::new(Health::new(config.sickness_ttl)),
            self.preference.weight(location),
            policy,
            Arc::new(connections),
        )
    }

    /// What keys its private connections to the server `id` in the
    /// per-thread lists of its VCL.
    fn owner(&self, server: u32) -> Owner {
        Owner {
            db: self.id,
            server,
        }
    }

    /// The failover hold of its master commands (started and lifted by
    /// the Sentinel thread).
    pub(crate) fn failover_hold(&self) -> &FailoverHold {
        &self.hold
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

    /// Asks `ROLE` on a fresh connection and records the answer
    /// ([`Server::probe_role`]). Runs in `vcl_init`: each step is bounded
    /// by its timeout, at most [`PROBE_STEP_CAP`].
    fn discover_role(&self, server: &Server) -> Option<Role> {
        server.probe_role(
            probe_step(self.config.connection_timeout),
            probe_step(self.config.command_timeout),
        )
    }

    /// Renders the counters as `.stats()` shows them: the C VMOD's output
    /// (which has no per-server data, however many servers), plus each
    /// server's state when `extended` ([ext]).
    pub fn write_stats(&self, out: &mut String, format: &StatsFormat, extended: bool) {
        let servers = self.server_snapshots(extended);
        let context = StatsContext {
            db_name: &self.name,
            servers: &servers,
        };
        match format {
            StatsFormat::Json => self.stats.write_json(out, &context),
            StatsFormat::Prometheus(options) => self.stats.write_prometheus(out, &context, options),
        }
    }

    /// [ext] `redis.stats(db="*")`: the counters of every database in one
    /// document (see [`crate::stats::every_database`]).
    pub fn write_stats_of_every(
        databases: &[Arc<Database>],
        out: &mut String,
        format: &StatsFormat,
        extended: bool,
    ) {
        let servers: Vec<Vec<ServerSnapshot>> = databases
            .iter()
            .map(|db| db.server_snapshots(extended))
            .collect();
        let parts: Vec<every_database::Part> = databases
            .iter()
            .zip(&servers)
            .map(|(db, servers)| {
                let context = StatsContext {
                    db_name: &db.name,
                    servers,
                };
                (&*db.stats, context)
            })
            .collect();
        match format {
            StatsFormat::Json => every_database::write_json(out, &parts),
            StatsFormat::Prometheus(options) => {
                every_database::write_prometheus(out, &parts, options)
            }
        }
    }

    /// What each server looks like now, for `extended` stats; none
    /// otherwise.
    fn server_snapshots(&self, extended: bool) -> Vec<ServerSnapshot> {
        if !extended {
            return Vec::new();
        }
        let now = Instant::now();
        self.topology()
            .servers
            .iter()
            .map(|server| {
                let (open, idle) = server.pool_state();
                ServerSnapshot {
                    location: server.location().to_string(),
                    role: server.role(),
                    sick: server.health.is_sick(now),
                    connections_open: u64::from(open),
                    connections_idle: u64::from(idle),
                    commands_in_flight: server.commands_in_flight() as u64,
                }
            })
            .collect()
    }

    /// Closes idle connections (VCL cold). Returns how many were closed.
    pub fn close_idle(&self) -> usize {
        let pooled: usize = self
            .topology()
            .servers
            .iter()
            .map(|server| server.connections.close_idle())
            .sum();
        // Private ones by database: also those of servers it no longer has.
        pooled + self.private.close_idle(self.id)
    }
}

#[cfg(test)]
mod tests;
