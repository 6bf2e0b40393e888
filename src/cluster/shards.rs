//! The slot map read from a `CLUSTER SHARDS` reply (Redis 7+), with the
//! health of every node: the C VMOD's newest releases read it first, and
//! mark the nodes that are not `online` as sick. A server without it
//! answers with an error, and the map is read from `CLUSTER SLOTS`.
//!
//! The reply, in RESP2 (RESP3 maps arrive flattened the same way): one
//! entry per shard, `["slots", [start, end, ...], "nodes", [node...]]`;
//! a node is `["id", .., "port", n, "tls-port", n, "ip", .., "endpoint",
//! .., "hostname", .., "role", "master"|"replica", "replication-offset",
//! n, "health", "online"|"failed"|"loading"]` (`port` or `tls-port` may
//! be absent, `hostname` too; Redis 7.0 says `fail` for `failed`: any
//! health but `online` counts as not online).
use std::collections::HashSet;

use super::map::{node_at, slot_number, text, DistinctNodes, Node, Shard, SlotMap};
use super::slot::SLOTS;
use crate::protocol::Reply;

/// A slot map and the nodes that are not `online` (failed, loading).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct ShardsMap {
    pub map: SlotMap<Node>,
    pub unhealthy: Vec<Node>,
}

/// The value of `key` in a flattened field list `[key, value, ...]`.
fn field<'a>(fields: &'a [Reply], key: &str) -> Option<&'a Reply> {
    fields
        .chunks_exact(2)
        .find(|pair| text(&pair[0]) == Some(key))
        .map(|pair| &pair[1])
}

/// One node of a shard: where it is (its `endpoint`, else its `ip`; the
/// asked host when it does not know its own, as `CLUSTER SLOTS` says it;
/// its `tls-port` over TLS, else its `port`), whether it is the master,
/// and whether it is `online`.
fn node(reply: &Reply, asked_host: &str, tls: bool) -> Result<(Node, bool, bool), String> {
    let Reply::Array(fields) = reply else {
        return Err("a node is not a field list".into());
    };
    let port = |key| match field(fields, key) {
        Some(Reply::Integer(port)) => u16::try_from(*port).ok().filter(|&p| p != 0),
        _ => None,
    };
    let port = if tls {
        port("tls-port").or_else(|| port("port"))
    } else {
        port("port")
    }
    .ok_or("a node has no usable port")?;
    let host = ["endpoint", "ip"]
        .into_iter()
        .filter_map(|key| field(fields, key).and_then(text))
        .find(|host| !host.is_empty() && *host != "?")
        .unwrap_or(asked_host);
    let master = field(fields, "role").and_then(text) == Some("master");
    // No health field (a fork or a proxy): taken as online.
    let online = field(fields, "health")
        .and_then(text)
        .map_or(true, |health| health == "online");
    Ok((node_at(host, port), master, online))
}

