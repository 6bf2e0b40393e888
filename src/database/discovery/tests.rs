use super::*;
use crate::config::{DbArgs, DbConfig};
use crate::protocol::Reply;

/// A cluster database whose seed is `[::1]:7000` (never contacted).
fn cluster_db() -> Database {
    let config = DbConfig::from_args(&DbArgs {
        location: "[::1]:7000",
        role: "cluster",
        ..DbArgs::default()
    })
    .expect("valid config");
    Database::new("c", config).expect("database")
}

/// The locations of a topology's servers, in order.
fn locations(topology: &Topology) -> Vec<String> {
    topology
        .servers
        .iter()
        .map(|s| s.location().to_string())
        .collect()
}

/// A node of a `CLUSTER SLOTS` range.
fn node(host: &str, port: i64) -> Reply {
    Reply::Array(vec![
        Reply::String(host.as_bytes().to_vec()),
        Reply::Integer(port),
    ])
}

/// A `CLUSTER SLOTS` range served by `master` alone.
fn range(start: i64, end: i64, master: Reply) -> Reply {
    Reply::Array(vec![Reply::Integer(start), Reply::Integer(end), master])
}

/// One node written several ways (by the VCL, `CLUSTER SLOTS`, a
/// `MOVED`) is one server: same id, no new one counted.
#[test]
fn a_node_however_spelled_is_one_server() {
    use crate::cluster::redirection;

    // The map first: with a map read, add_server asks no seed (no
    // lookup of a name that does not resolve).
    let db = cluster_db();
    let ids = |db: &Database| -> Vec<(String, u32)> {
        let topology = db.topology();
        let servers = topology.servers.iter();
        servers.map(|s| (s.location().to_string(), s.id)).collect()
    };
    let reply = Reply::Array(vec![
        range(0, 8191, node("0:0:0:0:0:0:0:1", 7000)),
        range(8192, 16383, node("REDIS-B.EXAMPLE", 7001)),
    ]);
    db.apply_slots(parse_slots(&reply, "::1").unwrap());
    let before = ids(&db);
    assert_eq!(before.len(), 2, "the seed serves its slots: {before:?}");
    db.add_server(
        &"Redis-B.example:7001".parse().unwrap(),
        Role::Cluster,
        &mut |_| {},
    )
    .unwrap();
    assert_eq!(ids(&db), before, "the node of the map, however spelled");
    let Some(crate::cluster::Redirection::Moved { to, .. }) =
        redirection("MOVED 9000 Redis-b.Example:7001", "::1")
    else {
        panic!("a MOVED");
    };
    assert_eq!(db.cluster_node(&to).unwrap().id, before[1].1);
    assert_eq!(ids(&db), before);
    assert_eq!(db.stats().get(Counter::ServersTotal), 2);
}

/// Redirections to ever new addresses: the map's nodes stay, with
/// the slots they serve, and the newest [`MAX_LEARNT`] targets beside
/// them; the next map read drops those it does not name.
#[test]
fn learnt_servers_are_bounded_and_dropped_by_the_next_map() {
    let db = cluster_db();
    let reply = Reply::Array(vec![
        range(0, 8191, node("::1", 7000)),
        range(8192, 16383, node("::1", 7001)),
    ]);
    db.apply_slots(parse_slots(&reply, "::1").unwrap());
    let targets: Vec<Location> = (0..100)
        .map(|n| format!("[::1]:{}", 8000 + n).parse().unwrap())
        .collect();
    for target in &targets {
        let server = db.cluster_node(&Ok(target.clone())).unwrap();
        assert_eq!(server.location(), target);
    }
    let topology = db.topology();
    let located = locations(&topology);
    let newest = targets[100 - MAX_LEARNT..].iter().map(|t| t.to_string());
    let want: Vec<String> = ["[::1]:7000".to_string(), "[::1]:7001".to_string()]
        .into_iter()
        .chain(newest)
        .collect();
    assert_eq!(located, want);
    let master_of = |slot| {
        let shard = topology.slots.as_ref().unwrap().shard_of(slot).unwrap();
        topology.servers[shard.master].location().to_string()
    };
    assert_eq!(master_of(0), "[::1]:7000");
    assert_eq!(master_of(16383), "[::1]:7001");
    assert_eq!(learnt(&topology), (2..2 + MAX_LEARNT).collect::<Vec<_>>());
    // Each server made is counted, as the C VMOD counts every
    // redirection target it adds.
    assert_eq!(db.stats().get(Counter::ServersTotal), 2 + 100);
    db.apply_slots(parse_slots(&reply, "::1").unwrap());
    assert_eq!(db.topology().servers.len(), 2);
    assert!(learnt(&db.topology()).is_empty());
}

