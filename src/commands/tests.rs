//! The decisions per command, on Redis 7.0.15's own table; keys per
//! family; and, against a real redis-server, every command of `COMMAND
//! LIST`, the keys `COMMAND GETKEYS` gives, and the reading of the model.
use super::model::Model;
use super::parse::tests::{read, REDIS_70_RESP2, REDIS_70_RESP3};
use super::*;
use crate::config::{Location, Protocol, Role};
use crate::connection::{Connection, Connector};
use crate::protocol::Command;
use crate::protocol::Reply;
use crate::server::Server;
use crate::stats::Stats;
use crate::testing::RedisProcess;

fn cmd(args: &[&str]) -> Command {
    let mut command = Command::new(args[0].as_bytes());
    for arg in &args[1..] {
        command.push(arg.as_bytes());
    }
    command
}

fn redis_70() -> Model {
    Model::build("redis 7.0.15".into(), read(REDIS_70_RESP3))
}

/// A command of each name (`PARENT|SUB` as `PARENT SUB`).
fn by_name(name: &str) -> Command {
    cmd(&name.split('|').collect::<Vec<_>>())
}

fn names(list: &str) -> Vec<String> {
    let mut names: Vec<String> = list.split_whitespace().map(String::from).collect();
    names.sort();
    names
}

/// Every command and subcommand of Redis 7.0.15 that is not a plain
/// sharable command, with its decision: a reviewed list, so that a change
/// of the rules or of the flags read shows here.
#[test]
fn decisions_of_every_redis_70_command() {
    let model = redis_70();
    let mut effects = Vec::new();
    let mut unshared = Vec::new();
    for name in model.names() {
        let command = by_name(&name);
        let found = model.find(&command);
        let entry = found.entry.expect("every listed name is found");
        assert!(entry.known || name == "WAITAOF", "{name}");
        match found.effect() {
            Effect::None => {}
            Effect::Refused(_) => effects.push(format!("{name}=Refused")),
            effect => effects.push(format!("{name}={effect:?}")),
        }
        if found.effect() == Effect::None && !found.shares(&command) {
            unshared.push(name);
        }
    }
    effects.sort();
    unshared.sort();
    assert_eq!(
        effects,
        names(
            "ASKING=Refused AUTH=Changes CLIENT=Changes CLIENT|CACHING=Changes \
             CLIENT|NO-EVICT=Changes CLIENT|REPLY=Refused CLIENT|SETNAME=Changes \
             CLIENT|TRACKING=Changes DISCARD=Discard EXEC=Exec HELLO=Changes \
             MONITOR=Refused MULTI=Multi PSUBSCRIBE=Refused PSYNC=Refused \
             PUNSUBSCRIBE=Refused QUIT=Quit READONLY=Changes READWRITE=Changes \
             REPLCONF=Refused RESET=Reset SCRIPT|DEBUG=Refused SELECT=Changes \
             SSUBSCRIBE=Refused SUBSCRIBE=Refused SUNSUBSCRIBE=Refused SYNC=Refused \
             UNSUBSCRIBE=Refused UNWATCH=Unwatch WATCH=Watch"
        )
    );
    // Blocking, admin, or a container named without its subcommand.
    assert_eq!(
        unshared,
        names(
            "ACL BGREWRITEAOF BGSAVE BLMOVE BLMPOP BLPOP BRPOP BRPOPLPUSH BZMPOP \
             BZPOPMAX BZPOPMIN CLUSTER COMMAND CONFIG DEBUG FAILOVER FUNCTION LATENCY \
             MEMORY MODULE OBJECT PFDEBUG PFSELFTEST PUBSUB REPLICAOF SAVE SCRIPT \
             SHUTDOWN SLAVEOF SLOWLOG WAIT WAITAOF XGROUP XINFO \
             ACL|DELUSER ACL|DRYRUN ACL|GETUSER ACL|LIST ACL|LOAD ACL|LOG ACL|SAVE \
             ACL|SETUSER ACL|USERS CLIENT|KILL CLIENT|LIST CLIENT|PAUSE CLIENT|UNBLOCK \
             CLIENT|UNPAUSE CLUSTER|ADDSLOTS CLUSTER|ADDSLOTSRANGE CLUSTER|BUMPEPOCH \
             CLUSTER|COUNT-FAILURE-REPORTS CLUSTER|DELSLOTS CLUSTER|DELSLOTSRANGE \
             CLUSTER|FAILOVER CLUSTER|FLUSHSLOTS CLUSTER|FORGET CLUSTER|MEET \
             CLUSTER|REPLICAS CLUSTER|REPLICATE CLUSTER|RESET CLUSTER|SAVECONFIG \
             CLUSTER|SET-CONFIG-EPOCH CLUSTER|SETSLOT CLUSTER|SLAVES CONFIG|GET \
             CONFIG|RESETSTAT CONFIG|REWRITE CONFIG|SET LATENCY|DOCTOR LATENCY|GRAPH \
             LATENCY|HISTOGRAM LATENCY|HISTORY LATENCY|LATEST LATENCY|RESET MODULE|LIST \
             MODULE|LOAD MODULE|LOADEX MODULE|UNLOAD SLOWLOG|GET SLOWLOG|LEN SLOWLOG|RESET"
        )
    );
}

