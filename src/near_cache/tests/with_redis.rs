//! Against a real redis-server: a read is served from the cache until
//! another client writes the key, a flush empties it, and a broken
//! tracking connection drops everything at once and fills again once
//! tracking is back.
use std::time::Instant;

use super::super::replies::has_field_expiry;
use super::super::tracking::Trackers;
use super::*;
use crate::config::{DbArgs, DbConfig};
use crate::database::{Database, TaskConnection};
use crate::protocol::Command;
use crate::server::Server;
use crate::testing::RedisProcess;

fn get(db: &Database, key: &str) -> Reply {
    let mut command = Command::new(b"GET");
    command.push(key.as_bytes());
    db.execute(
        &mut command,
        false,
        &mut TaskConnection::default(),
        &mut |_| {},
    )
    .expect("GET")
}

fn counter(db: &Database, c: Counter) -> u64 {
    db.stats().get(c)
}

/// Waits up to 2 s for `done`.
fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let until = Instant::now() + Duration::from_secs(2);
    while !done() {
        assert!(Instant::now() < until, "{what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn reads_are_kept_until_redis_says_the_key_changed() {
    let redis = RedisProcess::start(&[]);
    let db = Arc::new(near_cache_db(&redis, "master"));
    let (server, trackers) = tracking(&db);
    let tracked = || server.promise.is_made() && server.promise.is_proven();

    redis.cli(&["SET", "k", "v1"]);
    // Kept at the second miss (with its PTTL), served at the third.
    assert_eq!(get(&db, "k"), s("v1"));
    assert_eq!(get(&db, "k"), s("v1"));
    let sent = counter(&db, Counter::CommandsTotal);
    assert_eq!(get(&db, "k"), s("v1"));
    assert_eq!(
        counter(&db, Counter::CommandsTotal),
        sent,
        "a hit sends nothing"
    );
    assert_eq!(counter(&db, Counter::NearCacheHits), 1);

    // Another client writes: the next reads see it once Redis told us.
    redis.cli(&["SET", "k", "v2"]);
    eventually("invalidated", || get(&db, "k") == s("v2"));
    assert!(counter(&db, Counter::NearCacheInvalidations) >= 1);
    eventually("kept again", || {
        get(&db, "k");
        counter(&db, Counter::NearCacheEntries) == 1
    });

    // A flush drops everything.
    redis.cli(&["FLUSHALL"]);
    eventually("flushed", || counter(&db, Counter::NearCacheEntries) == 0);
    assert_eq!(get(&db, "k"), Reply::Nil);

    // The tracking connection killed: everything goes at once, and
    // the cache fills again once tracking is back.
    redis.cli(&["SET", "k", "v3"]);
    eventually("kept", || {
        get(&db, "k");
        counter(&db, Counter::NearCacheEntries) == 1
    });
    let clients = redis.cli(&["CLIENT", "LIST"]);
    let id = clients
        .lines()
        .find(|line| line.contains("flags=t"))
        .and_then(|line| line.split_whitespace().next())
        .and_then(|field| field.strip_prefix("id="))
        .expect("the tracking client")
        .to_string();
    redis.cli(&["CLIENT", "KILL", "ID", &id]);
    eventually("dropped", || counter(&db, Counter::NearCacheEntries) == 0);
    eventually("tracked again", tracked);
    assert_eq!(get(&db, "k"), s("v3"));
    eventually("kept after tracking is back", || {
        get(&db, "k");
        counter(&db, Counter::NearCacheEntries) == 1
    });

    // Stopped: untracked, emptied, within a second.
    let started = Instant::now();
    drop(trackers);
    assert!(started.elapsed() < Duration::from_secs(1));
    assert!(!tracked());
    assert_eq!(counter(&db, Counter::NearCacheEntries), 0);
}

/// `MGET` of several keys is kept, and another client's write of any
/// of them is seen once Redis told us.
#[test]
fn several_keys_are_kept_until_any_of_them_changes() {
    let redis = RedisProcess::start(&[]);
    let db = Arc::new(near_cache_db(&redis, "master"));
    let (_server, _trackers) = tracking(&db);
    let task = &mut TaskConnection::default();
    redis.cli(&["MSET", "a", "1", "b", "2"]);
    let both = || Reply::Array(vec![s("1"), s("2")]);
    assert_eq!(run(&db, task, &["MGET", "a", "b"]), both());
    assert_eq!(run(&db, task, &["MGET", "a", "b"]), both());
    let sent = counter(&db, Counter::CommandsTotal);
    assert_eq!(run(&db, task, &["MGET", "a", "b"]), both());
    assert_eq!(counter(&db, Counter::CommandsTotal), sent, "a hit");
    redis.cli(&["SET", "b", "3"]);
    eventually("invalidated", || {
        run(&db, task, &["MGET", "a", "b"]) == Reply::Array(vec![s("1"), s("3")])
    });
}

/// A database of one server, `redis` declared `role`, with a near
/// cache of 1 MiB.
fn near_cache_db(redis: &RedisProcess, role: &str) -> Database {
    let location = redis.location();
    let config = DbConfig::from_args(&DbArgs {
        location: &location,
        role,
        near_cache: 1 << 20,
        ..DbArgs::default()
    })
    .unwrap();
    Database::new("db", config).unwrap()
}

/// The tracking threads of `db`, started, and its server once tracked.
fn tracking(db: &Arc<Database>) -> (Arc<Server>, Trackers) {
    let server = db.topology().servers[0].clone();
    let log = crate::logger::Log::to(|_, line| eprintln!("{line}"));
    let trackers = Trackers::start(vec![db.clone()], log).unwrap().unwrap();
    eventually("tracking on", || {
        server.promise.is_made() && server.promise.is_proven()
    });
    (server, trackers)
}

/// A database with a near cache on `redis`, its server marked tracked
/// with no tracking connection: no invalidation ever comes, so what
/// a test sees is the cache's own doing.
fn marked_tracked(redis: &RedisProcess) -> Database {
    let db = near_cache_db(redis, "master");
    let info = Reply::String(redis.cli(&["INFO", "server"]).into_bytes());
    let identity = crate::server::run_id(&info).expect("a run_id");
    let promise = &db.topology().servers[0].promise;
    promise.made(Some(identity.into()), has_field_expiry(&info));
    promise.proven(Instant::now() + Duration::from_secs(3600));
    db
}

fn run(db: &Database, task: &mut TaskConnection, args: &[&str]) -> Reply {
    let mut command = Command::new(args[0].as_bytes());
    for arg in &args[1..] {
        command.push(arg.as_bytes());
    }
    db.execute(&mut command, false, task, &mut |_| {})
        .expect("a reply")
}

/// Our own writes are forgotten as soon as they are answered, without
/// Redis's invalidation (none comes here: the server is marked
/// tracked with no tracking connection), in a transaction at its
/// `EXEC`, and a write without keys forgets everything.
#[test]
fn our_writes_are_seen_by_the_next_read_at_once() {
    let redis = RedisProcess::start(&[]);
    let db = marked_tracked(&redis);
    let task = &mut TaskConnection::default();
    redis.cli(&["SET", "k", "1"]);
    for _ in 0..3 {
        assert_eq!(run(&db, task, &["GET", "k"]), s("1"));
    }
    assert_eq!(counter(&db, Counter::NearCacheHits), 1);
    // Another client's write is not seen: nothing tells us.
    redis.cli(&["SET", "k", "x"]);
    assert_eq!(run(&db, task, &["GET", "k"]), s("1"));

    run(&db, task, &["SET", "k", "2"]);
    assert_eq!(run(&db, task, &["GET", "k"]), s("2"));
    assert_eq!(run(&db, task, &["GET", "k"]), s("2"));
    // Queued: forgotten at EXEC, not before.
    run(&db, task, &["MULTI"]);
    run(&db, task, &["INCR", "k"]);
    assert_eq!(counter(&db, Counter::NearCacheEntries), 1);
    run(&db, task, &["EXEC"]);
    assert_eq!(counter(&db, Counter::NearCacheEntries), 0);
    for _ in 0..2 {
        assert_eq!(run(&db, task, &["GET", "k"]), s("3"));
    }
    // A renamed or unknown command: its first argument.
    assert_eq!(run(&db, task, &["GET", "j"]), Reply::Nil);
    assert_eq!(run(&db, task, &["GET", "j"]), Reply::Nil);
    assert_eq!(counter(&db, Counter::NearCacheEntries), 2);
    run(&db, task, &["NOSUCHCOMMAND", "j"]);
    assert_eq!(counter(&db, Counter::NearCacheEntries), 1);
    // A write without keys: everything.
    run(&db, task, &["FLUSHDB"]);
    assert_eq!(counter(&db, Counter::NearCacheEntries), 0);
    assert_eq!(run(&db, task, &["GET", "k"]), Reply::Nil);
}

/// A key with a TTL is served until it expires, even when Redis has
/// not deleted it yet (active expiry off here: no invalidation comes).
#[test]
fn a_key_is_not_served_past_its_ttl() {
    let redis = RedisProcess::start(&[]);
    let db = marked_tracked(&redis);
    redis.cli(&["DEBUG", "SET-ACTIVE-EXPIRE", "0"]);
    redis.cli(&["SET", "session", "alice", "PX", "400"]);
    redis.cli(&["SET", "forever", "bob"]);
    let task = &mut TaskConnection::default();
    for _ in 0..3 {
        assert_eq!(run(&db, task, &["GET", "session"]), s("alice"));
        assert_eq!(run(&db, task, &["GET", "forever"]), s("bob"));
    }
    assert_eq!(counter(&db, Counter::NearCacheHits), 2);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(run(&db, task, &["GET", "session"]), Reply::Nil);
    assert_eq!(run(&db, task, &["GET", "forever"]), s("bob"));
    assert_eq!(counter(&db, Counter::NearCacheHits), 3);
}

/// A hash field with a TTL of its own (`HPEXPIRE`, Redis 7.4) is not
/// served past it, though it expires with no write and no key TTL
/// (`PTTL` -1) says when; a read of the whole hash is not kept on
/// such a server. On an older server (no field TTLs), both are kept.
#[test]
fn a_hash_field_is_not_served_past_its_ttl() {
    let redis = RedisProcess::start(&[]);
    let db = marked_tracked(&redis);
    redis.cli(&["DEBUG", "SET-ACTIVE-EXPIRE", "0"]);
    redis.cli(&["HSET", "session", "user", "alice", "role", "admin"]);
    let info = Reply::String(redis.cli(&["INFO", "server"]).into_bytes());
    let field_ttls = has_field_expiry(&info);
    if field_ttls {
        let set = redis.cli(&["HPEXPIRE", "session", "400", "FIELDS", "1", "role"]);
        assert!(set.contains('1'), "HPEXPIRE: {set}");
    }
    let task = &mut TaskConnection::default();
    for _ in 0..3 {
        assert_eq!(run(&db, task, &["HGET", "session", "role"]), s("admin"));
        assert_eq!(run(&db, task, &["HLEN", "session"]), Reply::Integer(2));
    }
    let hits = if field_ttls { 1 } else { 2 };
    assert_eq!(
        counter(&db, Counter::NearCacheHits),
        hits,
        "HLEN kept: {}",
        !field_ttls
    );
    if !field_ttls {
        eprintln!("no hash-field TTLs on this server: only the caching was checked");
        return;
    }
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(run(&db, task, &["HGET", "session", "role"]), Reply::Nil);
    assert_eq!(run(&db, task, &["HLEN", "session"]), Reply::Integer(1));
}

/// A command read once is not kept (the doorkeeper): a load of fresh
/// keys costs no `PTTL` and no memory.
#[test]
fn a_command_read_once_is_not_kept() {
    let redis = RedisProcess::start(&[]);
    let db = marked_tracked(&redis);
    let task = &mut TaskConnection::default();
    for i in 0..100 {
        run(&db, task, &["GET", &format!("fresh{i}")]);
    }
    assert_eq!(counter(&db, Counter::CommandsTotal), 100);
    assert_eq!(counter(&db, Counter::NearCacheEntries), 0);
    assert_eq!(counter(&db, Counter::NearCacheMisses), 100);
}

/// A replica that syncs from its master after its reads were kept:
/// with a diskless load that swaps databases, Redis sends no
/// invalidation; the tracking thread sees the replication state change
/// (`INFO replication`) and drops everything.
#[test]
fn a_replica_that_syncs_again_drops_what_it_served() {
    let master_port = crate::testing::free_port();
    let master = RedisProcess::start(&[
        "--port",
        &master_port,
        "--repl-diskless-sync",
        "yes",
        "--repl-diskless-sync-delay",
        "0",
    ]);
    let replica = RedisProcess::start(&["--repl-diskless-load", "swapdb"]);
    let db = Arc::new(near_cache_db(&replica, "slave"));
    let (_server, _trackers) = tracking(&db);
    master.cli(&["SET", "k", "from master"]);
    for _ in 0..3 {
        assert_eq!(get(&db, "k"), Reply::Nil);
    }
    assert_eq!(counter(&db, Counter::NearCacheHits), 1);
    replica.cli(&["REPLICAOF", "127.0.0.1", &master_port]);
    eventually("synced", || replica.cli(&["GET", "k"]) == "from master");
    // Within the poll (1 s) and a reply.
    let until = Instant::now() + Duration::from_secs(3);
    while get(&db, "k") != s("from master") {
        assert!(
            Instant::now() < until,
            "still served the data before the sync"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