/// A shard that serves no slot (`CLUSTER SHARDS` names it): its
/// master and replica are servers (counted, in their roles), named by
/// the map (no learnt server, so never evicted by redirections), and
/// no slot is theirs.
#[test]
fn nodes_of_a_shard_without_slots_are_servers() {
    let db = cluster_db();
    let reply = Reply::Array(vec![range(0, 16383, node("::1", 7000))]);
    let mut map = parse_slots(&reply, "::1").unwrap();
    let mut idle = map.shards[0].clone();
    idle.master = Ok("[::1]:7001".parse().unwrap());
    idle.replicas = vec![Ok("[::1]:7002".parse().unwrap())];
    map.idle.push(idle);
    db.apply_slots(map);
    let topology = db.topology();
    let servers: Vec<(String, Role)> = topology
        .servers
        .iter()
        .map(|s| (s.location().to_string(), s.role()))
        .collect();
    assert_eq!(
        servers,
        [
            ("[::1]:7000".to_string(), Role::Master),
            ("[::1]:7001".to_string(), Role::Master),
            ("[::1]:7002".to_string(), Role::Slave),
        ]
    );
    assert_eq!(db.stats().get(Counter::ServersTotal), 3);
    assert!(learnt(&topology).is_empty());
    let slots = topology.slots.as_ref().unwrap();
    assert!((0..16384).all(|slot| slots.shard_of(slot).unwrap().master == 0));
    for n in 0..2 * MAX_LEARNT {
        let target = format!("[::1]:{}", 8000 + n).parse().unwrap();
        db.cluster_node(&Ok(target)).unwrap();
    }
    let topology = db.topology();
    let kept = |at: &str| topology.by_location(&at.parse().unwrap()).is_some();
    assert!(kept("[::1]:7001") && kept("[::1]:7002"));
    assert_eq!(topology.servers.len(), 3 + MAX_LEARNT);
}

/// A learnt server dropped from the middle of the servers: the map's
/// indexes past it follow.
#[test]
fn a_map_naming_servers_past_the_one_removed_is_shifted() {
    let reply = Reply::Array(vec![Reply::Array(vec![
        Reply::Integer(0),
        Reply::Integer(16383),
        node("::1", 7000),
        node("::1", 7002),
        node("::1", 7003),
    ])]);
    // 7003 has no server.
    let index = |node: Node| match node.unwrap().to_string().as_str() {
        "[::1]:7000" => 0,
        "[::1]:7002" => 2,
        _ => usize::MAX,
    };
    let same = Arc::new(parse_slots(&reply, "::1").unwrap().map(index));
    assert!(Arc::ptr_eq(&shifted(same.clone(), 3), &same));
    let moved = shifted(same, 1);
    assert_eq!(moved.shards[0].master, 0);
    assert_eq!(moved.shards[0].replicas, [1, usize::MAX]);
}

/// A node whose host `Location` refuses gets no server: its slots have
/// none as master, its replicas still serve them.
#[test]
fn a_node_without_a_location_is_left_out() {
    let db = cluster_db();
    let reply = Reply::Array(vec![Reply::Array(vec![
        Reply::Integer(0),
        Reply::Integer(16383),
        node("bad host", 7001),
        node("::1", 7000),
    ])]);
    db.apply_slots(parse_slots(&reply, "::1").unwrap());
    let topology = db.topology();
    let located = locations(&topology);
    assert_eq!(located, ["[::1]:7000"]);
    let shard = topology
        .slots
        .as_ref()
        .unwrap()
        .shard_of(0)
        .unwrap()
        .clone();
    assert_eq!((shard.master, shard.replicas), (usize::MAX, vec![0]));
    assert_eq!(topology.servers[0].role(), Role::Slave);
}

