//! What the cluster trials (s9, s10) share: a Redis Cluster of 3 masters x
//! 1 replica formed by `tests/support/cluster.rs` from nodes started here,
//! varnishd with a `type = cluster` database seeded with m0, and a load
//! whose keys sit in chosen slots (hash tags).
use super::*;

/// The harness's name for the cluster (its macros are `c_m0_port`...).
const NAME: &str = "c";
/// Node names of the harness, masters first.
pub(crate) const NODES: [&str; 6] = ["m0", "m1", "m2", "r0", "r1", "r2"];
/// Slots of a Redis Cluster.
const SLOTS: u16 = 16384;

/// The cluster's nodes: m0, the seed, is the `Setup`'s Redis.
pub(crate) struct Nodes {
    macros: Vec<(String, String)>,
    /// The other five (and those added), stopped by PID on drop.
    _others: Vec<Redis>,
    /// The trial's directory, and the nodes' extra options.
    dir: PathBuf,
    extra: Vec<String>,
}

impl Nodes {
    fn macro_of(&self, node: &str, what: &str) -> &str {
        let key = format!("{NAME}_{node}_{what}");
        self.macros
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v.as_str())
            .unwrap_or_else(|| panic!("cluster harness: no macro {key}"))
    }

    pub(crate) fn port(&self, node: &str) -> u16 {
        self.macro_of(node, "port").parse().expect("a port")
    }

    /// The cluster node id.
    pub(crate) fn id(&self, node: &str) -> &str {
        self.macro_of(node, "id")
    }

    pub(crate) fn ports(&self, nodes: &[&str]) -> Vec<u16> {
        nodes.iter().map(|n| self.port(n)).collect()
    }

    /// The masters' names: m0, m1, m2, then those added.
    pub(crate) fn masters(&self) -> Vec<String> {
        let prefix = format!("{NAME}_m");
        self.macros
            .iter()
            .filter_map(|(k, _)| k.strip_prefix(&prefix)?.strip_suffix("_id"))
            .map(|n| format!("m{n}"))
            .collect()
    }

    /// A new empty master `name` (`m3`...) with the options of the others,
    /// met from m0 (`CLUSTER MEET`), as `redis-cli --cluster add-node`
    /// adds one; returned once every master knows it and it knows every
    /// node (none in handshake), 10 s at most.
    pub(crate) fn add_master(&mut self, name: &str) -> Res<()> {
        let sub = self.dir.join(name);
        let redis = Redis::start_with(&sub, &cluster::node_args(&self.extra))?;
        let port = redis.port;
        self._others.push(redis);
        let id = cluster::ask(port, &["CLUSTER", "MYID"])?;
        cluster::ask(
            self.port("m0"),
            &["CLUSTER", "MEET", "127.0.0.1", &port.to_string()],
        )?;
        let mut known = self.ports(&NODES);
        known.push(port);
        let deadline = Instant::now() + Duration::from_secs(10);
        for &node in &known {
            let knows = || {
                let text = cluster::ask(node, &["CLUSTER", "NODES"])?;
                let settled = text.lines().count() == known.len()
                    && !text.contains("handshake")
                    && !text.contains("noaddr")
                    && text.contains(&id);
                match settled {
                    true => Ok(()),
                    false => Err(format!(
                        "node {name} not known by {node} within 10 s:\n{text}"
                    )),
                }
            };
            support::poll_until(deadline, Duration::from_millis(20), knows)?;
        }
        for (what, value) in [("port", port.to_string()), ("id", id)] {
            self.macros.push((format!("{NAME}_{name}_{what}"), value));
        }
        Ok(())
    }

    /// The slot map as `CLUSTER NODES` of `node` says it.
    pub(crate) fn map_seen_by(&self, node: &str) -> Res<SlotOwners> {
        let port = self.port(node);
        let text = cluster::ask(port, &["CLUSTER", "NODES"])?;
        let mut ranges = Vec::new();
        // `<id> <ip:port@bus> <flags> <master> <ping> <pong> <epoch>
        // <link> <slot ranges...>`; `[slot->-id]` entries are migrations.
        for line in text.lines() {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() < 9 || !fields[2].contains("master") {
                continue;
            }
            let address = fields[1].split('@').next().unwrap_or("");
            let master: u16 = address
                .rsplit_once(':')
                .and_then(|(_, p)| p.parse().ok())
                .ok_or_else(|| format!("CLUSTER NODES of {node}: address {address:?}"))?;
            for range in &fields[8..] {
                let (first, last) = range.split_once('-').unwrap_or((range, range));
                if let (Ok(first), Ok(last)) = (first.parse(), last.parse()) {
                    ranges.push((first, last, master));
                }
            }
        }
        Ok(SlotOwners(ranges))
    }
}