#[test]
fn names_and_subcommands_match_in_any_case() {
    let model = redis_70();
    let effect = |args: &[&str]| model.find(&cmd(args)).effect();
    assert_eq!(effect(&["multi"]), Effect::Multi);
    assert_eq!(effect(&["ExEc"]), Effect::Exec);
    assert_eq!(effect(&["select", "5"]), Effect::Changes);
    assert_eq!(effect(&["client", "setname", "x"]), Effect::Changes);
    assert_eq!(effect(&["Client", "TrAcKiNg", "on"]), Effect::Changes);
    assert!(matches!(
        effect(&["client", "reply", "off"]),
        Effect::Refused(_)
    ));
    assert!(matches!(
        effect(&["script", "Debug", "yes"]),
        Effect::Refused(_)
    ));
    for args in [
        &["GET", "k"][..],
        &["CLIENT", "GETNAME"],
        &["client", "id"],
        &["PUBLISH", "ch", "m"],
        &["SCRIPT", "FLUSH"],
    ] {
        assert_eq!(effect(args), Effect::None, "{args:?}");
    }
    // Names in no table (a renamed command, a typo): they may have changed
    // the connection, unless refused.
    for args in [&["MULTIPLY"][..], &["SELECTED"], &[""], &["\u{e9}"]] {
        assert_eq!(effect(args), Effect::Unknown, "{args:?}");
    }
}

#[test]
fn unknown_client_subcommands_change_the_connection() {
    let model = redis_70();
    for args in [
        &["CLIENT", "SETINFO", "LIB-NAME", "x"][..],
        &["CLIENT", "NO-TOUCH", "on"],
        &["CLIENT", "CAPA", "redirect"],
        &["CLIENT", "ANYTHING-NEW"],
        &["CLIENT"],
    ] {
        let found = model.find(&cmd(args));
        assert_eq!(found.effect(), Effect::Changes, "{args:?}");
        assert!(!found.shares(&cmd(args)), "{args:?}");
    }
}

#[test]
fn only_commands_known_to_reply_once_and_leave_nothing_share() {
    let model = redis_70();
    let shares = |args: &[&str]| model.find(&cmd(args)).shares(&cmd(args));
    for args in [
        &["GET", "k"][..],
        &["eval", "return 1", "0"],
        &["XREAD", "COUNT", "1", "STREAMS", "s", "0"],
        &["PUBLISH", "ch", "m"],
        &["SPUBLISH", "ch", "m"],
        &["PUBSUB", "NUMSUB", "ch"],
        &["CLIENT", "ID"],
        &["PING"],
        &["CLUSTER", "SLOTS"],
    ] {
        assert!(shares(args), "{args:?}");
    }
    for args in [
        &["xread", "block", "0", "STREAMS", "s", "$"][..],
        &[
            "XREADGROUP",
            "GROUP",
            "g",
            "c",
            "BLOCK",
            "10",
            "STREAMS",
            "s",
            ">",
        ],
        &["BLPOP", "k", "1"],
        &["WAIT", "0", "10"],
        &["CONFIG", "GET", "x"],
        &["DEBUG", "SLEEP", "0"],
        &["MULTI"],
        &["SELECT", "1"],
        &["CLIENT", "SETNAME", "x"],
        &["QUIT"],
        &["REPLCONF", "ACK", "0"],
        &["SUBSCRIBE", "ch"],
        &["SCRIPT", "DEBUG", "YES"],
        &["NOSUCHCOMMAND", "k"],
        &["CONFIG", "NOSUCHSUB"],
        &["CONFIG"],
    ] {
        assert!(!shares(args), "{args:?}");
    }
}