/// A seed that refuses connections, declared in `vcl_init`: asked at
/// once, marked sick, its failure reported; `vcl.load` goes on.
#[test]
fn a_dead_seed_is_known_at_load() {
    use crate::config::{DbArgs, DbConfig, Preference};
    use crate::connection::private::PrivateConnections;

    let config = DbConfig::from_args(&DbArgs {
        location: "127.0.0.1:1",
        role: "cluster",
        ..DbArgs::default()
    })
    .expect("valid config");
    let mut warnings = Vec::new();
    let log = crate::logger::Log::discard();
    let db = Database::with_stats(
        "c",
        config,
        Stats::default(),
        Preference::default(),
        &Arc::new(PrivateConnections::default()),
        &mut |note| {
            if let Note::Warning(text) = note {
                warnings.push(text.to_string());
            }
        },
        &log,
    )
    .expect("loads");
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].starts_with("cluster discovery failed: 127.0.0.1:1: cannot connect"),
        "{warnings:?}"
    );
    let topology = db.topology();
    assert!(topology.slots.is_none());
    assert!(topology.servers[0].health.is_sick(Instant::now()));
    assert_eq!(db.stats().get(Counter::ServersTotal), 1);
    // As the C VMOD: a discovery that fails at load counts as failed
    // only.
    assert_eq!(db.stats().get(Counter::ClusterDiscoveriesFailed), 1);
    assert_eq!(db.stats().get(Counter::ClusterDiscoveriesTotal), 0);
    // The same seed declared again is not asked again.
    db.add_server(&"127.0.0.1:1".parse().unwrap(), Role::Cluster, &mut |_| {})
        .unwrap();
    assert_eq!(db.stats().get(Counter::ClusterDiscoveriesFailed), 1);
}

/// Private mode with fewer `max_connections` than masters is logged;
/// enough connections, or shared mode, is not.
#[test]
fn a_costly_private_setting_is_named() {
    use crate::config::DbArgs;

    let config = |shared_connections, max_connections| {
        DbConfig::from_args(&DbArgs {
            role: "cluster",
            shared_connections,
            max_connections,
            ..DbArgs::default()
        })
        .expect("valid config")
    };
    let text = costly_private_setting(&config(false, 1), 3).expect("costly");
    assert!(
        text.starts_with("private connections (shared_connections=false) with max_connections=1 below the 3 masters"),
        "{text}"
    );
    assert!(costly_private_setting(&config(false, 2), 3).is_some());
    assert!(costly_private_setting(&config(false, 3), 3).is_none());
    assert!(costly_private_setting(&config(true, 1), 3).is_none());
}

/// A node's map is judged against the servers sick when the discovery
/// began: no slots is no map, one naming a sick master is kept only
/// as a last resort, any other is used.
#[test]
fn a_map_is_judged_by_its_slots_and_its_masters_health() {
    let two = Reply::Array(vec![
        range(0, 8191, node("::1", 7000)),
        range(8192, 16383, node("::1", 7001)),
    ]);
    let map = parse_slots(&two, "::1").unwrap();
    let sick: Location = "[::1]:7001".parse().unwrap();
    let replica: Location = "[::1]:7002".parse().unwrap();
    assert_eq!(judge(&map, &[]), Judged::Usable);
    assert_eq!(judge(&map, &[&replica]), Judged::Usable);
    assert_eq!(judge(&map, &[&sick]), Judged::NamesSick);
    let empty = parse_slots(&Reply::Array(Vec::new()), "::1").unwrap();
    assert_eq!(judge(&empty, &[&sick]), Judged::NoSlots);
}