/// Reads a `CLUSTER SHARDS` reply asked of a node on `asked_host` (over
/// TLS: `tls`). A shard without slots (a master not given any yet, and
/// its replicas) is an idle shard of the map, as the C VMOD 22.4/23.3
/// registers its nodes. A shard without a master is left out, as
/// `CLUSTER SLOTS` leaves it out.
pub(crate) fn parse_shards(
    reply: &Reply,
    asked_host: &str,
    tls: bool,
) -> Result<ShardsMap, String> {
    let entries = match reply {
        Reply::Array(entries) => entries,
        Reply::Error(text) => return Err(format!("CLUSTER SHARDS: {text}")),
        _ => return Err("CLUSTER SHARDS: not an array".into()),
    };
    if entries.len() > SLOTS {
        return Err(format!("CLUSTER SHARDS: more than {SLOTS} shards"));
    }
    let mut map = SlotMap::unassigned();
    let mut unhealthy = Vec::new();
    let mut distinct = DistinctNodes::default();
    for entry in entries {
        let Reply::Array(fields) = entry else {
            return Err("CLUSTER SHARDS: a shard is not a field list".into());
        };
        let Some(Reply::Array(bounds)) = field(fields, "slots") else {
            return Err("CLUSTER SHARDS: a shard has no slots".into());
        };
        let Some(Reply::Array(nodes)) = field(fields, "nodes") else {
            return Err("CLUSTER SHARDS: a shard has no nodes".into());
        };
        // After a failover the old master may still be listed as a
        // master (its health `fail`) before the promoted one: the first
        // online master is the shard's, else the first master.
        let mut parsed = Vec::new();
        for reply in nodes {
            let (node, is_master, online) =
                node(reply, asked_host, tls).map_err(|e| format!("CLUSTER SHARDS: {e}"))?;
            distinct.note(&node, "CLUSTER SHARDS")?;
            if !online {
                unhealthy.push(node.clone());
            }
            parsed.push((node, is_master, online));
        }
        let chosen = parsed
            .iter()
            .position(|(_, is_master, online)| *is_master && *online)
            .or_else(|| parsed.iter().position(|(_, is_master, _)| *is_master));
        let Some(chosen) = chosen else { continue };
        let master = parsed[chosen].0.clone();
        let mut replicas = Vec::new();
        let mut listed = HashSet::new();
        for (index, (node, _, _)) in parsed.into_iter().enumerate() {
            if index != chosen && node != master && listed.insert(node.clone()) {
                replicas.push(node);
            }
        }
        let mut ranges = Vec::new();
        for pair in bounds.chunks(2) {
            let [start, end] = pair else {
                return Err("CLUSTER SHARDS: slots are not start-end pairs".into());
            };
            let slot = |reply| slot_number(Some(reply)).map_err(|e| format!("CLUSTER SHARDS: {e}"));
            let (start, end) = (slot(start)?, slot(end)?);
            if end < start {
                return Err(format!("CLUSTER SHARDS: range {start}-{end} is empty"));
            }
            ranges.push((start, end));
        }
        if ranges.is_empty() {
            map.idle.push(Shard { master, replicas });
            continue;
        }
        // At most 16384 shards have slots: the index fits.
        let index =
            u16::try_from(map.shards.len()).map_err(|_| "CLUSTER SHARDS: too many shards")?;
        map.shards.push(Shard { master, replicas });
        for (start, end) in ranges {
            map.slots[usize::from(start)..=usize::from(end)].fill(index);
        }
    }
    Ok(ShardsMap { map, unhealthy })
}

#[cfg(test)]
mod tests {
    use super::super::map::NO_SHARD;
    use super::*;

    fn s(text: &str) -> Reply {
        Reply::String(text.as_bytes().to_vec())
    }

    fn node(port: i64, role: &str, health: &str) -> Reply {
        Reply::Array(vec![
            s("id"),
            s("0123abcd"),
            s("port"),
            Reply::Integer(port),
            s("ip"),
            s("127.0.0.1"),
            s("endpoint"),
            s("127.0.0.1"),
            s("role"),
            s(role),
            s("replication-offset"),
            Reply::Integer(72156),
            s("health"),
            s(health),
        ])
    }

    fn shard(slots: &[i64], nodes: Vec<Reply>) -> Reply {
        Reply::Array(vec![
            s("slots"),
            Reply::Array(slots.iter().map(|&n| Reply::Integer(n)).collect()),
            s("nodes"),
            Reply::Array(nodes),
        ])
    }

    fn at(text: &str) -> Node {
        Ok(text.parse().unwrap())
    }