#[test]
fn a_module_command_or_an_unknown_blocking_one_never_shares() {
    let mut described = read(REDIS_70_RESP2);
    let get = described
        .iter()
        .find(|c| &*c.name == b"GET")
        .unwrap()
        .clone();
    let mut module = get.clone();
    module.name = b"MOD.GET"[..].into();
    module.flags |= parse::flag::MODULE;
    let mut blocking = get;
    blocking.name = b"NEW.BLOCKING"[..].into();
    blocking.flags |= parse::flag::BLOCKING;
    described.extend([module, blocking]);
    let model = Model::build("test".into(), described);
    let module = cmd(&["mod.get", "k"]);
    assert!(!model.find(&module).shares(&module));
    assert!(!model.find(&module).waits_forever(&module));
    let blocking = cmd(&["NEW.BLOCKING", "k", "5"]);
    assert!(!model.find(&blocking).shares(&blocking));
    assert!(
        model.find(&blocking).waits_forever(&blocking),
        "timeout not known"
    );
}

#[test]
fn commands_that_may_wait_for_ever() {
    let model = redis_70();
    let forever = |args: &[&str]| model.find(&cmd(args)).waits_forever(&cmd(args));
    for args in [
        &["BLPOP", "a", "b", "0"][..],
        &["brpop", "a", "0.0"],
        &["BLMOVE", "a", "b", "LEFT", "RIGHT", "0"],
        &["BLMPOP", "0", "1", "a", "LEFT"],
        &["BZMPOP", "0", "1", "a", "MIN"],
        &["BZPOPMIN", "a", "0"],
        &["XREAD", "BLOCK", "0", "STREAMS", "s", "$"],
        &[
            "xreadgroup",
            "GROUP",
            "g",
            "c",
            "block",
            "0",
            "STREAMS",
            "s",
            ">",
        ],
        &["WAIT", "1", "0"],
        &["WAITAOF", "1", "1", "0"],
    ] {
        assert!(forever(args), "{args:?}");
    }
    for args in [
        &["BLPOP", "a", "b", "1"][..],
        &["BLPOP", "0", "0.5"],
        &["BLMPOP", "2", "1", "a", "LEFT"],
        &["XREAD", "STREAMS", "s", "0"],
        &["XREAD", "BLOCK", "100", "STREAMS", "s", "$"],
        &["WAIT", "1", "100"],
        &["GET", "0"],
        &["REPLCONF", "ACK", "0"],
        &["BLPOP"],
        &["NOSUCH", "0"],
    ] {
        assert!(!forever(args), "{args:?}");
    }
}

#[test]
fn scripts_and_functions_go_to_a_master_their_ro_forms_do_not() {
    let model = redis_70();
    let master = |name: &str| model.find(&cmd(&[name, "x", "0"])).master_only();
    assert!(master("EVAL") && master("evalsha") && master("FCALL"));
    assert!(!master("EVAL_RO") && !master("EVALSHA_RO") && !master("FCALL_RO"));
    assert!(!master("GET") && !master("NOSUCH"));
}

fn keys_of(model: &Model, args: &[&str]) -> Vec<String> {
    let command = cmd(args);
    model
        .find(&command)
        .keys(&command)
        .into_iter()
        .map(|key| String::from_utf8_lossy(key).into_owned())
        .collect()
}