/// Slot ranges and the port of the master serving each.
pub(crate) struct SlotOwners(Vec<(u16, u16, u16)>);

impl SlotOwners {
    pub(crate) fn owner(&self, slot: u16) -> Option<u16> {
        self.0
            .iter()
            .find(|(first, last, _)| (*first..=*last).contains(&slot))
            .map(|(_, _, port)| *port)
    }
}

/// Starts the six nodes (`extra`: more redis-server options for each),
/// forms the cluster, and starts varnishd with a `type = cluster`
/// database seeded with m0: both timeouts 200 ms, 1 retry.
pub(crate) fn start(name: &str, mode: Mode, extra: &[&str]) -> Res<(Setup, Nodes, DbSpec)> {
    start_with(name, DbSpec::new("db", mode), extra)
}

/// [`start`] with `db` (its mode, its near cache) as the base of the
/// database.
pub(crate) fn start_with(
    name: &str,
    mut db: DbSpec,
    extra: &[&str],
) -> Res<(Setup, Nodes, DbSpec)> {
    let mode = db.mode;
    db.cluster = true;
    db.connection_timeout = 200;
    db.command_timeout = 200;
    db.retries = 1;
    if !mode.shared() {
        // One per master for each worker.
        db.max_connections = 3;
    }
    let so = support::vmod_so()?;
    let dir = support::trial_dir(name)?;
    let extra: Vec<String> = extra.iter().map(|a| a.to_string()).collect();
    let (node_dir, node_extra) = (dir.clone(), extra.clone());
    let mut started: Vec<Redis> = Vec::new();
    let macros = cluster::start(&dir, NAME, &extra, &mut |node, args| {
        let sub = dir.join(node);
        let redis = Redis::start_with(&sub, args)?;
        let started_at = cluster::Node::plain(redis.port, redis.pid as u32);
        started.push(redis);
        Ok(started_at)
    })?;
    // The harness starts m0 first.
    let seed = started.remove(0);
    let nodes = Nodes {
        macros,
        _others: started,
        dir: node_dir,
        extra: node_extra,
    };
    let varnish = Varnish::start(&dir, &vcl(&so, seed.port, std::slice::from_ref(&db), name))?;
    let _ = http_get(varnish.port, "/db/stats");
    let idle = settled_all(&varnish, &nodes.ports(&NODES));
    let errlog = ErrorLog::start(&varnish, &dir)?;
    let s = Setup {
        name: name.to_string(),
        redis: seed,
        varnish,
        errlog,
        idle,
        failures: Vec::new(),
    };
    s.say(format!("child idle: {idle}"));
    Ok((s, nodes, db))
}

/// CRC16-CCITT (XMODEM), bit by bit: for choosing tags, each checked
/// against the server's `CLUSTER KEYSLOT`, and the slot a fake node names.
pub(crate) fn crc16(data: &[u8]) -> u16 {
    let mut crc = 0u16;
    for &byte in data {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// A hash tag of the load's keys and its slot.
#[derive(Clone, Debug)]
pub(crate) struct Tag {
    pub(crate) tag: String,
    pub(crate) slot: u16,
}

/// `count` tags `t<n>` on distinct slots that `want` accepts and not in
/// `taken` (which gets them).
pub(crate) fn pick_tags(
    count: usize,
    want: impl Fn(u16) -> bool,
    taken: &mut Vec<Tag>,
) -> Vec<Tag> {
    let mut tags = Vec::new();
    for n in 0..1_000_000 {
        if tags.len() == count {
            break;
        }
        let tag = format!("t{n}");
        let slot = crc16(tag.as_bytes()) % SLOTS;
        if want(slot) && !taken.iter().chain(&tags).any(|t| t.slot == slot) {
            tags.push(Tag { tag, slot });
        }
    }
    taken.extend(tags.iter().cloned());
    tags
}

/// Every tag's slot as the server computes it, for a key of the load.
pub(crate) fn check_tags(port: u16, tags: &[Tag]) -> Res<()> {
    for t in tags {
        let key = format!("fault:{{{}}}c0", t.tag);
        let slot = cluster::ask(port, &["CLUSTER", "KEYSLOT", &key])?;
        if slot.trim_start_matches(':') != t.slot.to_string() {
            return Err(format!(
                "CLUSTER KEYSLOT {key}: {slot}, the test computed {}",
                t.slot
            ));
        }
    }
    Ok(())
}

/// SET, GET and EVAL (`INCR` of `<key>:n`) of the key `{tag}c<client>`,
/// for each tag in turn.
pub(crate) const OPS: [&str; 3] = ["set", "get", "eval"];

pub(crate) fn tag_paths(tags: &[Tag]) -> Vec<String> {
    tags.iter()
        .flat_map(|t| {
            OPS.iter()
                .map(move |op| format!("/db/{op}/{{{}}}c{{c}}", t.tag))
        })
        .collect()
}

/// The tag of a sample of a load on [`tag_paths`].
pub(crate) fn tag_of<'a>(tags: &'a [Tag], sample: &Sample) -> &'a Tag {
    &tags[usize::from(sample.path) / OPS.len()]
}

