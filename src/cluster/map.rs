//! The slot map of a cluster: which shard (a master and its replicas)
//! serves each of the 16384 slots, read from a `CLUSTER SLOTS` reply.
//! Generic in how a node is named: parsed as [`Node`]s (locations), then
//! turned into indexes of the database's servers.
use std::collections::{HashMap, HashSet};

use super::slot::{HashSlot, SLOTS};
use crate::config::Location;
use crate::protocol::Reply;

/// In [`SlotMap::slots`]: no shard serves the slot (the cluster is being
/// built or resharded).
pub(crate) const NO_SHARD: u16 = u16::MAX;

/// Most distinct nodes a map may name (Redis documents clusters of up to
/// 1000 nodes): a hostile or broken reply naming more is refused, not
/// turned into as many servers.
pub(crate) const MAX_MAP_NODES: usize = 4096;

/// The distinct nodes a reply has named so far, bounded by
/// [`MAX_MAP_NODES`].
#[derive(Default)]
pub(super) struct DistinctNodes(HashSet<Node>);

impl DistinctNodes {
    /// Counts `node`; an error once the map names too many.
    pub(super) fn note(&mut self, node: &Node, reply: &str) -> Result<(), String> {
        if self.0.len() >= MAX_MAP_NODES && !self.0.contains(node) {
            return Err(format!("{reply}: more than {MAX_MAP_NODES} nodes"));
        }
        self.0.insert(node.clone());
        Ok(())
    }
}

/// A master and its replicas.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Shard<N> {
    pub master: N,
    pub replicas: Vec<N>,
}

/// Shards and, per slot, the index of its shard ([`NO_SHARD`]: none).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SlotMap<N> {
    /// The shards that serve slots.
    pub shards: Vec<Shard<N>>,
    /// `SLOTS` entries: 32 KiB, rebuilt only by a discovery.
    pub slots: Box<[u16]>,
    /// Shards that serve no slot yet (a master just added, and its
    /// replicas), as `CLUSTER SHARDS` lists them (`CLUSTER SLOTS` cannot):
    /// their nodes are servers of the database, known before a slot moves
    /// to them, but no command goes to them until a map gives them slots.
    pub idle: Vec<Shard<N>>,
}

impl<N> SlotMap<N> {
    /// No shard, no slot served: what a reply's ranges then fill.
    pub(crate) fn unassigned() -> Self {
        SlotMap {
            shards: Vec::new(),
            slots: vec![NO_SHARD; SLOTS].into_boxed_slice(),
            idle: Vec::new(),
        }
    }

    /// The shard serving `slot`, if any.
    pub(crate) fn shard_of(&self, slot: HashSlot) -> Option<&Shard<N>> {
        let index = *self.slots.get(usize::from(slot))?;
        self.shards.get(usize::from(index))
    }

    /// The same map with each node renamed by `name`.
    pub(crate) fn map<M>(self, mut name: impl FnMut(N) -> M) -> SlotMap<M> {
        let mut rename = |shards: Vec<Shard<N>>| -> Vec<Shard<M>> {
            shards
                .into_iter()
                .map(|shard| Shard {
                    master: name(shard.master),
                    replicas: shard.replicas.into_iter().map(&mut name).collect(),
                })
                .collect()
        };
        let shards = rename(self.shards);
        let idle = rename(self.idle);
        SlotMap {
            shards,
            slots: self.slots,
            idle,
        }
    }

    /// Every node, masters first (those serving slots before the idle
    /// ones), then replicas.
    pub(crate) fn nodes(&self) -> impl Iterator<Item = &N> {
        let shards = || self.shards.iter().chain(&self.idle);
        let masters = shards().map(|shard| &shard.master);
        masters.chain(shards().flat_map(|shard| &shard.replicas))
    }

    /// The nodes of the shards that serve no slot.
    pub(crate) fn idle_nodes(&self) -> impl Iterator<Item = &N> {
        let masters = self.idle.iter().map(|shard| &shard.master);
        masters.chain(self.idle.iter().flat_map(|shard| &shard.replicas))
    }
}

/// A node as the cluster names it (`CLUSTER SLOTS`, `MOVED`, `ASK`): its
/// [`Location`], made by [`Location::tcp`] so that the spellings of one
/// node (`::1`, `0:0:0:0:0:0:0:1`, `REDIS-A`, `redis-a`) are one
/// location, the one its server has. `Err`: a host `Location` refuses,
/// kept as written (`host:port`) so that the node is still one node of
/// the map; no server can be made for it, so the database leaves it out
/// and a redirection to it fails.
pub(crate) type Node = Result<Location, String>;