/// Each keyed family, with the keys Redis 7.0.15's `COMMAND GETKEYS`
/// gives (checked against the server in `getkeys_agree_with_the_server`).
const KEYED: &[(&[&str], &[&str])] = &[
    (&["GET", "k"], &["k"]),
    (&["SET", "k", "v", "EX", "10"], &["k"]),
    (&["MSET", "a", "1", "b", "2"], &["a", "b"]),
    (&["MGET", "a", "b", "c"], &["a", "b", "c"]),
    (&["DEL", "a", "b"], &["a", "b"]),
    (&["EVAL", "return 1", "2", "a", "b", "x"], &["a", "b"]),
    (&["EVALSHA", "abc", "1", "a", "x"], &["a"]),
    (&["EVAL_RO", "return 1", "1", "a"], &["a"]),
    (&["EVALSHA_RO", "abc", "2", "a", "b"], &["a", "b"]),
    (&["FCALL", "f", "2", "a", "b", "x"], &["a", "b"]),
    (&["FCALL_RO", "f", "1", "a"], &["a"]),
    (
        &["ZUNIONSTORE", "d", "2", "a", "b", "WEIGHTS", "1", "2"],
        &["d", "a", "b"],
    ),
    (&["ZINTERCARD", "2", "a", "b", "LIMIT", "1"], &["a", "b"]),
    (&["LMPOP", "2", "a", "b", "LEFT"], &["a", "b"]),
    (&["BLMPOP", "1", "2", "a", "b", "LEFT"], &["a", "b"]),
    (&["SINTERCARD", "1", "a"], &["a"]),
    (
        &["XREAD", "COUNT", "2", "STREAMS", "a", "b", "0", "0"],
        &["a", "b"],
    ),
    (
        &["XREADGROUP", "GROUP", "g", "c", "STREAMS", "a", ">"],
        &["a"],
    ),
    (&["OBJECT", "ENCODING", "k"], &["k"]),
    (&["MEMORY", "USAGE", "k", "SAMPLES", "5"], &["k"]),
    (&["BITOP", "AND", "d", "a", "b"], &["d", "a", "b"]),
    (
        &["SORT", "k", "LIMIT", "0", "1", "BY", "w_*", "STORE", "d"],
        &["k", "d"],
    ),
    (&["SORT", "k", "GET", "STORE", "ALPHA"], &["k"]),
    (&["SORT_RO", "k", "BY", "w_*"], &["k"]),
    (&["MIGRATE", "h", "1", "k", "0", "100"], &["k"]),
    (
        &[
            "MIGRATE", "h", "1", "", "0", "100", "AUTH", "KEYS", "KEYS", "a", "b",
        ],
        &["a", "b"],
    ),
    (&["BLMOVE", "a", "b", "LEFT", "RIGHT", "0"], &["a", "b"]),
    (&["RENAME", "a", "b"], &["a", "b"]),
    (
        &["GEORADIUS", "k", "0", "0", "1", "m", "STORE", "d"],
        &["k", "d"],
    ),
    (&["XINFO", "STREAM", "s"], &["s"]),
    (&["PFCOUNT", "a", "b"], &["a", "b"]),
    (&["WATCH", "a", "b"], &["a", "b"]),
];

#[test]
fn keys_by_key_specification_for_each_family() {
    let model = redis_70();
    for (args, want) in KEYED {
        assert_eq!(keys_of(&model, args), *want, "{args:?}");
    }
}

#[test]
fn commands_without_keys_or_unknown() {
    let model = redis_70();
    for args in [
        &["PING"][..],
        &["INFO", "server"],
        &["EVAL", "return 1", "0"],
        &["EVAL", "return 1", "5", "a"],
        &["EVAL", "return 1", "-1", "a"],
        &["EVAL", "return 1", "x", "a"],
        &["XREAD", "STREAMS"],
        &["MSET"],
        &["CONFIG", "GET", "maxmemory"],
        &["OBJECT", "NOSUCH", "k"],
        &["CLIENT", "SETNAME", "x"],
    ] {
        assert_eq!(keys_of(&model, args), Vec::<String>::new(), "{args:?}");
    }
    // The C VMOD's rule for a command the model does not know.
    assert_eq!(keys_of(&model, &["MOD.GET", "k", "x"]), ["k"]);
}

