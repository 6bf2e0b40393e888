//! Cluster mode: reading the slot map from a node (`CLUSTER SHARDS`, else
//! `CLUSTER SLOTS`) and making its nodes the servers of the database
//! (those of shards without slots too: known, routed nothing). As in the C VMOD, the map
//! is first read in `vcl_init`, from each seed declared while none gave
//! one yet ([`Database::discover_at_load`]). At run time a discovery runs
//! when a command needs the map (none could be read at load), and again
//! after a `MOVED` that the map does not agree with, an `ASK` to a node it
//! does not name, or a failed attempt (once per command at most): at most
//! once per
//! [`DISCOVERY_INTERVAL`], whatever asks for it, and once per change:
//! workers that see the same change while another one is already at it
//! (or has done it since) do not start one. Without a map (none could be
//! read), commands fail at once with the last discovery's error until the
//! interval allows the next one.
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::execution::Execution;
use super::{probe_step, within, Database, Note};
use crate::cluster::{parse_shards, parse_slots, Node, ShardsMap, SlotMap};
use crate::config::{DbConfig, Location, Role};
use crate::error::{Error, Result};
use crate::protocol::Reply;
use crate::server::Server;
use crate::stats::{Counter, Stats};
use crate::topology::Topology;

/// What one node's map is worth to a discovery.
#[derive(Debug, PartialEq)]
enum Judged {
    /// No slot assigned (a node not yet in a cluster): not a map.
    NoSlots,
    /// It still gives slots to a master found sick (a node that has not
    /// heard of a failover yet): kept only if no other node gives better.
    NamesSick,
    Usable,
}

/// Judges `map` against the servers found `sick` when the discovery began.
fn judge(map: &SlotMap<Node>, sick: &[&Location]) -> Judged {
    let mut masters = map.shards.iter().map(|shard| shard.master.as_ref());
    if map.shards.is_empty() {
        Judged::NoSlots
    } else if masters.any(|master| master.is_ok_and(|master| sick.contains(&master))) {
        Judged::NamesSick
    } else {
        Judged::Usable
    }
}

/// The `CLUSTER SLOTS` request, packed.
const CLUSTER_SLOTS: &[u8] = b"*2\r\n$7\r\nCLUSTER\r\n$5\r\nSLOTS\r\n";
/// The `CLUSTER SHARDS` request, packed: the map with each node's health
/// (Redis 7+), asked first as the C VMOD's newest releases do.
const CLUSTER_SHARDS: &[u8] = b"*2\r\n$7\r\nCLUSTER\r\n$6\r\nSHARDS\r\n";

/// How long a node a map says is not online stays sick at least, whatever
/// `sickness_ttl` (0 included).
const MIN_MAP_DOWN: Duration = Duration::from_secs(1);

/// Most nodes asked by one discovery: the known masters, then the seeds.
const MAX_NODES_ASKED: usize = 8;

/// Least time between two discoveries of a database, whatever asks for
/// them (documented in vmod.vcc, `type=cluster`): while a master is down,
/// or the map cannot be read, or nodes disagree, every command would ask
/// for one, and each would only add load (and connections) to a cluster
/// in trouble.
pub(super) const DISCOVERY_INTERVAL: Duration = Duration::from_secs(1);

/// When the last discovery ended, and its error if it found no map.
#[derive(Default)]
struct LastDiscovery {
    ended: Option<Instant>,
    error: Option<Arc<str>>,
}

impl LastDiscovery {
    /// Whether another discovery may start at `now`.
    fn interval_over(&self, now: Instant) -> bool {
        self.ended.map_or(true, |ended| {
            now.saturating_duration_since(ended) >= DISCOVERY_INTERVAL
        })
    }
}

/// What a cluster database keeps besides its servers.
#[derive(Default)]
pub(crate) struct Cluster {
    /// Every location given to `redis.db()` / `.add_server()`, asked when
    /// no known master answers (they stay seeds when the map leaves them
    /// out).
    seeds: Mutex<Vec<Location>>,
    /// Held by the one worker running a discovery.
    discovery: Mutex<LastDiscovery>,
    /// Discoveries run so far: a worker that saw a `MOVED` on the map of
    /// generation `g` starts one only if the generation is still `g`.
    generation: AtomicU64,
    /// The costly private setting (see [`costly_private_setting`]) was
    /// logged: once per database.
    costly_logged: AtomicBool,
}

