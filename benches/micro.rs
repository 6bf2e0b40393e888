//! Criterion micro-benchmarks of the plain-Rust hot paths, so that a
//! regression there shows without a full system run (`benches/system/`).
//!
//! ```sh
//! cargo bench --bench micro                 # all
//! cargo bench --bench micro -- command/     # a subset (criterion filter)
//! ```
//!
//! * `command/*`: RESP packing of the commands the seeds send
//!   (src/protocol/command.rs), `EVAL` rewritten as `EVALSHA` (SHA-1 included).
//! * `commands/*`: the command model's lookup and decisions
//!   (src/commands/): `decide_*` is what each command pays on the
//!   standalone path, `slot_*` the key extraction of a cluster command.
//! * `reply/*`: RESP parsing straight into a `Reply` (`resp::scan` +
//!   `resp::build`, src/protocol/resp.rs) and `Reply::text()`
//!   (src/protocol/reply.rs).
//! * `stats/*`: one counter bump through `Stats` vs on a bare atomic.
//! * `near_cache/*`: [ext] a near-cache hit, the store alone (its shard's
//!   lock, the lookup, the reply's clone, the counter): `hit_get` of the
//!   one entry kept, `hit_hget_of_3000_fields` of the fields of one hash,
//!   in turn (a key's many entries).
//! * `pool/*`, `roundtrip/*`: need `redis-server` on `PATH`; one is started
//!   on a UNIX socket in a temporary directory (no TCP port; the launcher
//!   of tests/support/redis_server.rs) and killed at the end. `pool/shared_checkout` is a checkout + return of a pool slot
//!   holding a connection (gate, idle list, no I/O); `pool/private_take_give_back` the per-thread
//!   list. `roundtrip/raw_socket_get` is one `GET` on a bare socket (one
//!   write, reads until `resp::scan` sees the whole reply): the floor;
//!   `roundtrip/connection_request_get` the same through `Connection::request`;
//!   `roundtrip/database_execute_get_*` through `Database::execute` (command
//!   build, connection checkout, reply, counters) with private, shared and
//!   [ext] pipelined connections (one worker: what the multiplexer costs a
//!   lone worker). The differences are the
//!   VMOD's own cost per command outside varnishd.
//!   Without redis-server these are skipped with a note.
//!
//! The library is linked as an rlib (Cargo.toml: `crate-type = ["cdylib",
//! "rlib"]`); the FFI layer is private and not pulled into this binary.

use std::hint::black_box;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput};
use vmod_redis::config::{DbArgs, DbConfig, Location, Protocol};
use vmod_redis::connection::private::{Owner, PrivateConnections};
use vmod_redis::connection::shared::SharedPool;
use vmod_redis::connection::{ConnectError, Connection, Connector, ManageConnection};
use vmod_redis::database::{Database, TaskConnection};
use vmod_redis::protocol::resp;
use vmod_redis::protocol::Command;
use vmod_redis::protocol::Reply;
use vmod_redis::stats::Stats;
use vmod_redis::NearCacheBench;

// The launcher of the test harnesses; the bench uses a part of it.
#[allow(dead_code, reason = "each includer uses a part of the shared launcher")]
#[path = "../tests/support/redis_server.rs"]
mod redis_server;
use redis_server::{RedisServer, Waited};

/// The script of the seeds' EVAL (seed 000 / 001), as VCL pushes it.
const SCRIPT: &str = "
            redis.call('SET', KEYS[1], ARGV[1]);
            redis.call('EXPIRE', KEYS[1], ARGV[2]);
        ";

fn set_command() -> Command {
    let mut c = Command::new(b"SET");
    c.push(b"foo");
    c.push(b"Hello world!");
    c
}

fn eval_command() -> Command {
    let mut c = Command::new(b"EVAL");
    c.push(SCRIPT.as_bytes());
    c.push(b"1");
    c.push(b"bar");
    c.push(b"123456789");
    c.push(b"1");
    c
}