#[test]
fn the_slot_of_all_keys_or_crossslot() {
    let model = redis_70();
    let slot = |args: &[&str]| model.find(&cmd(args)).slot(&cmd(args));
    let of = |key: &str| Ok(Some(crate::cluster::key_slot(key.as_bytes())));
    assert_eq!(slot(&["GET", "k"]), of("k"));
    assert_eq!(slot(&["MSET", "{t}a", "1", "{t}b", "2"]), of("t"));
    assert_eq!(slot(&["OBJECT", "ENCODING", "k"]), of("k"));
    assert_eq!(slot(&["PING"]), Ok(None));
    // A shard channel routes as a key (its spec is `not_key`, so COMMAND
    // GETKEYS does not list it), as Redis Cluster routes it.
    assert_eq!(slot(&["SPUBLISH", "ch", "m"]), of("ch"));
    assert_eq!(slot(&["MGET", "a", "b"]), Err(keys::CrossSlot));
    assert_eq!(
        slot(&["EVAL", "s", "2", "{x}1", "{y}1"]),
        Err(keys::CrossSlot)
    );
    assert_eq!(
        slot(&["BITOP", "OR", "{a}d", "{a}1", "b"]),
        Err(keys::CrossSlot)
    );
    assert_eq!(
        slot(&["XREAD", "STREAMS", "{s}1", "{s}2", "0", "0"]),
        of("s")
    );
}

#[test]
fn odd_arguments_never_panic() {
    let model = redis_70();
    let odd = [
        "",
        "0",
        "-1",
        "-9223372036854775808",
        "9223372036854775807",
        "99999999999999999999",
        "STREAMS",
        "KEYS",
        "STORE",
        "BLOCK",
        "LIMIT",
        "AUTH2",
        "\u{0}",
    ];
    for name in model.names() {
        let mut args: Vec<&str> = name.split('|').collect();
        for extra in 0..6 {
            for start in 0..odd.len() {
                let command = cmd(&args);
                let found = model.find(&command);
                let _ = (found.slot(&command), found.shares(&command));
                let _ = found.waits_forever(&command);
                args.push(odd[(start + extra) % odd.len()]);
            }
            args.truncate(name.split('|').count());
        }
    }
}

fn connect(redis: &RedisProcess, user: Option<(&str, &str)>, protocol: Protocol) -> Connection {
    let location = redis.location().parse::<Location>().unwrap();
    let connector = Connector::new(
        &location,
        user.map(|u| u.0),
        user.map(|u| u.1),
        protocol,
        None,
        None,
    );
    connector.connect(&Stats::default()).unwrap()
}

fn request(conn: &mut Connection, args: &[&str]) -> Reply {
    conn.request(cmd(args).packed(), Some(std::time::Duration::from_secs(5)))
        .unwrap()
}

fn strings(reply: Reply) -> Vec<String> {
    match reply {
        Reply::Array(items) => items
            .into_iter()
            .map(|item| String::from_utf8_lossy(&item.text().unwrap()).into_owned())
            .collect(),
        other => panic!("{other:?}"),
    }
}

/// The real server: every command of `COMMAND LIST` gets a decision from
/// the model read from that server, and the keys found agree with
/// `COMMAND GETKEYS` for every keyed family.
#[test]
fn every_listed_command_has_a_decision_and_getkeys_agree() {
    let redis = RedisProcess::start(&[]);
    for protocol in [Protocol::Resp2, Protocol::Resp3] {
        let mut conn = connect(&redis, None, protocol);
        let described = parse::parse_command_reply(&request(&mut conn, &["COMMAND"])).unwrap();
        let model = Model::build("live".into(), described);
        let listed = strings(request(&mut conn, &["COMMAND", "LIST"]));
        assert!(listed.len() > 300, "subcommands included: {}", listed.len());
        for name in listed {
            let command = by_name(&name);
            let found = model.find(&command);
            let entry = found.entry.unwrap_or_else(|| panic!("{name}"));
            assert!(
                entry.known && (!found.container_only || !name.contains('|')),
                "{name}"
            );
        }
        for (args, want) in KEYED {
            let mut getkeys = vec!["COMMAND", "GETKEYS"];
            getkeys.extend_from_slice(args);
            let server = strings(request(&mut conn, &getkeys));
            assert_eq!(server, *want, "the server's keys for {args:?}");
            assert_eq!(keys_of(&model, args), server, "{args:?}");
        }
    }
}