impl Cluster {
    /// Whether `location` is a new seed.
    pub(super) fn add_seed(&self, location: Location) -> bool {
        let mut seeds = self.seeds.lock();
        let new = !seeds.contains(&location);
        if new {
            seeds.push(location);
        }
        new
    }

    pub(super) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }
}

impl Database {
    /// The topology with a slot map, and the generation it is at least.
    /// Without a map, one worker runs a discovery (if the interval
    /// allows) while the others wait for its outcome, each until its own
    /// `deadline` at most; when there is still no map, the command fails
    /// with the last discovery's error.
    pub(super) fn topology_with_slots(
        &self,
        cluster: &Cluster,
        x: &mut Execution,
    ) -> Result<(Arc<Topology>, u64)> {
        // The generation first: a discovery swaps the topology before it
        // moves the generation, so this topology is at least that recent.
        let seen = cluster.generation();
        let topology = self.topology();
        if topology.slots.is_some() {
            return Ok((topology, seen));
        }
        let waiting = Instant::now();
        let last = match x.deadline {
            Some(deadline) => cluster.discovery.try_lock_until(deadline),
            None => Some(cluster.discovery.lock()),
        };
        let Some(mut last) = last else {
            return Err(Error::DiscoveryWait {
                waited_ms: waiting.elapsed().as_millis(),
            });
        };
        if cluster.generation() == seen && last.interval_over(Instant::now()) {
            self.discover(cluster, &mut last, x);
        }
        let seen = cluster.generation();
        let topology = self.topology();
        if topology.slots.is_some() {
            return Ok((topology, seen));
        }
        let last = last.error.clone();
        Err(Error::NoSlotMap {
            last: last.unwrap_or_else(|| "no discovery yet".into()),
        })
    }

    /// After a `MOVED` the map does not agree with, an `ASK` to a node it
    /// does not name, or a failed attempt,
    /// on the map of generation `seen`: a discovery, unless one is running
    /// or ran since, or the last one ended less than
    /// [`DISCOVERY_INTERVAL`] ago. Never waits.
    pub(super) fn refresh_slots(&self, cluster: &Cluster, seen: u64, x: &mut Execution) {
        let Some(mut last) = cluster.discovery.try_lock() else {
            return;
        };
        if cluster.generation() == seen && last.interval_over(Instant::now()) {
            self.discover(cluster, &mut last, x);
        }
    }

    /// A discovery, run with its lock held (`last`): records when it
    /// ended and, when it found no map, why.
    fn discover(&self, cluster: &Cluster, last: &mut LastDiscovery, x: &mut Execution) {
        let nodes = self.nodes_to_ask(cluster);
        let error = self
            .read_slots(cluster, &nodes, x.deadline, false, &mut *x.debug)
            .err();
        *last = LastDiscovery {
            ended: Some(Instant::now()),
            error,
        };
    }

    /// In `vcl_init`, for a seed just declared (`redis.db()`'s location
    /// or `.add_server()`, once per seed): while no map has been read, the map from that
    /// seed, now. So `servers.total` counts every node before the first
    /// command, and a seed that cannot be reached is marked sick and
    /// logged at `vcl.load`, as in the C VMOD (which asks only the first
    /// seed; a later one is asked here too while none answered). Each step
    /// is a probe step: `vcl.load` never waits long on a frozen seed. Not
    /// subject to the interval, nor holding the first command's discovery
    /// back.
    pub(crate) fn discover_at_load(&self, seed: &Location, note: &mut dyn FnMut(Note)) {
        let Some(cluster) = &self.cluster else {
            return;
        };
        let mut last = cluster.discovery.lock();
        if self.topology().slots.is_some() {
            return;
        }
        last.error = self
            .read_slots(cluster, std::slice::from_ref(seed), None, true, note)
            .err();
    }

