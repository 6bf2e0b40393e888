//! A server removed for good (Sentinel discovery no longer reports it):
//! each worker closes its idle private connection to it at its next lease,
//! rather than keep it until VCL cold or the budget evicts it.
use super::*;
use crate::connection::private::{Owner, PrivateConnections};
use std::sync::{mpsc, Weak};

/// Clients of `redis` other than the `CLIENT LIST` asking, once it
/// counts `want` (a close reaches the server a moment after it), or after
/// 2 s.
fn clients_settle_at(redis: &RedisProcess, want: usize) -> usize {
    let until = Instant::now() + Duration::from_secs(2);
    loop {
        let count = redis
            .cli(&["CLIENT", "LIST"])
            .lines()
            .count()
            .saturating_sub(1);
        if count == want || Instant::now() >= until {
            return count;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A read (`master = false`): a replica first.
fn read(db: &Database) -> Reply {
    let mut command = Command::new(b"GET");
    command.push(b"k");
    db.execute(
        &mut command,
        false,
        &mut TaskConnection::default(),
        &mut |_| {},
    )
    .expect("read")
}

#[test]
fn workers_close_their_connections_to_a_removed_replica_at_their_next_lease() {
    let (master, replica) = (RedisProcess::start(&[]), RedisProcess::start(&[]));
    let db = database(&master, |args| args.shared_connections = false);
    let at: Location = replica.location().parse().unwrap();
    db.add_discovered(&at, Role::Slave).unwrap();
    let (to_worker, worker_gets) = mpsc::channel::<()>();
    let (to_main, main_gets) = mpsc::channel::<()>();
    std::thread::scope(|scope| {
        // Moved in: a failed check drops the sender, and the worker ends.
        let to_worker = to_worker;
        // Another worker thread, with a list of its own.
        let (db, to_main) = (&db, to_main);
        scope.spawn(move || {
            for _ in 0..2 {
                if worker_gets.recv().is_err() {
                    return;
                }
                read(db);
                to_main.send(()).unwrap();
            }
            // Alive (its list kept) until the end.
            let _ = worker_gets.recv();
        });
        read(db);
        to_worker.send(()).unwrap();
        main_gets.recv().unwrap();
        assert_eq!(clients_settle_at(&replica, 2), 2);
        assert!(db.remove_discovered(&at));
        // Nobody leased since: still open.
        assert_eq!(clients_settle_at(&replica, 2), 2);
        // This thread's next lease (on the master) closes its own.
        read(db);
        assert_eq!(clients_settle_at(&replica, 1), 1);
        to_worker.send(()).unwrap();
        main_gets.recv().unwrap();
        assert_eq!(clients_settle_at(&replica, 0), 0);
        to_worker.send(()).unwrap();
    });
    // Reported again: back under its id, used as before.
    db.add_discovered(&at, Role::Slave).unwrap();
    read(&db);
    read(&db);
    assert_eq!(clients_settle_at(&replica, 1), 1);
}

/// A connection leased before its server was retired, given back after,
/// is closed; once the server is reinstated (added back under its id),
/// connections are kept again.
#[test]
fn a_connection_given_back_to_a_retired_server_is_closed() {
    let redis = RedisProcess::start(&[]);
    let connector = database(&redis, |_| {}).connector(&redis.location().parse().unwrap());
    let connect = || connector.connect(&Stats::default()).unwrap();
    let lists = PrivateConnections::default();
    let owner = Owner { db: 1, server: 0 };
    let other = Owner { db: 1, server: 1 };
    lists.give_back(owner, Weak::new(), connect(), 4);
    lists.give_back(other, Weak::new(), connect(), 4);
    let leased = connect();
    assert_eq!(clients_settle_at(&redis, 3), 3);
    lists.retire(owner);
    lists.retire(owner);
    lists.give_back(owner, Weak::new(), leased, 4);
    // The idle one and the one given back are closed; the other server's
    // is kept.
    assert_eq!(clients_settle_at(&redis, 1), 1);
    assert!(lists.take(owner).is_none());
    assert!(lists.take(other).is_some());
    lists.reinstate(owner);
    lists.give_back(owner, Weak::new(), connect(), 4);
    assert!(lists.take(owner).is_some());
}

/// A redis-server on a TCP port too (a cluster node is never a UNIX
/// socket), and that address.
fn on_tcp() -> (RedisProcess, Location) {
    let port = crate::testing::free_port();
    let redis = RedisProcess::start(&["--port", &port]);
    (redis, format!("127.0.0.1:{port}").parse().unwrap())
}

/// A cluster database (private connections) whose map gives every slot
/// to `node`, and a server learnt from a redirection to `learnt`, to
/// which this thread holds an idle connection.
fn cluster_with_learnt(node: &Location, learnt: &(RedisProcess, Location)) -> Database {
    let seed = node.to_string();
    let args = DbArgs {
        location: &seed,
        role: "cluster",
        shared_connections: false,
        max_connections: 4,
        ..DbArgs::default()
    };
    // The plain server refuses CLUSTER SLOTS at load: the map is given.
    let db = Database::new("c", DbConfig::from_args(&args).unwrap()).unwrap();
    apply_map_of(&db, node);
    let target = db.cluster_node(&Ok(learnt.1.clone())).expect("a server");
    ping(&db, &target);
    assert_eq!(clients_settle_at(&learnt.0, 1), 1);
    db
}

/// A discovery's map: every slot on `node`.
fn apply_map_of(db: &Database, node: &Location) {
    let Location::Tcp { host, port } = node else {
        panic!("a TCP location");
    };
    let reply = Reply::Array(vec![Reply::Array(vec![
        Reply::Integer(0),
        Reply::Integer(16383),
        Reply::Array(vec![
            Reply::String(host.as_bytes().to_vec()),
            Reply::Integer(i64::from(*port)),
        ]),
    ])]);
    db.apply_slots(crate::cluster::parse_slots(&reply, host).unwrap());
}

/// A `PING` to `server` on a leased connection, given back after.
fn ping(db: &Database, server: &Arc<Server>) {
    let timeout = Some(Duration::from_secs(2));
    let mut lease = db.lease(server, false, None, timeout).expect("a lease");
    let reply = lease.request(b"*1\r\n$4\r\nPING\r\n", timeout);
    assert_eq!(reply.expect("PONG"), Reply::Status("PONG".into()));
}

/// The slot map's one node, leased: this thread catches up with the
/// retirements.
fn ping_the_map_node(db: &Database) {
    let topology = db.topology();
    ping(db, &topology.servers[0]);
}

#[test]
fn a_discovery_drops_a_learnt_server_and_closes_its_private_connections() {
    let (_node, at) = on_tcp();
    let learnt = on_tcp();
    let db = cluster_with_learnt(&at, &learnt);
    assert_eq!(db.topology().servers.len(), 2);
    // The map read again, which does not name it.
    apply_map_of(&db, &at);
    assert_eq!(db.topology().servers.len(), 1);
    ping_the_map_node(&db);
    assert_eq!(clients_settle_at(&learnt.0, 0), 0);
}

#[test]
fn a_learnt_server_past_the_bound_is_dropped_and_its_private_connections_closed() {
    let (_node, at) = on_tcp();
    let learnt = on_tcp();
    let db = cluster_with_learnt(&at, &learnt);
    // Targets never contacted: only learnt.
    for port in 1..=super::discovery::MAX_LEARNT as u16 {
        let to = format!("127.0.0.1:{port}").parse().unwrap();
        db.cluster_node(&Ok(to)).expect("a server");
    }
    let topology = db.topology();
    assert_eq!(topology.servers.len(), 1 + super::discovery::MAX_LEARNT);
    assert!(topology.by_location(&learnt.1).is_none(), "the oldest went");
    ping_the_map_node(&db);
    assert_eq!(clients_settle_at(&learnt.0, 0), 0);
}

/// The retired servers remembered are the last `MAX_RETIRED`: a cluster's
/// servers get a new id each time they come, and every worker copies the
/// list. The oldest one forgotten is kept again; the newest still not.
#[test]
fn the_oldest_retired_server_is_forgotten_past_the_bound() {
    use crate::connection::private::MAX_RETIRED;

    let redis = RedisProcess::start(&[]);
    let connector = database(&redis, |_| {}).connector(&redis.location().parse().unwrap());
    let connect = || connector.connect(&Stats::default()).unwrap();
    let lists = PrivateConnections::default();
    let owner = |server| Owner { db: 1, server };
    for server in 0..=MAX_RETIRED as u32 {
        lists.retire(owner(server));
    }
    lists.give_back(owner(0), Weak::new(), connect(), 4);
    assert!(lists.take(owner(0)).is_some(), "forgotten");
    lists.give_back(owner(MAX_RETIRED as u32), Weak::new(), connect(), 4);
    assert!(lists.take(owner(MAX_RETIRED as u32)).is_none());
}
