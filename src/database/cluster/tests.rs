use super::*;
use std::time::Duration;

use crate::cluster::parse_slots;
use crate::config::{Location, Role};
use crate::connection::ManageConnection;

fn server(id: u32, port: u16, role: Role) -> Arc<Server> {
    server_at(id, &format!("127.0.0.1:{port}"), role)
}

fn server_at(id: u32, location: &str, role: Role) -> Arc<Server> {
    Arc::new(Server::for_test(id, location, role))
}

/// `READONLY` when a connection is checked out (leased, or driven on a
/// multiplexed connection): to a cluster replica only, once per
/// connection, and the connection comes back usable.
#[test]
fn readonly_goes_on_a_cluster_replica_connection_once() {
    use crate::config::{DbArgs, DbConfig};
    use crate::testing::RedisProcess;

    // A cluster node (no slots needed for READONLY) whose bus port is
    // free: the default, its port + 10000, is not with `--port 0`.
    let bus = crate::testing::free_port();
    let redis = RedisProcess::start(&["--cluster-enabled", "yes", "--cluster-port", &bus]);
    let config = |role| {
        DbConfig::from_args(&DbArgs {
            role,
            ..DbArgs::default()
        })
        .expect("valid config")
    };
    let cluster = Database::new("c", config("cluster")).expect("database");
    let standalone = Database::new("s", config("master")).expect("database");
    let readonly_calls = || {
        let stats = redis.cli(&["INFO", "commandstats"]);
        stats
            .lines()
            .find_map(|line| line.strip_prefix("cmdstat_readonly:calls="))
            .map_or(0, |rest| rest.split(',').next().unwrap().parse().unwrap())
    };
    let timeout = Some(Duration::from_secs(5));
    let location: Location = redis.location().parse().unwrap();
    let replica = cluster.new_server(&location, Role::Slave);
    let master = cluster.new_server(&location, Role::Master);
    let standalone_replica = standalone.new_server(&location, Role::Slave);
    let prepared = |server: &Server| {
        let conn = server.connect(None, timeout).unwrap();
        server.prepare(conn, timeout, None).unwrap()
    };

    let conn = prepared(&replica);
    assert!(conn.prepared().readonly());
    assert_eq!(readonly_calls(), 1);
    let mut conn = replica.prepare(conn, timeout, None).unwrap();
    assert_eq!(readonly_calls(), 1, "not twice on one connection");
    let ping = conn.request(b"*1\r\n$4\r\nPING\r\n", timeout).unwrap();
    assert_eq!(ping, Reply::Status("PONG".into()));

    assert!(!prepared(&master).prepared().readonly());
    assert!(!prepared(&standalone_replica).prepared().readonly());
    assert_eq!(
        readonly_calls(),
        1,
        "none to a master, none outside a cluster"
    );
}

/// Two shards: slots 0-8191 on 7000 (replica 7002), the rest on 7001
/// (replica 7003).
fn topology() -> Topology {
    let node = |port: i64| {
        Reply::Array(vec![
            Reply::String(b"127.0.0.1".to_vec()),
            Reply::Integer(port),
        ])
    };
    let reply = Reply::Array(vec![
        Reply::Array(vec![
            Reply::Integer(0),
            Reply::Integer(8191),
            node(7000),
            node(7002),
        ]),
        Reply::Array(vec![
            Reply::Integer(8192),
            Reply::Integer(16383),
            node(7001),
            node(7003),
        ]),
    ]);
    let map = parse_slots(&reply, "127.0.0.1").unwrap();
    let servers = vec![
        server(0, 7000, Role::Master),
        server(1, 7001, Role::Master),
        server(2, 7002, Role::Slave),
        server(3, 7003, Role::Slave),
    ];
    let slots = map.map(|node| {
        let at = node.unwrap();
        servers.iter().position(|s| *s.location() == at).unwrap()
    });
    Topology {
        servers,
        slots: Some(Arc::new(slots)),
    }
}

fn routed(topology: &Topology, key: Option<&[u8]>, master_only: bool, attempt: u32) -> String {
    route(
        topology,
        key.map(crate::cluster::key_slot),
        master_only,
        attempt,
    )
    .unwrap()
    .location()
    .to_string()
}

#[test]
fn writes_go_to_the_master_of_the_key_slot() {
    let topology = topology();
    // "bar" is slot 5061, "foo" 12182.
    assert_eq!(routed(&topology, Some(b"bar"), true, 0), "127.0.0.1:7000");
    assert_eq!(routed(&topology, Some(b"foo"), true, 0), "127.0.0.1:7001");
    assert_eq!(
        routed(&topology, Some(b"x{bar}"), true, 3),
        "127.0.0.1:7000"
    );
}