    /// The nodes a run-time discovery asks, in order: the known masters
    /// (healthy ones first), then the seeds.
    fn nodes_to_ask(&self, cluster: &Cluster) -> Vec<Location> {
        let now = Instant::now();
        let topology = self.topology();
        let mut masters: Vec<&Arc<Server>> = topology
            .servers
            .iter()
            .filter(|server| server.role() == Role::Master)
            .collect();
        // Stable: healthy masters first, in their order.
        masters.sort_by_key(|server| server.health.is_sick(now));
        let mut nodes: Vec<Location> = masters
            .iter()
            .map(|server| server.location().clone())
            .collect();
        for seed in cluster.seeds.lock().iter() {
            if !nodes.contains(seed) {
                nodes.push(seed.clone());
            }
        }
        nodes.truncate(MAX_NODES_ASKED);
        nodes
    }

    /// Asks `nodes` in order for the slot map until one answers, and
    /// applies it. A map that still gives slots to a master found sick (a
    /// node that has not heard of a failover yet) is kept only if no other
    /// node gives a better one. `at_load`: a node that cannot be
    /// connected to is marked sick (no command did it), and a discovery
    /// that fails counts in `cluster.discoveries.failed` only, as the C
    /// VMOD counts it there. Counted in `cluster.discoveries.*`; the error
    /// says what each node asked answered.
    fn read_slots(
        &self,
        cluster: &Cluster,
        nodes: &[Location],
        deadline: Option<Instant>,
        at_load: bool,
        note: &mut dyn FnMut(Note),
    ) -> Result<(), Arc<str>> {
        let found = || {
            if at_load {
                self.stats.inc(Counter::ClusterDiscoveriesTotal);
            }
        };
        if !at_load {
            self.stats.inc(Counter::ClusterDiscoveriesTotal);
        }
        let now = Instant::now();
        let topology = self.topology();
        let sick: Vec<&Location> = topology
            .servers
            .iter()
            .filter(|server| server.health.is_sick(now))
            .map(|server| server.location())
            .collect();
        let mut failures: Vec<String> = Vec::new();
        let mut stale: Option<(String, ShardsMap)> = None;
        for location in nodes {
            let asked = location.to_string();
            let answer = self.ask_node(location, &topology, deadline, at_load);
            match answer.map(|read| (judge(&read.map, &sick), read)) {
                Ok((Judged::NoSlots, _)) => failures.push(format!("{asked}: no slot assigned")),
                Ok((Judged::NamesSick, read)) => {
                    if self.config.debug {
                        note(Note::Debug(&format!(
                            "cluster slots from {asked} still name a sick master: asking another node"
                        )));
                    }
                    stale.get_or_insert((asked, read));
                }
                Ok((Judged::Usable, read)) => {
                    found();
                    self.use_slots(cluster, &asked, read, note);
                    return Ok(());
                }
                Err(err) => failures.push(format!("{asked}: {err}")),
            }
        }
        if let Some((asked, read)) = stale {
            // The best there is: the sick master may be back.
            found();
            self.use_slots(cluster, &asked, read, note);
            return Ok(());
        }
        Err(self.discovery_failed(cluster, &failures, note))
    }

    /// Asks the node at `location` for the slot map, on a connection of its
    /// own: `CLUSTER SHARDS`, else (a server before 7.0, or one that
    /// refuses it) `CLUSTER SLOTS`, every node then taken as healthy. Each
    /// step (connect, request) is a probe step, by `deadline`: a node that
    /// does not answer in time is skipped for the next, and the whole
    /// discovery stays short for the worker. `at_load`: a node that cannot
    /// be connected to is marked sick (no command did it).
    fn ask_node(
        &self,
        location: &Location,
        topology: &Topology,
        deadline: Option<Instant>,
        at_load: bool,
    ) -> Result<ShardsMap, String> {
        // Not counted in the database's connection counters, as the ROLE
        // probe: they count what commands use.
        let probe_stats = Stats::default();
        let opened = self.connector(location).connect_staged(
            &probe_stats,
            probe_step(self.config.connection_timeout),
            probe_step(self.config.command_timeout),
            deadline,
        );
        let mut conn = opened.map_err(|err| {
            if at_load {
                if let Some(server) = topology.by_location(location) {
                    server.health.mark_failed();
                }
            }
            err.to_string()
        })?;
        let timeout = || within(probe_step(self.config.command_timeout), deadline);
        let shards = conn
            .request(CLUSTER_SHARDS, timeout())
            .map_err(|failure| format!("CLUSTER SHARDS: {failure}"))?;
        if !matches!(shards, Reply::Error(_)) {
            let tls = self.config.tls.is_some();
            return parse_shards(&shards, location.host(), tls);
        }
        let slots = conn
            .request(CLUSTER_SLOTS, timeout())
            .map_err(|failure| format!("CLUSTER SLOTS: {failure}"))?;
        let map = parse_slots(&slots, location.host())?;
        Ok(ShardsMap {
            map,
            unhealthy: Vec::new(),
        })
    }