    #[test]
    fn shards_with_ranges_replicas_and_health() {
        let reply = Reply::Array(vec![
            shard(
                &[0, 5460, 10923, 10999],
                vec![
                    node(7000, "master", "online"),
                    node(7003, "replica", "loading"),
                ],
            ),
            shard(
                &[5461, 10922],
                vec![
                    node(7004, "replica", "online"),
                    node(7001, "master", "failed"),
                ],
            ),
            // A master with no slots yet: an idle shard.
            shard(&[], vec![node(7005, "master", "online")]),
        ]);
        let parsed = parse_shards(&reply, "127.0.0.1", false).unwrap();
        let map = &parsed.map;
        assert_eq!(map.shards.len(), 2);
        assert_eq!(map.shards[0].master, at("127.0.0.1:7000"));
        assert_eq!(map.shards[0].replicas, vec![at("127.0.0.1:7003")]);
        assert_eq!(map.shards[1].master, at("127.0.0.1:7001"));
        assert_eq!(map.shards[1].replicas, vec![at("127.0.0.1:7004")]);
        assert_eq!(map.slots[0], 0);
        assert_eq!(map.slots[5460], 0);
        assert_eq!(map.slots[5461], 1);
        assert_eq!(map.slots[10922], 1);
        assert_eq!(map.slots[10923], 0);
        assert_eq!(map.slots[10999], 0);
        assert_eq!(map.slots[11000], NO_SHARD);
        assert_eq!(
            parsed.unhealthy,
            vec![at("127.0.0.1:7003"), at("127.0.0.1:7001")]
        );
        assert_eq!(map.idle.len(), 1);
        assert_eq!(map.idle[0].master, at("127.0.0.1:7005"));
    }

    /// Shards that serve no slot (a master just added, one with a
    /// replica already, one whose replica is listed first): their nodes
    /// are named by the map, masters and replicas as the shard says, and
    /// no slot is theirs.
    #[test]
    fn shards_without_slots_are_idle_shards() {
        let reply = Reply::Array(vec![
            shard(&[], vec![node(7006, "master", "online")]),
            shard(&[0, 16383], vec![node(7000, "master", "online")]),
            shard(
                &[],
                vec![
                    node(7008, "replica", "loading"),
                    node(7007, "master", "online"),
                ],
            ),
            // No master: left out, as a shard with slots would be.
            shard(&[], vec![node(7009, "replica", "online")]),
        ]);
        let parsed = parse_shards(&reply, "127.0.0.1", false).unwrap();
        let map = &parsed.map;
        assert_eq!(map.shards.len(), 1);
        assert_eq!(map.shards[0].master, at("127.0.0.1:7000"));
        assert!(map.slots.iter().all(|&shard| shard == 0), "all 7000's");
        let idle: Vec<(Node, Vec<Node>)> = map
            .idle
            .iter()
            .map(|shard| (shard.master.clone(), shard.replicas.clone()))
            .collect();
        assert_eq!(
            idle,
            vec![
                (at("127.0.0.1:7006"), vec![]),
                (at("127.0.0.1:7007"), vec![at("127.0.0.1:7008")]),
            ]
        );
        // Masters first, those serving slots first.
        let nodes: Vec<Node> = map.nodes().cloned().collect();
        let want = [
            "127.0.0.1:7000",
            "127.0.0.1:7006",
            "127.0.0.1:7007",
            "127.0.0.1:7008",
        ];
        assert_eq!(nodes, want.map(at));
        let idle_nodes: Vec<Node> = map.idle_nodes().cloned().collect();
        assert_eq!(
            idle_nodes,
            want[1..].iter().copied().map(at).collect::<Vec<_>>()
        );
        assert_eq!(parsed.unhealthy, vec![at("127.0.0.1:7008")]);
        // Only idle shards: no slot assigned, nothing to route on.
        let none = Reply::Array(vec![shard(&[], vec![node(7006, "master", "online")])]);
        let parsed = parse_shards(&none, "127.0.0.1", false).unwrap();
        assert!(parsed.map.shards.is_empty());
        assert_eq!(parsed.map.idle.len(), 1);
    }