fn bench_command(c: &mut Criterion) {
    let mut g = c.benchmark_group("command");
    g.bench_function("set_build_and_pack", |b| {
        b.iter(|| {
            let mut c = set_command();
            black_box(c.packed().len())
        })
    });
    g.bench_function("get_build_and_pack", |b| {
        b.iter(|| {
            let mut c = Command::new(black_box(b"GET"));
            c.push(black_box(b"foo"));
            black_box(c.packed().len())
        })
    });
    g.bench_function("eval_build_and_pack_as_evalsha", |b| {
        b.iter(|| {
            let c = eval_command();
            black_box(c.packed_as_evalsha().map(|v| v.len()))
        })
    });
    g.bench_function("eval_script_sha1_hex", |b| {
        let c = eval_command();
        b.iter(|| black_box(c.script_sha1_hex()))
    });
    let args: Vec<Vec<u8>> = (0..100).map(|i| format!("key:{i}").into_bytes()).collect();
    g.throughput(Throughput::Elements(args.len() as u64));
    g.bench_function("mget_100_args_build_and_pack", |b| {
        b.iter(|| {
            let mut c = Command::new(b"MGET");
            for arg in &args {
                c.push(arg);
            }
            black_box(c.packed().len())
        })
    });
    g.finish();
}

/// The command model's lookup and decisions per command
/// (src/commands/): what every command pays for them.
fn bench_commands(c: &mut Criterion) {
    use vmod_redis::commands::{decide_for_bench, slot_for_bench};
    let mut g = c.benchmark_group("commands");
    let get = {
        let mut c = Command::new(b"get");
        c.push(b"foo");
        c
    };
    g.bench_function("decide_get", |b| {
        b.iter(|| black_box(decide_for_bench(black_box(&get))))
    });
    let eval = eval_command();
    g.bench_function("decide_eval", |b| {
        b.iter(|| black_box(decide_for_bench(black_box(&eval))))
    });
    let mut client = Command::new(b"CLIENT");
    client.push(b"getname");
    g.bench_function("decide_client_getname", |b| {
        b.iter(|| black_box(decide_for_bench(black_box(&client))))
    });
    g.bench_function("slot_get", |b| {
        b.iter(|| black_box(slot_for_bench(black_box(&get))))
    });
    let mut mset = Command::new(b"MSET");
    for i in 0..8 {
        mset.push(format!("{{t}}k{i}").as_bytes());
        mset.push(b"v");
    }
    g.bench_function("slot_mset_8_keys", |b| {
        b.iter(|| black_box(slot_for_bench(black_box(&mset))))
    });
    g.finish();
}

fn bench_reply(c: &mut Criterion) {
    let mut g = c.benchmark_group("reply");
    let mut array = b"*100\r\n".to_vec();
    for i in 0..100 {
        let v = format!("value:{i}");
        array.extend_from_slice(format!("${}\r\n{v}\r\n", v.len()).as_bytes());
    }
    let mut map = b"%10\r\n".to_vec();
    for i in 0..10 {
        map.extend_from_slice(format!("+k{i}\r\n:{i}\r\n").as_bytes());
    }
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("parse_status_ok", b"+OK\r\n".to_vec()),
        ("parse_nil", b"$-1\r\n".to_vec()),
        ("parse_integer", b":42\r\n".to_vec()),
        ("parse_bulk_12B", b"$12\r\nHello world!\r\n".to_vec()),
        ("parse_array_100_bulk", array),
        ("parse_resp3_map_10", map),
        (
            "parse_error",
            b"-NOSCRIPT No matching script. Please use EVAL.\r\n".to_vec(),
        ),
    ];
    for (name, wire) in cases {
        assert_eq!(resp::scan(&wire).ok().flatten(), Some(wire.len()), "{name}");
        g.bench_function(name, |b| {
            b.iter(|| {
                let wire = black_box(&wire[..]);
                let len = resp::scan(wire).ok().flatten().unwrap_or(0);
                black_box(resp::build(&wire[..len]).is_ok())
            })
        });
    }
    let texts = [
        ("text_string", Reply::String(b"Hello world!".to_vec())),
        ("text_status", Reply::Status("OK".to_owned())),
        ("text_integer", Reply::Integer(-1234567890)),
        ("text_double", Reply::Double(1234.5678)),
    ];
    for (name, reply) in texts {
        g.bench_function(name, |b| {
            b.iter(|| black_box(black_box(&reply).text().map(|t| t.len())))
        });
    }
    g.finish();
}