fn server(redis: &RedisProcess, user: Option<(&str, &str)>) -> Server {
    use crate::config::{DbArgs, DbConfig, Secret};
    use crate::database::Database;
    let (user, password) = user.unwrap_or(("", ""));
    let config = DbConfig::from_args(&DbArgs {
        role: "master",
        user,
        password: Secret(password),
        ..DbArgs::default()
    })
    .expect("valid config");
    let db = Database::new("t", config).expect("database");
    let location = redis.location().parse::<Location>().unwrap();
    db.new_server(&location, Role::Master)
}

fn command_calls(redis: &RedisProcess) -> usize {
    redis
        .cli(&["INFO", "commandstats"])
        .lines()
        .find_map(|line| line.strip_prefix("cmdstat_info:calls="))
        .and_then(|rest| rest.split(',').next()?.parse().ok())
        .unwrap_or(0)
}

/// The model is read at a server's first connection, not at the next
/// ones, and again after the server failed.
#[test]
fn the_model_is_read_once_per_server_then_after_a_failure() {
    let redis = RedisProcess::start(&[]);
    let server = server(&redis, None);
    let commands = Commands::default();
    let timeout = Some(std::time::Duration::from_secs(5));
    let mut conn = server.connector.connect(&Stats::default()).unwrap();
    commands.learn(&server, &mut conn, until(timeout)).unwrap();
    let version = redis.cli(&["INFO", "server"]);
    let version = version
        .lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .unwrap();
    assert_eq!(commands.model().source, format!("redis {version}"));
    // The INFO of the learning, and the one just above.
    assert_eq!(command_calls(&redis), 2);
    let mut again = server.connector.connect(&Stats::default()).unwrap();
    commands.learn(&server, &mut again, until(timeout)).unwrap();
    assert_eq!(command_calls(&redis), 3, "not asked on a second connection");
    std::thread::sleep(std::time::Duration::from_millis(2));
    server.health.mark_failed();
    std::thread::sleep(std::time::Duration::from_millis(2));
    let mut after = server.connector.connect(&Stats::default()).unwrap();
    commands.learn(&server, &mut after, until(timeout)).unwrap();
    assert_eq!(command_calls(&redis), 5, "asked again after a failure");
    // The connection is usable as before.
    assert_eq!(request(&mut after, &["PING"]), Reply::Status("PONG".into()));
}

/// A user without `COMMAND` and `INFO` keeps the built-in fallback (the
/// version is not known), and the connection works.
#[test]
fn a_server_that_refuses_command_leaves_the_fallback() {
    let redis = RedisProcess::start(&[]);
    redis.cli(&[
        "ACL", "SETUSER", "app", "on", ">pw", "+@all", "-command", "-info", "~*",
    ]);
    let server = server(&redis, Some(("app", "pw")));
    let commands = Commands::default();
    let mut conn = server.connector.connect(&Stats::default()).unwrap();
    commands
        .learn(
            &server,
            &mut conn,
            until(Some(std::time::Duration::from_secs(5))),
        )
        .unwrap();
    assert!(commands.model().source.starts_with("built-in"));
    assert_eq!(request(&mut conn, &["PING"]), Reply::Status("PONG".into()));
}

const REDIS_80_RESP2: &[u8] = include_bytes!("captures/redis-8.0-resp2.resp");
const REDIS_80_RESP3: &[u8] = include_bytes!("captures/redis-8.0-resp3.resp");
const VALKEY_81_RESP2: &[u8] = include_bytes!("captures/valkey-8.1-resp2.resp");
const VALKEY_81_RESP3: &[u8] = include_bytes!("captures/valkey-8.1-resp3.resp");