    /// No node gave a map: counted, said (`failures`: what each node asked
    /// answered), and counted as a generation too, so that the workers
    /// that waited for it go on without a map rather than all trying
    /// again. The error the discovery ends with.
    fn discovery_failed(
        &self,
        cluster: &Cluster,
        failures: &[String],
        note: &mut dyn FnMut(Note),
    ) -> Arc<str> {
        cluster.generation.fetch_add(1, Ordering::Release);
        self.stats.inc(Counter::ClusterDiscoveriesFailed);
        let text = if failures.is_empty() {
            "cluster discovery failed: no node to ask".to_string()
        } else {
            format!("cluster discovery failed: {}", failures.join("; "))
        };
        note(Note::Warning(&text));
        text.into()
    }

    fn use_slots(
        &self,
        cluster: &Cluster,
        asked: &str,
        read: ShardsMap,
        note: &mut dyn FnMut(Note),
    ) {
        let ShardsMap { map, unhealthy } = read;
        if self.config.debug {
            let not_online = match unhealthy.len() {
                0 => String::new(),
                n => format!(", {n} not online"),
            };
            let idle = match map.idle.len() {
                0 => String::new(),
                n => format!(" (and {n} without slots)"),
            };
            note(Note::Debug(&format!(
                "cluster slots from {asked}: {} shards{idle}, {} nodes{not_online}",
                map.shards.len(),
                map.nodes().count()
            )));
        }
        if let Some(text) = costly_private_setting(&self.config, map.shards.len()) {
            if !cluster.costly_logged.swap(true, Ordering::Relaxed) {
                note(Note::Warning(&text));
            }
        }
        self.apply_slots(map);
        // As the C VMOD: a node `CLUSTER SHARDS` says is not online (failed,
        // loading) is sick, for sickness_ttl (at least a second): it is
        // then tried again, since no map may be read again to clear it.
        let down_for = self.config.sickness_ttl.max(MIN_MAP_DOWN);
        let unhealthy: HashSet<&Node> = unhealthy.iter().collect();
        for server in self.topology().servers.iter() {
            let location = Ok(server.location().clone());
            match unhealthy.contains(&location) {
                true => server.health.set_down_for(down_for),
                false => server.health.set_down(false),
            }
        }
        cluster.generation.fetch_add(1, Ordering::Release);
    }

    /// Makes the nodes of `map` the servers of the database: a node
    /// already known keeps its id, health and pool (its role follows the
    /// map), new nodes are added (`servers.total`), and servers the map
    /// leaves out (nodes that left it, targets learnt from redirections)
    /// are dropped: their pools once no worker holds them, the idle
    /// private connections to them at each worker's next lease.
    /// (Sets and maps throughout: a map names up to `MAX_MAP_NODES`.)
    pub(super) fn apply_slots(&self, map: SlotMap<Node>) {
        let mut nodes: Vec<&Node> = Vec::new();
        let mut seen: HashSet<&Node> = HashSet::new();
        for node in map.nodes() {
            if seen.insert(node) {
                nodes.push(node);
            }
        }
        let shards = map.shards.iter().chain(&map.idle);
        let masters: HashSet<&Node> = shards.map(|s| &s.master).collect();
        self.servers.update(|current| {
            let known: HashMap<&Location, &Arc<Server>> = current
                .servers
                .iter()
                .map(|server| (server.location(), server))
                .collect();
            let mut servers = Vec::with_capacity(nodes.len());
            let mut kept: HashMap<&Location, usize> = HashMap::with_capacity(nodes.len());
            for &node in &nodes {
                // Not a location we can connect to: left out.
                let Ok(location) = node else {
                    continue;
                };
                let role = if masters.contains(node) {
                    Role::Master
                } else {
                    Role::Slave
                };
                let server = match known.get(location) {
                    Some(&server) if server.declared() == role => server.clone(),
                    Some(&server) => Arc::new(server.redeclared(role)),
                    None => self.new_node(location, role),
                };
                kept.insert(location, servers.len());
                servers.push(server);
            }
            let ids: HashSet<u32> = servers.iter().map(|server| server.id).collect();
            for dropped in current.servers.iter().filter(|s| !ids.contains(&s.id)) {
                self.private.retire(self.owner(dropped.id));
            }
            let index = |node: Node| node.ok().and_then(|at| kept.get(&at).copied());
            let slots = map.clone().map(|node| index(node).unwrap_or(usize::MAX));
            Some(Topology {
                servers,
                slots: Some(Arc::new(slots)),
            })
        });
    }