/// The node at `host` and `port`.
pub(crate) fn node_at(host: &str, port: u16) -> Node {
    Location::tcp(host, port).map_err(|_| format!("{host}:{port}"))
}

pub(super) fn text(reply: &Reply) -> Option<&str> {
    match reply {
        Reply::String(bytes) => std::str::from_utf8(bytes).ok(),
        Reply::Status(text) => Some(text),
        _ => None,
    }
}

/// `[host, port, id, ...]` as a location. An empty host (a node that does
/// not know its own address) is the host that was asked, as in `MOVED`.
fn node(reply: &Reply, asked_host: &str) -> Result<Node, String> {
    let Reply::Array(fields) = reply else {
        return Err("a node is not an array".into());
    };
    let host = fields.first().and_then(text).ok_or("a node has no host")?;
    let port = match fields.get(1) {
        Some(Reply::Integer(port)) => u16::try_from(*port).ok().filter(|&p| p != 0),
        _ => None,
    }
    .ok_or("a node has no valid port")?;
    let host = if host.is_empty() || host == "?" {
        asked_host
    } else {
        host
    };
    Ok(node_at(host, port))
}

pub(super) fn slot_number(reply: Option<&Reply>) -> Result<HashSlot, String> {
    match reply {
        Some(Reply::Integer(n)) => u16::try_from(*n)
            .ok()
            .filter(|&n| usize::from(n) < SLOTS)
            .ok_or_else(|| format!("slot {n} out of range")),
        _ => Err("a range has no slot numbers".into()),
    }
}