/// What Redis 8.0 and Valkey 8.1 add to Redis 7.0 and is not a plain
/// sharable command: new `CLIENT` subcommands change the connection, the
/// vector set commands are a module's (Redis 8.0), admin commands stay
/// off shared connections.
#[test]
fn redis_80_and_valkey_81_read_in_both_protocols() {
    let base = redis_70().names();
    for (what, two, three, want) in [
        (
            "redis 8.0",
            REDIS_80_RESP2,
            REDIS_80_RESP3,
            "CLIENT|NO-TOUCH=Changes CLIENT|SETINFO=Changes VADD=None VCARD=None VDIM=None \
             VEMB=None VGETATTR=None VINFO=None VISMEMBER=None VLINKS=None VRANDMEMBER=None \
             VREM=None VSETATTR=None VSIM=None",
        ),
        (
            "valkey 8.1",
            VALKEY_81_RESP2,
            VALKEY_81_RESP3,
            "CLIENT|CAPA=Changes CLIENT|IMPORT-SOURCE=Changes CLIENT|NO-TOUCH=Changes \
             CLIENT|SETINFO=Changes COMMANDLOG=None COMMANDLOG|GET=None COMMANDLOG|LEN=None \
             COMMANDLOG|RESET=None",
        ),
    ] {
        let described = read(two);
        assert_eq!(described, read(three), "{what}");
        let model = Model::build(what.into(), described);
        let mut unshared = Vec::new();
        for name in model.names().iter().filter(|name| !base.contains(name)) {
            let command = by_name(name);
            let found = model.find(&command);
            assert!(!found.waits_forever(&command), "{name}");
            if !found.shares(&command) {
                unshared.push(format!("{name}={:?}", found.effect()));
            }
        }
        unshared.sort();
        assert_eq!(unshared, names(want), "{what}");
        // A new keyed command, by its key specification.
        let getex = cmd(&["HGETEX", "h", "EX", "10", "FIELDS", "1", "f"]);
        if what == "redis 8.0" {
            assert_eq!(model.find(&getex).keys(&getex), [&b"h"[..]]);
        }
    }
}

/// The deadline `timeout` from now.
fn until(timeout: Option<std::time::Duration>) -> Option<std::time::Instant> {
    timeout.map(|timeout| std::time::Instant::now() + timeout)
}

/// Review (issue #20, "with command_timeout=0, commands that never reply
/// are refused"): redis-server 7.0.15 blocks for ever on each of these
/// (checked with redis-cli): the last `BLOCK` of `XREAD` wins, and a
/// timeout in seconds is rounded up to whole ms (`ceill`), so a negative
/// fraction above -1 ms is 0, "for ever". The check reads only the first
/// `BLOCK`, and takes only an exact 0 as "for ever".
#[test]
fn commands_redis_keeps_for_ever_by_their_last_block_or_a_rounded_timeout() {
    let model = redis_70();
    let forever = |args: &&[&str]| model.find(&cmd(args)).waits_forever(&cmd(args));
    let missed = [
        &["XREAD", "BLOCK", "5", "BLOCK", "0", "STREAMS", "s", "$"][..],
        &[
            "XREADGROUP",
            "GROUP",
            "g",
            "c",
            "BLOCK",
            "5",
            "BLOCK",
            "0",
            "STREAMS",
            "s",
            ">",
        ],
        &["BLPOP", "l", "-0.0001"],
        &["BZPOPMIN", "z", "-0.0009"],
        &["BLMPOP", "-0.0001", "1", "l", "LEFT"],
    ]
    .into_iter()
    .filter(|args| !forever(args))
    .collect::<Vec<_>>();
    assert!(missed.is_empty(), "block for ever on Redis 7.0: {missed:?}");
}

/// Key specifications are numbers a server chose (read for a command
/// not in the built-in model, and shared by every database of that
/// version): extreme ones find no key, and never overflow (a panic with
/// overflow checks, a wrap in release).
#[test]
fn hostile_key_specifications_never_panic() {
    use super::parse::{BeginSearch, Described, FindKeys, KeySpec};

    let spec = |begin, find| KeySpec {
        begin,
        find,
        incomplete: false,
    };
    let big = i64::MAX;
    let specs = [
        spec(
            BeginSearch::Index(1),
            FindKeys::Range {
                lastkey: big,
                keystep: 1,
                limit: 0,
            },
        ),
        spec(
            BeginSearch::Index(big),
            FindKeys::Range {
                lastkey: 1,
                keystep: 1,
                limit: 0,
            },
        ),
        spec(
            BeginSearch::Index(1),
            FindKeys::Keynum {
                keynumidx: big,
                firstkey: 1,
                keystep: 1,
            },
        ),
        spec(
            BeginSearch::Index(1),
            FindKeys::Keynum {
                keynumidx: 0,
                firstkey: big,
                keystep: 1,
            },
        ),
        spec(
            BeginSearch::Index(1),
            FindKeys::Keynum {
                keynumidx: 0,
                firstkey: 1,
                keystep: big,
            },
        ),
    ];
    let mut panicked = Vec::new();
    for (i, spec) in specs.into_iter().enumerate() {
        let model = Model::build(
            format!("hostile {i}"),
            vec![Described {
                name: b"HOSTILE".to_vec().into(),
                arity: -2,
                flags: 0,
                key_specs: vec![spec.clone()],
                subcommands: Vec::new(),
            }],
        );
        let command = cmd(&["HOSTILE", "2", "k1", "k2"]);
        let found = model.find(&command);
        if std::panic::catch_unwind(|| found.slot(&command)).is_err() {
            panicked.push(spec);
        }
    }
    assert!(panicked.is_empty(), "panicked on {panicked:#?}");
}