#[test]
fn reads_go_to_the_replica_then_the_master() {
    let topology = topology();
    assert_eq!(routed(&topology, Some(b"bar"), false, 0), "127.0.0.1:7002");
    assert_eq!(routed(&topology, Some(b"bar"), false, 1), "127.0.0.1:7000");
    assert_eq!(routed(&topology, Some(b"foo"), false, 0), "127.0.0.1:7003");
    // A sick replica: its master first.
    topology.servers[3].health.mark_failed();
    assert_eq!(routed(&topology, Some(b"foo"), false, 0), "127.0.0.1:7001");
}

#[test]
fn a_moved_agrees_with_the_map_when_it_names_the_slot_master() {
    let mut topology = topology();
    assert!(map_agrees(
        &topology,
        0,
        &Ok("127.0.0.1:7000".parse().unwrap())
    ));
    assert!(map_agrees(
        &topology,
        16383,
        &Ok("127.0.0.1:7001".parse().unwrap())
    ));
    assert!(!map_agrees(
        &topology,
        0,
        &Ok("127.0.0.1:7001".parse().unwrap())
    ));
    assert!(
        !map_agrees(&topology, 0, &Ok("127.0.0.1:7002".parse().unwrap())),
        "the replica is not where a MOVED sends"
    );
    topology.slots = None;
    assert!(!map_agrees(
        &topology,
        0,
        &Ok("127.0.0.1:7000".parse().unwrap())
    ));
}

#[test]
fn the_map_names_its_masters_and_replicas_only() {
    let mut topology = topology();
    let named = |topology: &Topology, at: &str| map_names(topology, &Ok(at.parse().unwrap()));
    assert!(named(&topology, "127.0.0.1:7000"));
    assert!(named(&topology, "127.0.0.1:7003"));
    assert!(!named(&topology, "127.0.0.1:7004"));
    // A server learnt from a redirection is no node of the map.
    topology.servers.push(server(4, 7004, Role::Master));
    assert!(!named(&topology, "127.0.0.1:7004"));
    topology.slots = None;
    assert!(!named(&topology, "127.0.0.1:7000"));
}

#[test]
fn only_a_lone_multi_and_what_ends_it_at_once_are_replied_here() {
    let ok = Some(Reply::Status("OK".into()));
    assert_eq!(held_reply(Effect::Multi, false), ok);
    assert_eq!(held_reply(Effect::Discard, true), ok);
    assert_eq!(held_reply(Effect::Exec, true), Some(Reply::Array(vec![])));
    // Sent: nested MULTI (Redis's error), EXEC / DISCARD without MULTI
    // (its error), any other command.
    assert_eq!(held_reply(Effect::Multi, true), None);
    for effect in [Effect::Exec, Effect::Discard, Effect::None, Effect::Watch] {
        assert_eq!(held_reply(effect, false), None, "{effect:?}");
    }
    for effect in [Effect::None, Effect::Watch, Effect::Reset, Effect::Quit] {
        assert_eq!(held_reply(effect, true), None, "{effect:?}");
    }
}

#[test]
fn without_a_key_or_a_map_any_node() {
    let mut topology = topology();
    let any = routed(&topology, None, true, 0);
    assert!(any == "127.0.0.1:7000" || any == "127.0.0.1:7001", "{any}");
    topology.slots = None;
    let any = routed(&topology, Some(b"bar"), true, 0);
    assert!(any == "127.0.0.1:7000" || any == "127.0.0.1:7001", "{any}");
    topology.servers.clear();
    assert!(route(&topology, Some(0), true, 0).is_none());
}

/// A shard that serves no slot yet (7004, replica 7005): its nodes
/// are the map's, but no command goes to them, keyless ones included.
#[test]
fn nodes_of_a_shard_without_slots_get_no_command() {
    let mut topology = topology();
    topology.servers.push(server(4, 7004, Role::Master));
    topology.servers.push(server(5, 7005, Role::Slave));
    let mut slots = crate::cluster::SlotMap::clone(topology.slots.as_ref().unwrap());
    let mut idle = slots.shards[0].clone();
    (idle.master, idle.replicas) = (4, vec![5]);
    slots.idle.push(idle);
    topology.slots = Some(Arc::new(slots));
    assert!(map_names(&topology, &Ok("127.0.0.1:7004".parse().unwrap())));
    assert!(map_names(&topology, &Ok("127.0.0.1:7005".parse().unwrap())));
    assert!(!map_agrees(
        &topology,
        0,
        &Ok("127.0.0.1:7004".parse().unwrap())
    ));
    // Every node serving slots is reached by some keyless attempt.
    let mut reached = std::collections::BTreeSet::new();
    for attempt in 0..32 {
        for master_only in [true, false] {
            reached.insert(routed(&topology, None, master_only, attempt));
        }
        reached.insert(routed(&topology, Some(b"bar"), false, attempt));
        reached.insert(routed(&topology, Some(b"foo"), true, attempt));
    }
    let want = [
        "127.0.0.1:7000",
        "127.0.0.1:7001",
        "127.0.0.1:7002",
        "127.0.0.1:7003",
    ];
    assert_eq!(reached.iter().collect::<Vec<_>>(), want);
}