/// Reads a `CLUSTER SLOTS` reply (`[[start, end, master, replica...],
/// ...]`) asked of a node on `asked_host`. A master serving several ranges
/// is one shard. Slots no range covers have no shard. A master without
/// slots, and its replicas, are not in the reply: no idle shard (only
/// `CLUSTER SHARDS`, Redis 7+, names them).
pub(crate) fn parse_slots(reply: &Reply, asked_host: &str) -> Result<SlotMap<Node>, String> {
    let ranges = match reply {
        Reply::Array(ranges) => ranges,
        Reply::Error(text) => return Err(format!("CLUSTER SLOTS: {text}")),
        _ => return Err("CLUSTER SLOTS: not an array".into()),
    };
    if ranges.len() > SLOTS {
        return Err(format!("CLUSTER SLOTS: more than {SLOTS} ranges"));
    }
    let mut map = SlotMap::unassigned();
    let mut distinct = DistinctNodes::default();
    let mut shard_of_master: HashMap<Node, usize> = HashMap::new();
    let mut listed: HashSet<(usize, Node)> = HashSet::new();
    for range in ranges {
        let Reply::Array(fields) = range else {
            return Err("CLUSTER SLOTS: a range is not an array".into());
        };
        let start = slot_number(fields.first())?;
        let end = slot_number(fields.get(1))?;
        if end < start {
            return Err(format!("CLUSTER SLOTS: range {start}-{end} is empty"));
        }
        let master = node(
            fields
                .get(2)
                .ok_or("CLUSTER SLOTS: a range has no master")?,
            asked_host,
        )
        .map_err(|e| format!("CLUSTER SLOTS: {e}"))?;
        distinct.note(&master, "CLUSTER SLOTS")?;
        let index = match shard_of_master.get(&master) {
            Some(&index) => index,
            None => {
                shard_of_master.insert(master.clone(), map.shards.len());
                map.shards.push(Shard {
                    master,
                    replicas: Vec::new(),
                });
                map.shards.len() - 1
            }
        };
        for replica in &fields[3..] {
            let replica = node(replica, asked_host).map_err(|e| format!("CLUSTER SLOTS: {e}"))?;
            distinct.note(&replica, "CLUSTER SLOTS")?;
            if listed.insert((index, replica.clone())) {
                map.shards[index].replicas.push(replica);
            }
        }
        // At most 16384 shards: the index fits (NO_SHARD is never reached).
        let index = u16::try_from(index).map_err(|_| "CLUSTER SLOTS: too many shards")?;
        map.slots[usize::from(start)..=usize::from(end)].fill(index);
    }
    Ok(map)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(text: &str) -> Reply {
        Reply::String(text.as_bytes().to_vec())
    }

    fn n(host: &str, port: i64) -> Reply {
        Reply::Array(vec![s(host), Reply::Integer(port), s("0123abcd")])
    }

    /// The node at `text` (`host:port`).
    fn at(text: &str) -> Node {
        Ok(text.parse().unwrap())
    }

    fn range(start: i64, end: i64, nodes: Vec<Reply>) -> Reply {
        let mut fields = vec![Reply::Integer(start), Reply::Integer(end)];
        fields.extend(nodes);
        Reply::Array(fields)
    }

    #[test]
    fn three_shards_with_replicas() {
        let reply = Reply::Array(vec![
            range(0, 5460, vec![n("127.0.0.1", 7000), n("127.0.0.1", 7004)]),
            range(
                5461,
                10922,
                vec![n("127.0.0.1", 7001), n("127.0.0.1", 7005)],
            ),
            range(
                10923,
                16383,
                vec![n("127.0.0.1", 7002), n("127.0.0.1", 7003)],
            ),
        ]);
        let map = parse_slots(&reply, "127.0.0.1").unwrap();
        assert_eq!(map.shards.len(), 3);
        let first = map.shard_of(0).unwrap();
        assert_eq!(first.master, at("127.0.0.1:7000"));
        assert_eq!(first.replicas, vec![at("127.0.0.1:7004")]);
        assert_eq!(map.shard_of(5460).unwrap().master, at("127.0.0.1:7000"));
        assert_eq!(map.shard_of(5461).unwrap().master, at("127.0.0.1:7001"));
        assert_eq!(map.shard_of(16383).unwrap().master, at("127.0.0.1:7002"));
        let nodes: Vec<&Node> = map.nodes().collect();
        assert_eq!(nodes.len(), 6);
        assert_eq!(nodes[0], &at("127.0.0.1:7000"));
        assert_eq!(nodes[3], &at("127.0.0.1:7004"));
    }

    #[test]
    fn a_master_with_several_ranges_is_one_shard() {
        let reply = Reply::Array(vec![
            range(0, 99, vec![n("127.0.0.1", 7000)]),
            range(100, 100, vec![n("127.0.0.1", 7001)]),
            range(101, 16383, vec![n("127.0.0.1", 7000)]),
        ]);
        let map = parse_slots(&reply, "h").unwrap();
        assert_eq!(map.shards.len(), 2);
        assert_eq!(map.slots[99], map.slots[101]);
        assert_eq!(map.shard_of(100).unwrap().master, at("127.0.0.1:7001"));
    }

    #[test]
    fn uncovered_slots_have_no_shard() {
        let reply = Reply::Array(vec![range(10, 20, vec![n("127.0.0.1", 7000)])]);
        let map = parse_slots(&reply, "h").unwrap();
        assert!(map.shard_of(9).is_none());
        assert!(map.shard_of(21).is_none());
        assert!(map.shard_of(15).is_some());
        let empty = parse_slots(&Reply::Array(vec![]), "h").unwrap();
        assert!(empty.shards.is_empty() && empty.shard_of(0).is_none());
    }

    #[test]
    fn empty_host_is_the_node_asked_and_ipv6_is_bracketed() {
        let reply = Reply::Array(vec![range(0, 16383, vec![n("", 7000), n("::1", 7001)])]);
        let map = parse_slots(&reply, "127.0.0.9").unwrap();
        assert_eq!(map.shards[0].master, at("127.0.0.9:7000"));
        assert_eq!(map.shards[0].replicas, vec![at("[::1]:7001")]);
    }

    #[test]
    fn node_names_are_those_of_locations() {
        let reply = Reply::Array(vec![
            range(
                0,
                99,
                vec![n("REDIS-A.Example", 7000), n("0:0:0:0:0:0:0:1", 7001)],
            ),
            range(100, 16383, vec![n("redis-a.example", 7000)]),
        ]);
        let map = parse_slots(&reply, "h").unwrap();
        assert_eq!(map.shards.len(), 1, "one master, however written");
        assert_eq!(map.shards[0].master, at("redis-a.example:7000"));
        assert_eq!(map.shards[0].replicas, vec![at("[::1]:7001")]);
        for (host, port, text) in [
            ("REDIS-A.example", 7000, "redis-a.example:7000"),
            ("::1", 7001, "[::1]:7001"),
            ("0::1", 7001, "[::1]:7001"),
        ] {
            let node = node_at(host, port).unwrap();
            assert_eq!(node.to_string(), text);
            assert_eq!(node, text.parse().unwrap(), "{host}");
        }
        assert_eq!(node_at("bad host", 1), Err("bad host:1".to_string()));
    }

    /// A node whose host `Location` refuses is still one node, so that
    /// the map keeps the shards the cluster has.
    #[test]
    fn refused_names_are_kept_as_written() {
        let reply = Reply::Array(vec![
            range(0, 99, vec![n("bad host", 7000), n("", 7001), n("x y", 1)]),
            range(100, 16383, vec![n("bad host", 7000), n("x y", 1)]),
        ]);
        let map = parse_slots(&reply, "127.0.0.1").unwrap();
        assert_eq!(map.shards.len(), 1);
        assert_eq!(map.shards[0].master, Err("bad host:7000".into()));
        assert_eq!(
            map.shards[0].replicas,
            vec![at("127.0.0.1:7001"), Err("x y:1".into())]
        );
    }

    #[test]
    fn renaming_nodes_keeps_the_slots() {
        let reply = Reply::Array(vec![
            range(0, 8191, vec![n("a", 1), n("b", 2)]),
            range(8192, 16383, vec![n("c", 3)]),
        ]);
        let map = parse_slots(&reply, "h").unwrap();
        let names: Vec<Node> = map.nodes().cloned().collect();
        let indexed = map.map(|name| names.iter().position(|n| *n == name).unwrap());
        assert_eq!(
            indexed.shard_of(0).unwrap(),
            &Shard {
                master: 0,
                replicas: vec![2]
            }
        );
        assert_eq!(indexed.shard_of(9000).unwrap().master, 1);
    }

    #[test]
    fn malformed_replies_are_refused() {
        let bad = [
            Reply::Error("ERR This instance has cluster support disabled".into()),
            Reply::Nil,
            Reply::Array(vec![Reply::Integer(1)]),
            Reply::Array(vec![range(0, 16384, vec![n("a", 1)])]),
            Reply::Array(vec![range(5, 4, vec![n("a", 1)])]),
            Reply::Array(vec![range(0, 1, vec![])]),
            Reply::Array(vec![range(0, 1, vec![n("a", 0)])]),
            Reply::Array(vec![range(0, 1, vec![n("a", 70000)])]),
            Reply::Array(vec![range(0, 1, vec![Reply::Array(vec![s("a")])])]),
        ];
        for reply in bad {
            assert!(parse_slots(&reply, "h").is_err(), "{reply:?}");
        }
        let err = parse_slots(&Reply::Error("ERR disabled".into()), "h").unwrap_err();
        assert_eq!(err, "CLUSTER SLOTS: ERR disabled");
    }

    /// A reply naming thousands of nodes (hostile or broken) is refused,
    /// and one at the bound is read in linear time.
    #[test]
    fn too_many_nodes_or_ranges_are_refused() {
        // One range per slot, each naming its own master and replicas.
        let reply = |replicas_per_range: i64| {
            Reply::Array(
                (0..SLOTS as i64)
                    .map(|slot| {
                        let first = 1 + slot * (1 + replicas_per_range) % 60_000;
                        let nodes = (0..=replicas_per_range).map(|i| n("127.0.0.1", first + i));
                        range(slot, slot, nodes.collect())
                    })
                    .collect(),
            )
        };
        let err = parse_slots(&reply(0), "h").unwrap_err();
        assert_eq!(
            err,
            format!("CLUSTER SLOTS: more than {MAX_MAP_NODES} nodes")
        );
        // 16 ranges of 4 masters, each listing the same 4000 replicas:
        // within the bound, read.
        let shared = Reply::Array(
            (0..16)
                .map(|slot| {
                    let master = n("127.0.0.1", 1 + slot % 4);
                    let replicas = (0..4000).map(|i| n("127.0.0.1", 100 + i));
                    range(
                        slot,
                        slot,
                        std::iter::once(master).chain(replicas).collect(),
                    )
                })
                .collect(),
        );
        let map = parse_slots(&shared, "h").unwrap();
        assert_eq!(map.shards.len(), 4);
        assert_eq!(map.shards[0].replicas.len(), 4000);
        let mut more = match reply(0) {
            Reply::Array(ranges) => ranges,
            _ => unreachable!(),
        };
        more.truncate(2);
        more.extend((0..SLOTS as i64).map(|_| range(0, 0, vec![n("127.0.0.1", 1)])));
        let err = parse_slots(&Reply::Array(more), "h").unwrap_err();
        assert_eq!(err, format!("CLUSTER SLOTS: more than {SLOTS} ranges"));
    }
}