    /// A server for a cluster node at `location` that the database did
    /// not know, counted in `servers.total`.
    fn new_node(&self, location: &Location, role: Role) -> Arc<Server> {
        self.stats.inc(Counter::ServersTotal);
        Arc::new(self.new_server(location, role))
    }

    /// The server at `node`, a redirection's target: known, or added now
    /// (a node the map does not name yet) as a learnt server. At most
    /// [`MAX_LEARNT`] are kept: the oldest goes for a new one (a peer
    /// that redirects to ever new addresses must not grow the servers,
    /// their connections and near cache tracking without bound); the
    /// next discovery drops those its map does not name. None for a node
    /// no location can be made of.
    pub(super) fn cluster_node(&self, node: &Node) -> Option<Arc<Server>> {
        let location = node.as_ref().ok()?;
        if let Some(server) = self.topology().by_location(location) {
            return Some(server.clone());
        }
        let mut found = None;
        self.servers.update(|current| {
            if let Some(server) = current.by_location(location) {
                found = Some(server.clone());
                return None;
            }
            // Redirections point at masters.
            let server = self.new_node(location, Role::Master);
            found = Some(server.clone());
            let mut next = Topology {
                servers: current.servers.clone(),
                slots: current.slots.clone(),
            };
            let learnt = learnt(current);
            if learnt.len() >= MAX_LEARNT {
                let oldest = learnt[0];
                let evicted = next.servers.remove(oldest);
                self.private.retire(self.owner(evicted.id));
                next.slots = next.slots.map(|slots| shifted(slots, oldest));
            }
            next.servers.push(server);
            Some(next)
        });
        found
    }
}

/// Servers learnt from redirections kept at most (besides the nodes the
/// map names): enough for the nodes a resharding or a scale-out sends
/// to before the next discovery names them.
pub(super) const MAX_LEARNT: usize = 16;

/// The indexes of `topology`'s servers its map does not name (targets of
/// redirections, seeds declared after the map was read), oldest first.
pub(super) fn learnt(topology: &Topology) -> Vec<usize> {
    let Some(slots) = &topology.slots else {
        return Vec::new();
    };
    let named: HashSet<usize> = slots.nodes().copied().collect();
    (0..topology.servers.len())
        .filter(|index| !named.contains(index))
        .collect()
}

/// `slots` once the server at `removed`, which it does not name, is
/// gone: the indexes past it one less. (Learnt servers come after those
/// the map names, so this is the map as it was.)
fn shifted(slots: Arc<SlotMap<usize>>, removed: usize) -> Arc<SlotMap<usize>> {
    if slots
        .nodes()
        .all(|&index| index < removed || index == usize::MAX)
    {
        return slots;
    }
    let shift = |index: usize| match index {
        usize::MAX => index,
        index if index > removed => index - 1,
        index => index,
    };
    Arc::new(SlotMap::clone(&slots).map(shift))
}

/// Private connections on a cluster with fewer `max_connections` than
/// masters: a worker thread keeps at most that many connections for the
/// VCL's private databases, so a command for another master than the last
/// ones closes one and opens another (seed 000's `max_connections=1` on 3
/// masters: 1.71 connects per request; the C VMOD 2.02). What to log, if
/// so.
fn costly_private_setting(config: &DbConfig, masters: usize) -> Option<String> {
    let max = config.max_connections;
    (!config.shared_connections && (max as usize) < masters).then(|| {
        format!(
            "private connections (shared_connections=false) with max_connections={max} \
             below the {masters} masters of the cluster: a worker thread reconnects on \
             most commands (set max_connections to {masters} or more, or \
             shared_connections=true)"
        )
    })
}

#[cfg(test)]
mod tests;