/// The commands of Redis 7.0.15 whose replies an [ext] near cache may
/// keep: a reviewed list, so that a change of the rules or of the flags
/// read shows here. Every other command (writes, scripts, blocking,
/// keyless, time- or access-dependent) is never kept.
#[test]
fn commands_a_near_cache_may_keep() {
    let model = redis_70();
    let cacheable: Vec<String> = model
        .names()
        .into_iter()
        .filter(|name| {
            model
                .find(&by_name(name))
                .entry
                .is_some_and(|e| e.cacheable)
        })
        .collect();
    assert_eq!(
        cacheable,
        names(
            "BITCOUNT BITFIELD_RO BITPOS EXISTS GEODIST GEOHASH GEOPOS \
             GEORADIUSBYMEMBER_RO GEORADIUS_RO GEOSEARCH GET GETBIT GETRANGE HEXISTS HGET \
             HGETALL HKEYS HLEN HMGET HSTRLEN HVALS LCS LINDEX LLEN LPOS LRANGE MGET PFCOUNT \
             SCARD SDIFF SINTER SISMEMBER SMEMBERS SMISMEMBER STRLEN SUBSTR SUNION TYPE \
             XLEN XRANGE XREVRANGE ZCARD ZCOUNT ZLEXCOUNT ZMSCORE \
             ZRANGE ZRANGEBYLEX ZRANGEBYSCORE ZRANK ZREVRANGE ZREVRANGEBYLEX \
             ZREVRANGEBYSCORE ZREVRANK ZSCORE"
        ),
        "{}",
        cacheable.join(" ")
    );
    let key = |args: &[&str]| {
        let command = cmd(args);
        model.find(&command).cached_keys(&command).map(|keys| {
            let keys: Vec<_> = keys.iter().map(|k| String::from_utf8_lossy(k)).collect();
            keys.join(" ")
        })
    };
    assert_eq!(key(&["GET", "k"]), Some("k".into()));
    assert_eq!(key(&["hget", "h", "f"]), Some("h".into()));
    assert_eq!(key(&["ZSCORE", "z", "m"]), Some("z".into()));
    // Several keys: each once, in order.
    assert_eq!(key(&["MGET", "a"]), Some("a".into()));
    assert_eq!(key(&["MGET", "a", "b"]), Some("a b".into()));
    assert_eq!(key(&["MGET", "b", "a", "b"]), Some("b a".into()));
    assert_eq!(key(&["EXISTS", "a", "b"]), Some("a b".into()));
    assert_eq!(key(&["SUNION", "s", "t"]), Some("s t".into()));
    assert_eq!(key(&["LCS", "a", "b", "LEN"]), Some("a b".into()));
    for args in [
        &["SET", "k", "v"][..],
        &["TTL", "k"],
        &["PTTL", "k"],
        &["SRANDMEMBER", "s"],
        &["OBJECT", "ENCODING", "k"],
        &["TOUCH", "k"],
        &["EVAL_RO", "return 1", "1", "k"],
        &["FCALL_RO", "f", "1", "k"],
        &["XREAD", "STREAMS", "s", "0"],
        &["SORT_RO", "k"],
        &["DBSIZE"],
        &["KEYS", "*"],
        &["SCAN", "0"],
        &["RANDOMKEY"],
        &["GETEX", "k"],
        &["GETDEL", "k"],
        &["BLPOP", "k", "1"],
        &["NOSUCHCOMMAND", "k"],
    ] {
        assert_eq!(key(args), None, "{args:?}");
    }
}