/// The samples whose key is in one of `tags`.
pub(crate) fn on_tags(report: &Report, tags: &[Tag], of: &[Tag]) -> Vec<Sample> {
    report
        .samples
        .iter()
        .filter(|x| of.iter().any(|t| t.slot == tag_of(tags, x).slot))
        .copied()
        .collect()
}

/// The bound on the child's connections to `live` nodes.
pub(crate) fn cluster_connection_bound(db: &DbSpec, live: usize) -> usize {
    match db.mode {
        // A worker keeps max_connections in total, whatever the servers.
        Mode::Private => connection_bound(db),
        _ => connection_bound(db) * live,
    }
}

/// Starts the trial's load (`clients` on [`tag_paths`], stopped by the
/// caller) and returns at `at` s into it, with the child against `ports`
/// 0.3 s before.
pub(crate) fn load_until(
    s: &Setup,
    clients: usize,
    tags: &[Tag],
    at: f64,
    ports: &[u16],
) -> (Load, Snapshot, f64) {
    let load = Load::start(LoadSpec {
        port: s.varnish.port,
        clients,
        // A cap: the trial stops it a few seconds after the fault, which
        // once came 17 s late on a busy machine.
        duration: Duration::from_secs(60),
        paths: tag_paths(tags),
        deadline: Duration::from_secs(5),
    });
    load.sleep_until(at - 0.3);
    let reading = Instant::now();
    let before = snapshot_all(&s.varnish, ports);
    if reading.elapsed() > Duration::from_secs(1) {
        s.say(format!(
            "reading the child and the nodes took {} ms",
            reading.elapsed().as_millis()
        ));
    }
    load.sleep_until(at);
    let now = load.at();
    (load, before, now)
}

/// `errorstat_<kind>` of a node's `INFO errorstats`: the error replies of
/// that kind it sent.
fn errorstat(port: u16, kind: &str) -> Res<u64> {
    let info = cluster::ask(port, &["INFO", "errorstats"])?;
    let prefix = format!("errorstat_{kind}:count=");
    Ok(info
        .lines()
        .find_map(|l| {
            l.strip_prefix(&prefix)?
                .split(',')
                .next()?
                .trim()
                .parse()
                .ok()
        })
        .unwrap_or(0))
}

/// The counters against what the clients saw and what the `live` nodes
/// replied: every `TRYAGAIN` / `CLUSTERDOWN` a node sent was either
/// retried or the reply a client got (the only error replies the load can
/// get), and the other counters reconcile as in standalone mode, with
/// each retried reply and each redirection one more send in
/// `commands.total`.
pub(crate) fn check_cluster_counters(
    s: &mut Setup,
    all: &Figures,
    counters: &Counters,
    live: &[u16],
) -> Res<u64> {
    let mut busy_replies = 0;
    for &port in live {
        busy_replies += errorstat(port, "CLUSTERDOWN")? + errorstat(port, "TRYAGAIN")?;
    }
    let errors = all.error_reply as u64;
    s.check(counters.get("commands.error") == errors, || {
        format!(
            "commands.error {} but {errors} requests got an error reply",
            counters.get("commands.error")
        )
    });
    s.check(busy_replies >= errors, || {
        format!("{errors} error replies, but the nodes sent {busy_replies} TRYAGAIN / CLUSTERDOWN")
    });
    let redirected = counters.get("cluster.replies.moved") + counters.get("cluster.replies.ask");
    check_counters_with(
        all,
        counters,
        busy_replies.saturating_sub(errors),
        redirected,
        &mut s.failures,
    );
    Ok(busy_replies)
}