/// A redis-server on a UNIX socket in a fresh directory (no TCP port),
/// started by the launcher every harness shares; killed on drop.
struct Redis {
    // Held for its drop.
    _server: RedisServer,
    sock: PathBuf,
}

impl Redis {
    fn start() -> Option<Redis> {
        let (server, waited) = RedisServer::start_on_socket("micro", None, &[]).ok()?;
        let sock = server.socket.clone()?;
        let redis = Redis {
            _server: server,
            sock,
        };
        matches!(waited, Waited::Ready).then_some(redis)
    }
}

fn connector(sock: &Path) -> Connector {
    Connector::new(
        &Location::Unix(sock.to_path_buf()),
        None,
        None,
        Protocol::Default,
        Some(Duration::from_secs(1)),
        None,
    )
}

/// How the benchmarked database keeps its connections.
#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Private,
    Shared,
    /// [ext] `pipelining=true` on one multiplexed connection.
    Pipelined,
}

fn database(sock: &Path, mode: Mode) -> Database {
    let location = sock.to_string_lossy();
    let config = DbConfig::from_args(&DbArgs {
        location: &location,
        shared_connections: mode != Mode::Private,
        max_connections: match mode {
            Mode::Private | Mode::Pipelined => 1,
            Mode::Shared => 10,
        },
        pipelining: mode == Mode::Pipelined,
        ..DbArgs::default()
    })
    .expect("config");
    Database::new("bench", config).expect("database")
}

/// Opens with the connector and takes idle connections back as they are:
/// the pool's own cost, nothing of a database's checks.
struct Reuse<'a> {
    connector: &'a Connector,
    stats: &'a Stats,
}

impl ManageConnection for Reuse<'_> {
    type Error = ConnectError;

    fn connect(
        &self,
        _deadline: Option<Instant>,
        _timeout: Option<Duration>,
    ) -> Result<Connection, ConnectError> {
        self.connector.connect(self.stats)
    }

    fn is_usable(&self, _conn: &mut Connection, _now: Instant) -> bool {
        true
    }

    fn prepare(
        &self,
        conn: Connection,
        _timeout: Option<Duration>,
        _deadline: Option<Instant>,
    ) -> Result<Connection, ConnectError> {
        Ok(conn)
    }
}

fn bench_with_redis(c: &mut Criterion, redis: &Redis) {
    let stats = Arc::new(Stats::default());
    let mut g = c.benchmark_group("pool");
    {
        let connector = connector(&redis.sock);
        let pool = Arc::new(SharedPool::new(connector.location().to_string(), 10));
        // The first checkout connects; the benchmark reuses that connection.
        let reuse = Reuse {
            connector: &connector,
            stats: &stats,
        };
        drop(
            pool.get(&stats, &reuse, None, None)
                .expect("first checkout"),
        );
        g.bench_function("shared_checkout_return", |b| {
            b.iter(|| {
                black_box(
                    pool.get(&stats, &reuse, None, None)
                        .map(|mut lease| lease.conn().is_broken()),
                )
            })
        });
    }
    {
        let private = PrivateConnections::default();
        let owner = Owner { db: 0, server: 0 };
        let conn = connector(&redis.sock).connect(&stats).expect("connect");
        private.give_back(owner, Weak::new(), conn, 1);
        g.bench_function("private_take_give_back", |b| {
            b.iter(|| {
                let conn = private.take(owner).expect("idle connection");
                private.give_back(owner, Weak::new(), black_box(conn), 1);
            })
        });
    }
    g.finish();

    let mut g = c.benchmark_group("roundtrip");
    let mut get = Command::new(b"GET");
    get.push(b"foo");
    let packed = get.packed().to_vec();
    {
        // The floor: one write and reads until the reply is complete, on a
        // plain socket, nothing else.
        let mut sock = UnixStream::connect(&redis.sock).expect("raw connection");
        let mut buf = vec![0u8; 4096];
        g.bench_function("raw_socket_get", |b| {
            b.iter(|| {
                sock.write_all(&packed).expect("write");
                let mut end = 0;
                loop {
                    let n = sock.read(&mut buf[end..]).expect("read");
                    assert!(n > 0, "redis closed the connection");
                    end += n;
                    if let Ok(Some(len)) = resp::scan(&buf[..end]) {
                        break black_box(len);
                    }
                }
            })
        });
    }
    {
        let mut conn = connector(&redis.sock)
            .connect(&Stats::default())
            .expect("connect");
        g.bench_function("connection_request_get", |b| {
            b.iter(|| black_box(conn.request(&packed, None).is_ok()))
        });
    }
    // A lone worker: what the pool or the multiplexer costs it per command.
    for (name, mode) in [
        ("database_execute_get_private", Mode::Private),
        ("database_execute_get_shared", Mode::Shared),
        ("database_execute_get_pipelined", Mode::Pipelined),
    ] {
        let db = database(&redis.sock, mode);
        let mut task = TaskConnection::default();
        g.bench_function(name, |b| {
            b.iter(|| {
                let mut c = Command::new(b"GET");
                c.push(b"foo");
                black_box(db.execute(&mut c, true, &mut task, &mut |_| {}).is_ok())
            })
        });
    }
    g.finish();
}