    #[test]
    fn the_online_master_wins_over_a_failed_one_listed_first() {
        let reply = Reply::Array(vec![shard(
            &[0, 16383],
            vec![node(7000, "master", "fail"), node(7003, "master", "online")],
        )]);
        let parsed = parse_shards(&reply, "127.0.0.1", false).unwrap();
        assert_eq!(parsed.map.shards[0].master, at("127.0.0.1:7003"));
        assert_eq!(parsed.map.shards[0].replicas, vec![at("127.0.0.1:7000")]);
        assert_eq!(parsed.unhealthy, vec![at("127.0.0.1:7000")]);
    }

    #[test]
    fn endpoint_port_and_tls_port() {
        let fields = |endpoint: &str| {
            Reply::Array(vec![
                s("port"),
                Reply::Integer(7000),
                s("tls-port"),
                Reply::Integer(7100),
                s("ip"),
                s("10.0.0.5"),
                s("endpoint"),
                s(endpoint),
                s("role"),
                s("master"),
                s("health"),
                s("online"),
            ])
        };
        let map = |endpoint, tls| {
            let reply = Reply::Array(vec![shard(&[0, 16383], vec![fields(endpoint)])]);
            parse_shards(&reply, "10.0.0.1", tls).unwrap().map.shards[0]
                .master
                .clone()
        };
        assert_eq!(map("Redis-A.example", false), at("redis-a.example:7000"));
        assert_eq!(map("Redis-A.example", true), at("redis-a.example:7100"));
        // An unknown endpoint ("?"): the ip.
        assert_eq!(map("?", false), at("10.0.0.5:7000"));
    }

    #[test]
    fn errors_and_garbage() {
        let refused = Reply::Error("ERR unknown subcommand 'SHARDS'".into());
        assert_eq!(
            parse_shards(&refused, "h", false).unwrap_err(),
            "CLUSTER SHARDS: ERR unknown subcommand 'SHARDS'"
        );
        assert!(parse_shards(&Reply::Integer(1), "h", false).is_err());
        let odd = Reply::Array(vec![shard(&[0], vec![node(7000, "master", "online")])]);
        assert!(parse_shards(&odd, "h", false).is_err());
        let out = Reply::Array(vec![shard(
            &[0, 16384],
            vec![node(7000, "master", "online")],
        )]);
        assert!(parse_shards(&out, "h", false).is_err());
        let no_port = Reply::Array(vec![shard(
            &[0, 1],
            vec![Reply::Array(vec![s("role"), s("master")])],
        )]);
        assert!(parse_shards(&no_port, "h", false).is_err());
        // No master (all failed over away): the shard is left out.
        let orphan = Reply::Array(vec![shard(&[0, 1], vec![node(7003, "replica", "online")])]);
        assert!(parse_shards(&orphan, "h", false)
            .unwrap()
            .map
            .shards
            .is_empty());
    }

    /// A reply naming thousands of nodes (hostile or broken) is refused.
    #[test]
    fn too_many_nodes_or_shards_are_refused() {
        use super::super::map::MAX_MAP_NODES;
        let many = Reply::Array(
            (0..4)
                .map(|i| {
                    let master = node(1 + i, "master", "online");
                    let replicas =
                        (0..1100).map(|r| node(1000 + i * 1100 + r, "replica", "online"));
                    shard(&[i, i], std::iter::once(master).chain(replicas).collect())
                })
                .collect(),
        );
        let err = parse_shards(&many, "h", false).unwrap_err();
        assert_eq!(
            err,
            format!("CLUSTER SHARDS: more than {MAX_MAP_NODES} nodes")
        );
        let shards = Reply::Array(
            (0..=SLOTS as i64)
                .map(|i| shard(&[0, 0], vec![node(1 + i % 3, "master", "online")]))
                .collect(),
        );
        let err = parse_shards(&shards, "h", false).unwrap_err();
        assert_eq!(err, format!("CLUSTER SHARDS: more than {SLOTS} shards"));
    }
}