/// A command bumps two to four counters. `stats/inc` is one bump through
/// [`Stats`] (its memory behind a trait object: the object's own, or the
/// varnishstat segment in varnishd); `stats/inc_plain_atomic` the same add
/// on a bare atomic, which is what counting cost before the counters moved
/// into varnishstat: the difference is what that move added per counter.
fn bench_stats(c: &mut Criterion) {
    use std::sync::atomic::{AtomicU64, Ordering};
    use vmod_redis::stats::Counter;
    let mut g = c.benchmark_group("stats");
    let stats = Stats::default();
    g.bench_function("inc", |b| {
        b.iter(|| stats.inc(black_box(Counter::CommandsTotal)))
    });
    let plain: [AtomicU64; Counter::COUNT] = std::array::from_fn(|_| AtomicU64::new(0));
    g.bench_function("inc_plain_atomic", |b| {
        b.iter(|| plain[black_box(Counter::CommandsTotal) as usize].fetch_add(1, Ordering::Relaxed))
    });
    g.finish();
}

fn bench_near_cache(c: &mut Criterion) {
    let args =
        |args: &[&str]| -> Vec<Vec<u8>> { args.iter().map(|a| a.as_bytes().to_vec()).collect() };
    let mut g = c.benchmark_group("near_cache");
    let get = NearCacheBench::filled(64 << 20, &[args(&["GET", "foo"])], b"Hello world!");
    assert!(get.hit(0), "GET foo is kept");
    g.bench_function("hit_get", |b| b.iter(|| black_box(get.hit(black_box(0)))));
    // Big enough that a 64th of it holds the whole hash.
    let fields: Vec<Vec<Vec<u8>>> = (0..3000)
        .map(|i| args(&["HGET", "h", &format!("field:{i:05}")]))
        .collect();
    let hget = NearCacheBench::filled(256 << 20, &fields, &[b'x'; 100]);
    assert!((0..3000).all(|i| hget.hit(i)), "every field is kept");
    let mut i = 0;
    g.bench_function("hit_hget_of_3000_fields", |b| {
        b.iter(|| {
            i += 1;
            black_box(hget.hit(i))
        })
    });
    g.finish();
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    bench_command(&mut c);
    bench_commands(&mut c);
    bench_reply(&mut c);
    bench_stats(&mut c);
    bench_near_cache(&mut c);
    match Redis::start() {
        Some(redis) => bench_with_redis(&mut c, &redis),
        None => eprintln!(
            "micro: redis-server not found or did not start: pool/* and roundtrip/* skipped \
             (apt-get install -y redis-server)"
        ),
    }
    c.final_summary();
}
