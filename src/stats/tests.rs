//! The output of `.stats()` against what the C VMOD prints.
// Reference output of the C VMOD this crate replaces: libvmod-redis 15.1
// (Debian `varnish-redis` 15.1-1) in Varnish 7.1.1, against redis-server
// 7.0.15 on 127.0.0.1, captured with a throwaway varnishtest:
//
//     new db = redis.db(location="127.0.0.1:P", type=master);
//     new other = redis.db(location="127.0.0.1:1", type=auto,
//                          connection_timeout=200);   // nothing listens
//     vcl_recv, every request: SET k v; GET k; NOSUCHCMD (error reply);
//         EVAL "return 1" 0 (NOSCRIPT the first time only)
//     vcl_synth: synthetic(db.stats(...)) per URL
//
// db.stats() after request 1 (347 bytes, no trailing newline; note the
// blank after ':' only, and no per-server or database-name field):
//
// {"servers": {"total": 1,"failed": 0},"connections": {"total": 1,"failed": 0,"dropped": {"error": 0,"hung_up": 0,"overflow": 0,"ttl": 0,"version": 0,"sick": 0}},"workers": {"blocked": 0},"commands": {"total": 4,"failed": 0,"retried": 0,"error": 1,"noscript": 1},"cluster": {"discoveries": {"total": 0,"failed": 0},"replies": {"moved": 0,"ask": 0}}}
//
// db.stats(format=prometheus) after request 2 (1620 bytes, every line
// ends in "\n"; 15 families, all `counter`, no HELP lines):
//
// # TYPE vmod_redis_servers_total counter
// vmod_redis_servers_total{name="db"} 1
// # TYPE vmod_redis_servers_failed counter
// vmod_redis_servers_failed{name="db"} 0
// # TYPE vmod_redis_connections_total counter
// vmod_redis_connections_total{name="db"} 1
// # TYPE vmod_redis_connections_failed counter
// vmod_redis_connections_failed{name="db"} 0
// # TYPE vmod_redis_connections_dropped counter
// vmod_redis_connections_dropped{name="db",reason="error"} 0
// vmod_redis_connections_dropped{name="db",reason="hung_up"} 0
// vmod_redis_connections_dropped{name="db",reason="overflow"} 0
// vmod_redis_connections_dropped{name="db",reason="ttl"} 0
// vmod_redis_connections_dropped{name="db",reason="version"} 0
// vmod_redis_connections_dropped{name="db",reason="sick"} 0
// # TYPE vmod_redis_workers_blocked counter
// vmod_redis_workers_blocked{name="db"} 0
// # TYPE vmod_redis_commands_total counter
// vmod_redis_commands_total{name="db"} 8
// # TYPE vmod_redis_commands_failed counter
// vmod_redis_commands_failed{name="db"} 0
// # TYPE vmod_redis_commands_retried counter
// vmod_redis_commands_retried{name="db"} 0
// # TYPE vmod_redis_commands_error counter
// vmod_redis_commands_error{name="db"} 2
// # TYPE vmod_redis_commands_noscript counter
// vmod_redis_commands_noscript{name="db"} 1
// # TYPE vmod_redis_cluster_discoveries_total counter
// vmod_redis_cluster_discoveries_total{name="db"} 0
// # TYPE vmod_redis_cluster_discoveries_failed counter
// vmod_redis_cluster_discoveries_failed{name="db"} 0
// # TYPE vmod_redis_cluster_replies_moved counter
// vmod_redis_cluster_replies_moved{name="db"} 0
// # TYPE vmod_redis_cluster_replies_ask counter
// vmod_redis_cluster_replies_ask{name="db"} 0
//
// Label variants (full texts in the constants below):
//   prometheus_default_labels=false       -> vmod_redis_servers_total{} 1
//                                            ..._dropped{reason="error"} 0
//   prefix "x_", extra env="prod",dc="x"  -> x_servers_total{env="prod",dc="x",name="db"} 1
//                                            ..._dropped{env="prod",dc="x",name="db",reason="error"} 0
//   default labels off, extra env="prod"  -> ..._servers_total{env="prod"} 1
//   prometheus_name_prefix=""             -> vmod_redis_ (the default), not ""
//   extra labels `env="prod",`            -> {env="prod",,name="db"} (broken; we trim the comma)
//   db.counter("commands.total")          -> the value; db.counter("bogus") -> 0 and
//       VCL_Error "[REDIS][vmod_db_counter:1324] Failed to fetch counter (name=bogus)"
//   other.stats(): connections.failed and commands.failed count the
//       unreachable server; servers.failed stays 0.

use super::test_json::{flatten, parse_json, Json};
use super::*;

/// `/json`, request 1: `db.stats()`.
const C_JSON: &str = r#"{"servers": {"total": 1,"failed": 0},"connections": {"total": 1,"failed": 0,"dropped": {"error": 0,"hung_up": 0,"overflow": 0,"ttl": 0,"version": 0,"sick": 0}},"workers": {"blocked": 0},"commands": {"total": 4,"failed": 0,"retried": 0,"error": 1,"noscript": 1},"cluster": {"discoveries": {"total": 0,"failed": 0},"replies": {"moved": 0,"ask": 0}}}"#;
/// `other.stats()` after one request (two failed commands).
const C_JSON_UNREACHABLE: &str = r#"{"servers": {"total": 1,"failed": 0},"connections": {"total": 0,"failed": 2,"dropped": {"error": 0,"hung_up": 0,"overflow": 0,"ttl": 0,"version": 0,"sick": 0}},"workers": {"blocked": 0},"commands": {"total": 0,"failed": 2,"retried": 0,"error": 0,"noscript": 0},"cluster": {"discoveries": {"total": 0,"failed": 0},"replies": {"moved": 0,"ask": 0}}}"#;
/// `/prom`, request 2: `db.stats(format=prometheus)`.
pub(super) const C_PROM: &str = r#"# TYPE vmod_redis_servers_total counter
vmod_redis_servers_total{name="db"} 1
# TYPE vmod_redis_servers_failed counter
vmod_redis_servers_failed{name="db"} 0
# TYPE vmod_redis_connections_total counter
vmod_redis_connections_total{name="db"} 1
# TYPE vmod_redis_connections_failed counter
vmod_redis_connections_failed{name="db"} 0
# TYPE vmod_redis_connections_dropped counter
vmod_redis_connections_dropped{name="db",reason="error"} 0
vmod_redis_connections_dropped{name="db",reason="hung_up"} 0
vmod_redis_connections_dropped{name="db",reason="overflow"} 0
vmod_redis_connections_dropped{name="db",reason="ttl"} 0
vmod_redis_connections_dropped{name="db",reason="version"} 0
vmod_redis_connections_dropped{name="db",reason="sick"} 0
# TYPE vmod_redis_workers_blocked counter
vmod_redis_workers_blocked{name="db"} 0
# TYPE vmod_redis_commands_total counter
vmod_redis_commands_total{name="db"} 8
# TYPE vmod_redis_commands_failed counter
vmod_redis_commands_failed{name="db"} 0
# TYPE vmod_redis_commands_retried counter
vmod_redis_commands_retried{name="db"} 0
# TYPE vmod_redis_commands_error counter
vmod_redis_commands_error{name="db"} 2
# TYPE vmod_redis_commands_noscript counter
vmod_redis_commands_noscript{name="db"} 1
# TYPE vmod_redis_cluster_discoveries_total counter
vmod_redis_cluster_discoveries_total{name="db"} 0
# TYPE vmod_redis_cluster_discoveries_failed counter
vmod_redis_cluster_discoveries_failed{name="db"} 0
# TYPE vmod_redis_cluster_replies_moved counter
vmod_redis_cluster_replies_moved{name="db"} 0
# TYPE vmod_redis_cluster_replies_ask counter
vmod_redis_cluster_replies_ask{name="db"} 0
"#;
/// `/prom-nolabels`, request 3: `prometheus_default_labels=false`.
const C_PROM_NO_DEFAULT_LABELS: &str = r#"# TYPE vmod_redis_servers_total counter
vmod_redis_servers_total{} 1
# TYPE vmod_redis_servers_failed counter
vmod_redis_servers_failed{} 0
# TYPE vmod_redis_connections_total counter
vmod_redis_connections_total{} 1
# TYPE vmod_redis_connections_failed counter
vmod_redis_connections_failed{} 0
# TYPE vmod_redis_connections_dropped counter
vmod_redis_connections_dropped{reason="error"} 0
vmod_redis_connections_dropped{reason="hung_up"} 0
vmod_redis_connections_dropped{reason="overflow"} 0
vmod_redis_connections_dropped{reason="ttl"} 0
vmod_redis_connections_dropped{reason="version"} 0
vmod_redis_connections_dropped{reason="sick"} 0
# TYPE vmod_redis_workers_blocked counter
vmod_redis_workers_blocked{} 0
# TYPE vmod_redis_commands_total counter
vmod_redis_commands_total{} 12
# TYPE vmod_redis_commands_failed counter
vmod_redis_commands_failed{} 0
# TYPE vmod_redis_commands_retried counter
vmod_redis_commands_retried{} 0
# TYPE vmod_redis_commands_error counter
vmod_redis_commands_error{} 3
# TYPE vmod_redis_commands_noscript counter
vmod_redis_commands_noscript{} 1
# TYPE vmod_redis_cluster_discoveries_total counter
vmod_redis_cluster_discoveries_total{} 0
# TYPE vmod_redis_cluster_discoveries_failed counter
vmod_redis_cluster_discoveries_failed{} 0
# TYPE vmod_redis_cluster_replies_moved counter
vmod_redis_cluster_replies_moved{} 0
# TYPE vmod_redis_cluster_replies_ask counter
vmod_redis_cluster_replies_ask{} 0
"#;
/// `/prom-extra`, request 4: `prometheus_name_prefix="x_", prometheus_extra_labels={"env="prod",dc="x""}`.
const C_PROM_EXTRA_PREFIX: &str = r#"# TYPE x_servers_total counter
x_servers_total{env="prod",dc="x",name="db"} 1
# TYPE x_servers_failed counter
x_servers_failed{env="prod",dc="x",name="db"} 0
# TYPE x_connections_total counter
x_connections_total{env="prod",dc="x",name="db"} 1
# TYPE x_connections_failed counter
x_connections_failed{env="prod",dc="x",name="db"} 0
# TYPE x_connections_dropped counter
x_connections_dropped{env="prod",dc="x",name="db",reason="error"} 0
x_connections_dropped{env="prod",dc="x",name="db",reason="hung_up"} 0
x_connections_dropped{env="prod",dc="x",name="db",reason="overflow"} 0
x_connections_dropped{env="prod",dc="x",name="db",reason="ttl"} 0
x_connections_dropped{env="prod",dc="x",name="db",reason="version"} 0
x_connections_dropped{env="prod",dc="x",name="db",reason="sick"} 0
# TYPE x_workers_blocked counter
x_workers_blocked{env="prod",dc="x",name="db"} 0
# TYPE x_commands_total counter
x_commands_total{env="prod",dc="x",name="db"} 16
# TYPE x_commands_failed counter
x_commands_failed{env="prod",dc="x",name="db"} 0
# TYPE x_commands_retried counter
x_commands_retried{env="prod",dc="x",name="db"} 0
# TYPE x_commands_error counter
x_commands_error{env="prod",dc="x",name="db"} 4
# TYPE x_commands_noscript counter
x_commands_noscript{env="prod",dc="x",name="db"} 1
# TYPE x_cluster_discoveries_total counter
x_cluster_discoveries_total{env="prod",dc="x",name="db"} 0
# TYPE x_cluster_discoveries_failed counter
x_cluster_discoveries_failed{env="prod",dc="x",name="db"} 0
# TYPE x_cluster_replies_moved counter
x_cluster_replies_moved{env="prod",dc="x",name="db"} 0
# TYPE x_cluster_replies_ask counter
x_cluster_replies_ask{env="prod",dc="x",name="db"} 0
"#;
/// `/prom-extra-nodef`, request 5: `prometheus_default_labels=false, prometheus_extra_labels={"env="prod""}`.
const C_PROM_EXTRA_NO_DEFAULT: &str = r#"# TYPE vmod_redis_servers_total counter
vmod_redis_servers_total{env="prod"} 1
# TYPE vmod_redis_servers_failed counter
vmod_redis_servers_failed{env="prod"} 0
# TYPE vmod_redis_connections_total counter
vmod_redis_connections_total{env="prod"} 1
# TYPE vmod_redis_connections_failed counter
vmod_redis_connections_failed{env="prod"} 0
# TYPE vmod_redis_connections_dropped counter
vmod_redis_connections_dropped{env="prod",reason="error"} 0
vmod_redis_connections_dropped{env="prod",reason="hung_up"} 0
vmod_redis_connections_dropped{env="prod",reason="overflow"} 0
vmod_redis_connections_dropped{env="prod",reason="ttl"} 0
vmod_redis_connections_dropped{env="prod",reason="version"} 0
vmod_redis_connections_dropped{env="prod",reason="sick"} 0
# TYPE vmod_redis_workers_blocked counter
vmod_redis_workers_blocked{env="prod"} 0
# TYPE vmod_redis_commands_total counter
vmod_redis_commands_total{env="prod"} 20
# TYPE vmod_redis_commands_failed counter
vmod_redis_commands_failed{env="prod"} 0
# TYPE vmod_redis_commands_retried counter
vmod_redis_commands_retried{env="prod"} 0
# TYPE vmod_redis_commands_error counter
vmod_redis_commands_error{env="prod"} 5
# TYPE vmod_redis_commands_noscript counter
vmod_redis_commands_noscript{env="prod"} 1
# TYPE vmod_redis_cluster_discoveries_total counter
vmod_redis_cluster_discoveries_total{env="prod"} 0
# TYPE vmod_redis_cluster_discoveries_failed counter
vmod_redis_cluster_discoveries_failed{env="prod"} 0
# TYPE vmod_redis_cluster_replies_moved counter
vmod_redis_cluster_replies_moved{env="prod"} 0
# TYPE vmod_redis_cluster_replies_ask counter
vmod_redis_cluster_replies_ask{env="prod"} 0
"#;

fn stats_with(values: &[(Counter, u64)]) -> Stats {
    let s = Stats::default();
    for &(c, n) in values {
        s.add(c, n);
    }
    s
}

/// The state of `db` after `requests` requests of the capture.
pub(super) fn captured_db(requests: u64) -> Stats {
    stats_with(&[
        (Counter::ServersTotal, 1),
        (Counter::ConnectionsTotal, 1),
        (Counter::CommandsTotal, 4 * requests),
        (Counter::CommandsError, requests),
        (Counter::CommandsNoscript, 1),
    ])
}

const DB: StatsContext<'static> = StatsContext {
    db_name: "db",
    servers: &[],
};

fn json(s: &Stats, ctx: &StatsContext) -> String {
    let mut out = String::new();
    s.write_json(&mut out, ctx);
    out
}

fn prom(s: &Stats, ctx: &StatsContext, opts: &PrometheusOptions) -> String {
    let mut out = String::new();
    s.write_prometheus(&mut out, ctx, opts);
    out
}

#[test]
fn counter_names_round_trip() {
    let mut seen = std::collections::HashSet::new();
    for (i, c) in Counter::ALL.into_iter().enumerate() {
        assert_eq!(c as usize, i, "{c:?}: ALL order must match discriminants");
        assert_eq!(Counter::from_name(c.json_name()), Some(c));
        assert!(seen.insert(c.json_name()), "duplicate {}", c.json_name());
    }
    assert_eq!(
        Counter::DroppedHungUp.json_name(),
        "connections.dropped.hung_up"
    );
    for bad in [
        "",
        "bogus",
        "commands",
        "Commands.Total",
        "commands.total ",
        "commands_total",
    ] {
        assert_eq!(Counter::from_name(bad), None, "{bad:?}");
    }
}

#[test]
fn the_varnishstat_segment_has_every_counter_in_order() {
    let expected: Vec<String> = Counter::ALL
        .iter()
        .map(|c| c.json_name().replace('.', "_"))
        .collect();
    assert_eq!(
        VSC_NAMES.to_vec(),
        expected,
        "vmod_redis.vsc vs Counter::ALL"
    );
}

/// Memory the test can read behind the Stats' back, as varnishstat does.
struct Shared(
    std::sync::Arc<[AtomicU64; Counter::COUNT]>,
    std::sync::Arc<AtomicU64>,
);

impl CounterMemory for Shared {
    fn cells(&self) -> &[AtomicU64; Counter::COUNT] {
        &self.0
    }
    fn set_visible(&self, visible: bool) {
        self.1.store(u64::from(visible), Ordering::Relaxed);
    }
}

#[test]
fn counters_live_in_the_memory_they_are_given() {
    let cells = std::sync::Arc::new(std::array::from_fn(|_| AtomicU64::new(0)));
    let visible = std::sync::Arc::new(AtomicU64::new(7));
    let s = Stats::in_memory(Box::new(Shared(cells.clone(), visible.clone())));
    s.inc(Counter::CommandsTotal);
    s.add(Counter::DroppedHungUp, 3);
    assert_eq!(
        cells[Counter::CommandsTotal as usize].load(Ordering::Relaxed),
        1
    );
    assert_eq!(
        cells[Counter::DroppedHungUp as usize].load(Ordering::Relaxed),
        3
    );
    assert_eq!(s.counter("connections.dropped.hung_up"), Some(3));
    s.set_visible(false);
    assert_eq!(visible.load(Ordering::Relaxed), 0);
    s.set_visible(true);
    assert_eq!(visible.load(Ordering::Relaxed), 1);
}

#[test]
fn counting() {
    let s = Stats::default();
    assert_eq!(s.snapshot(), [0; Counter::COUNT]);
    s.inc(Counter::CommandsTotal);
    s.inc(Counter::CommandsTotal);
    s.add(Counter::DroppedTtl, 40);
    s.add(Counter::DroppedTtl, 2);
    assert_eq!(s.get(Counter::CommandsTotal), 2);
    assert_eq!(s.get(Counter::DroppedTtl), 42);
    assert_eq!(s.get(Counter::CommandsFailed), 0);
    assert_eq!(s.counter("commands.total"), Some(2));
    assert_eq!(s.counter("connections.dropped.ttl"), Some(42));
    assert_eq!(s.counter("workers.blocked"), Some(0));
    assert_eq!(s.counter("bogus"), None);
    let snap = s.snapshot();
    assert_eq!(snap[Counter::DroppedTtl as usize], 42);
    assert_eq!(snap.iter().sum::<u64>(), 44);
}

#[test]
fn concurrent_increments_are_not_lost() {
    let s = Stats::default();
    std::thread::scope(|scope| {
        for _ in 0..4 {
            scope.spawn(|| {
                for _ in 0..10_000 {
                    s.inc(Counter::CommandsTotal);
                    s.add(Counter::WorkersBlocked, 2);
                }
            });
        }
    });
    assert_eq!(s.get(Counter::CommandsTotal), 40_000);
    assert_eq!(s.get(Counter::WorkersBlocked), 80_000);
}

#[test]
fn json_is_byte_for_byte_the_c_vmods() {
    assert_eq!(json(&captured_db(1), &DB), C_JSON);
    let unreachable = stats_with(&[
        (Counter::ServersTotal, 1),
        (Counter::ConnectionsFailed, 2),
        (Counter::CommandsFailed, 2),
    ]);
    let ctx = StatsContext {
        db_name: "other",
        servers: &[],
    };
    assert_eq!(json(&unreachable, &ctx), C_JSON_UNREACHABLE);
}

#[test]
fn json_appends_to_the_buffer() {
    let mut out = String::from("x");
    captured_db(1).write_json(&mut out, &DB);
    assert_eq!(out, format!("x{C_JSON}"));
}

#[test]
fn json_parses_and_has_every_key() {
    // Distinct values so a key wired to the wrong counter shows.
    let s = Stats::default();
    for (i, c) in Counter::ALL.into_iter().enumerate() {
        s.add(c, 100 + i as u64);
    }
    let text = json(&s, &DB);
    let parsed = parse_json(&text);
    let flat = flatten(&parsed);
    assert_eq!(flat.len(), Counter::C_VMOD, "{flat:?}");
    for (i, c) in Counter::ALL[..Counter::C_VMOD].iter().copied().enumerate() {
        assert_eq!(
            flat.get(c.json_name()).copied(),
            Some(&Json::Num(100 + i as u64))
        );
    }
    // The captured reference has exactly the same keys.
    let parsed = parse_json(C_JSON);
    let reference = flatten(&parsed);
    assert!(reference.keys().eq(flat.keys()));
}

pub(super) fn servers() -> Vec<ServerSnapshot> {
    vec![
        ServerSnapshot {
            location: "127.0.0.1:6379".into(),
            role: Role::Master,
            sick: false,
            connections_open: 3,
            connections_idle: 2,
            commands_in_flight: 5,
        },
        ServerSnapshot {
            location: "/run/a \"b\"\\c\n.sock".into(),
            role: Role::Auto,
            sick: true,
            connections_open: 0,
            connections_idle: 0,
            commands_in_flight: 0,
        },
    ]
}

#[test]
fn json_with_servers_appends_server_list() {
    let servers = servers();
    let ctx = StatsContext {
        db_name: "db",
        servers: &servers,
    };
    let stats = captured_db(1);
    stats.add(Counter::DroppedState, 7);
    stats.inc(Counter::PipelineBatchSize4);
    let text = json(&stats, &ctx);
    // The C part is unchanged; the [ext] counters, then the list.
    assert!(text.starts_with(&C_JSON[..C_JSON.len() - 1]), "{text}");
    assert_eq!(
        &text[C_JSON.len() - 1..],
        r#","ext": {"connections": {"dropped": {"state": 7}},"pipelining": {"batches": 0,"commands": 0,"batch_size": {"1": 0,"2_3": 0,"4_7": 1,"8_15": 0,"16_31": 0,"32_63": 0,"64_up": 0}},"near_cache": {"hits": 0,"misses": 0,"invalidations": 0,"evictions": 0,"refused": 0,"too_large": 0,"entries": 0,"bytes": 0},"tls": {"name_mismatch": 0},"sentinel": {"failed": 0}},"server_list": [{"location": "127.0.0.1:6379","role": "master","sick": false,"connections": {"open": 3,"idle": 2},"commands": {"in_flight": 5}},{"location": "/run/a \"b\"\\c\n.sock","role": "auto","sick": true,"connections": {"open": 0,"idle": 0},"commands": {"in_flight": 0}}]}"#
    );
    let Json::Obj(root) = parse_json(&text) else {
        panic!("not an object")
    };
    let (_, Json::Arr(list)) = root.last().unwrap() else {
        panic!("no list")
    };
    let Json::Obj(second) = &list[1] else {
        panic!("not an object")
    };
    assert_eq!(
        second[0],
        ("location".into(), Json::Str(servers[1].location.clone()))
    );
    assert_eq!(second[2], ("sick".into(), Json::Bool(true)));
}

#[test]
fn json_string_escapes() {
    let mut out = String::new();
    json_string(&mut out, "a\"b\\c\nd\re\tf\u{1}g\u{1f}h\u{7f}é");
    assert_eq!(
        out,
        r#""a\"b\\c\nd\re\tf\u0001g\u001fh"#.to_owned() + "\u{7f}é\""
    );
    assert_eq!(
        parse_json(&out),
        Json::Str("a\"b\\c\nd\re\tf\u{1}g\u{1f}h\u{7f}é".into())
    );
}

#[test]
fn prometheus_is_byte_for_byte_the_c_vmods() {
    let defaults = PrometheusOptions::default();
    assert_eq!(prom(&captured_db(2), &DB, &defaults), C_PROM);
    let no_default = PrometheusOptions {
        default_labels: false,
        ..defaults
    };
    assert_eq!(
        prom(&captured_db(3), &DB, &no_default),
        C_PROM_NO_DEFAULT_LABELS
    );
    let extra_prefix = PrometheusOptions {
        name_prefix: "x_",
        default_labels: true,
        extra_labels: r#"env="prod",dc="x""#,
    };
    assert_eq!(
        prom(&captured_db(4), &DB, &extra_prefix),
        C_PROM_EXTRA_PREFIX
    );
    let extra_no_default = PrometheusOptions {
        name_prefix: "vmod_redis_",
        default_labels: false,
        extra_labels: r#"env="prod""#,
    };
    assert_eq!(
        prom(&captured_db(5), &DB, &extra_no_default),
        C_PROM_EXTRA_NO_DEFAULT
    );
}

#[test]
fn prometheus_empty_prefix_means_default() {
    let opts = PrometheusOptions {
        name_prefix: "",
        ..PrometheusOptions::default()
    };
    assert_eq!(prom(&captured_db(2), &DB, &opts), C_PROM);
}

#[test]
fn prometheus_extra_labels_are_trimmed() {
    for extra in [r#"env="prod","#, r#" env="prod" , "#, r#",env="prod""#] {
        let opts = PrometheusOptions {
            default_labels: false,
            extra_labels: extra,
            ..PrometheusOptions::default()
        };
        assert_eq!(
            prom(&captured_db(5), &DB, &opts),
            C_PROM_EXTRA_NO_DEFAULT,
            "{extra:?}"
        );
    }
    let opts = PrometheusOptions {
        default_labels: false,
        extra_labels: " , ",
        ..PrometheusOptions::default()
    };
    assert_eq!(prom(&captured_db(3), &DB, &opts), C_PROM_NO_DEFAULT_LABELS);
}

#[test]
fn prometheus_custom_prefix_and_every_counter() {
    let s = Stats::default();
    for (i, c) in Counter::ALL.into_iter().enumerate() {
        s.add(c, 100 + i as u64);
    }
    let text = prom(
        &s,
        &DB,
        &PrometheusOptions {
            name_prefix: "varnish_redis_",
            ..PrometheusOptions::default()
        },
    );
    assert!(text.ends_with('\n'));
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines.iter().filter(|l| l.starts_with("# TYPE ")).count(),
        15
    );
    assert_eq!(lines.len(), 15 + Counter::C_VMOD);
    for (i, c) in Counter::ALL[..Counter::C_VMOD].iter().copied().enumerate() {
        let sample = match c.json_name().strip_prefix("connections.dropped.") {
            Some(reason) => format!(
                "varnish_redis_connections_dropped{{name=\"db\",reason=\"{reason}\"}} {}",
                100 + i
            ),
            None => format!(
                "varnish_redis_{}{{name=\"db\"}} {}",
                c.json_name().replace('.', "_"),
                100 + i
            ),
        };
        assert_eq!(
            lines.iter().filter(|l| **l == sample).count(),
            1,
            "{sample}"
        );
    }
    for line in lines {
        assert!(line.starts_with("varnish_redis_") || line.starts_with("# TYPE varnish_redis_"));
    }
}

#[test]
fn prometheus_escapes_label_values() {
    let ctx = StatsContext {
        db_name: "d\"b\\\n",
        servers: &[],
    };
    let text = prom(&Stats::default(), &ctx, &PrometheusOptions::default());
    assert_eq!(
        text.lines().nth(1),
        Some(r#"vmod_redis_servers_total{name="d\"b\\\n"} 0"#)
    );
    let mut out = String::new();
    label_value(&mut out, "plain-é");
    assert_eq!(out, "plain-é");
}

/// The gauges appended after the C VMOD's families when servers are
/// passed.
const SERVER_GAUGES: &str = r#"# TYPE vmod_redis_server_info gauge
vmod_redis_server_info{env="prod",name="db",server="127.0.0.1:6379",role="master"} 1
vmod_redis_server_info{env="prod",name="db",server="/run/a \"b\"\\c\n.sock",role="auto"} 1
# TYPE vmod_redis_server_sick gauge
vmod_redis_server_sick{env="prod",name="db",server="127.0.0.1:6379"} 0
vmod_redis_server_sick{env="prod",name="db",server="/run/a \"b\"\\c\n.sock"} 1
# TYPE vmod_redis_server_connections_open gauge
vmod_redis_server_connections_open{env="prod",name="db",server="127.0.0.1:6379"} 3
vmod_redis_server_connections_open{env="prod",name="db",server="/run/a \"b\"\\c\n.sock"} 0
# TYPE vmod_redis_server_connections_idle gauge
vmod_redis_server_connections_idle{env="prod",name="db",server="127.0.0.1:6379"} 2
vmod_redis_server_connections_idle{env="prod",name="db",server="/run/a \"b\"\\c\n.sock"} 0
# TYPE vmod_redis_server_commands_in_flight gauge
vmod_redis_server_commands_in_flight{env="prod",name="db",server="127.0.0.1:6379"} 5
vmod_redis_server_commands_in_flight{env="prod",name="db",server="/run/a \"b\"\\c\n.sock"} 0
"#;

#[test]
fn prometheus_with_servers_appends_gauges() {
    let servers = servers();
    let ctx = StatsContext {
        db_name: "db",
        servers: &servers,
    };
    let opts = PrometheusOptions {
        extra_labels: r#"env="prod""#,
        ..PrometheusOptions::default()
    };
    let stats = captured_db(2);
    stats.add(Counter::DroppedState, 7);
    stats.add(Counter::PipelineBatches, 2);
    stats.add(Counter::PipelineCommands, 9);
    stats.inc(Counter::PipelineBatchSize1);
    stats.inc(Counter::PipelineBatchSize8);
    let text = prom(&stats, &ctx, &opts);
    let counters = prom(&stats, &DB, &opts);
    let ext = "# TYPE vmod_redis_ext_connections_dropped_state counter\n\
               vmod_redis_ext_connections_dropped_state{env=\"prod\",name=\"db\"} 7\n\
               # TYPE vmod_redis_ext_pipelining_batches counter\n\
               vmod_redis_ext_pipelining_batches{env=\"prod\",name=\"db\"} 2\n\
               # TYPE vmod_redis_ext_pipelining_commands counter\n\
               vmod_redis_ext_pipelining_commands{env=\"prod\",name=\"db\"} 9\n\
               # TYPE vmod_redis_ext_pipelining_batch_size counter\n\
               vmod_redis_ext_pipelining_batch_size{env=\"prod\",name=\"db\",size=\"1\"} 1\n\
               vmod_redis_ext_pipelining_batch_size{env=\"prod\",name=\"db\",size=\"2_3\"} 0\n\
               vmod_redis_ext_pipelining_batch_size{env=\"prod\",name=\"db\",size=\"4_7\"} 0\n\
               vmod_redis_ext_pipelining_batch_size{env=\"prod\",name=\"db\",size=\"8_15\"} 1\n\
               vmod_redis_ext_pipelining_batch_size{env=\"prod\",name=\"db\",size=\"16_31\"} 0\n\
               vmod_redis_ext_pipelining_batch_size{env=\"prod\",name=\"db\",size=\"32_63\"} 0\n\
               vmod_redis_ext_pipelining_batch_size{env=\"prod\",name=\"db\",size=\"64_up\"} 0\n\
               # TYPE vmod_redis_ext_near_cache_hits counter\n\
               vmod_redis_ext_near_cache_hits{env=\"prod\",name=\"db\"} 0\n\
               # TYPE vmod_redis_ext_near_cache_misses counter\n\
               vmod_redis_ext_near_cache_misses{env=\"prod\",name=\"db\"} 0\n\
               # TYPE vmod_redis_ext_near_cache_invalidations counter\n\
               vmod_redis_ext_near_cache_invalidations{env=\"prod\",name=\"db\"} 0\n\
               # TYPE vmod_redis_ext_near_cache_evictions counter\n\
               vmod_redis_ext_near_cache_evictions{env=\"prod\",name=\"db\"} 0\n\
               # TYPE vmod_redis_ext_near_cache_refused counter\n\
               vmod_redis_ext_near_cache_refused{env=\"prod\",name=\"db\"} 0\n\
               # TYPE vmod_redis_ext_near_cache_too_large counter\n\
               vmod_redis_ext_near_cache_too_large{env=\"prod\",name=\"db\"} 0\n\
               # TYPE vmod_redis_ext_near_cache_entries gauge\n\
               vmod_redis_ext_near_cache_entries{env=\"prod\",name=\"db\"} 0\n\
               # TYPE vmod_redis_ext_near_cache_bytes gauge\n\
               vmod_redis_ext_near_cache_bytes{env=\"prod\",name=\"db\"} 0\n\
               # TYPE vmod_redis_ext_tls_name_mismatch counter\n\
               vmod_redis_ext_tls_name_mismatch{env=\"prod\",name=\"db\"} 0\n\
               # TYPE vmod_redis_ext_sentinel_failed counter\n\
               vmod_redis_ext_sentinel_failed{env=\"prod\",name=\"db\"} 0\n";
    assert_eq!(text, format!("{counters}{ext}{SERVER_GAUGES}"));

    // Without default labels: no name; the gauges keep `server` (each
    // server its own series) and `role`.
    let opts = PrometheusOptions {
        default_labels: false,
        ..PrometheusOptions::default()
    };
    let text = prom(&captured_db(3), &ctx, &opts);
    let gauges = text.strip_prefix(C_PROM_NO_DEFAULT_LABELS).unwrap();
    assert_eq!(
        gauges,
        "# TYPE vmod_redis_ext_connections_dropped_state counter\n\
         vmod_redis_ext_connections_dropped_state{} 0\n\
         # TYPE vmod_redis_ext_pipelining_batches counter\n\
         vmod_redis_ext_pipelining_batches{} 0\n\
         # TYPE vmod_redis_ext_pipelining_commands counter\n\
         vmod_redis_ext_pipelining_commands{} 0\n\
         # TYPE vmod_redis_ext_pipelining_batch_size counter\n\
         vmod_redis_ext_pipelining_batch_size{size=\"1\"} 0\n\
         vmod_redis_ext_pipelining_batch_size{size=\"2_3\"} 0\n\
         vmod_redis_ext_pipelining_batch_size{size=\"4_7\"} 0\n\
         vmod_redis_ext_pipelining_batch_size{size=\"8_15\"} 0\n\
         vmod_redis_ext_pipelining_batch_size{size=\"16_31\"} 0\n\
         vmod_redis_ext_pipelining_batch_size{size=\"32_63\"} 0\n\
         vmod_redis_ext_pipelining_batch_size{size=\"64_up\"} 0\n\
         # TYPE vmod_redis_ext_near_cache_hits counter\n\
         vmod_redis_ext_near_cache_hits{} 0\n\
         # TYPE vmod_redis_ext_near_cache_misses counter\n\
         vmod_redis_ext_near_cache_misses{} 0\n\
         # TYPE vmod_redis_ext_near_cache_invalidations counter\n\
         vmod_redis_ext_near_cache_invalidations{} 0\n\
         # TYPE vmod_redis_ext_near_cache_evictions counter\n\
         vmod_redis_ext_near_cache_evictions{} 0\n\
         # TYPE vmod_redis_ext_near_cache_refused counter\n\
         vmod_redis_ext_near_cache_refused{} 0\n\
         # TYPE vmod_redis_ext_near_cache_too_large counter\n\
         vmod_redis_ext_near_cache_too_large{} 0\n\
         # TYPE vmod_redis_ext_near_cache_entries gauge\n\
         vmod_redis_ext_near_cache_entries{} 0\n\
         # TYPE vmod_redis_ext_near_cache_bytes gauge\n\
         vmod_redis_ext_near_cache_bytes{} 0\n\
         # TYPE vmod_redis_ext_tls_name_mismatch counter\n\
         vmod_redis_ext_tls_name_mismatch{} 0\n\
         # TYPE vmod_redis_ext_sentinel_failed counter\n\
         vmod_redis_ext_sentinel_failed{} 0\n\
         # TYPE vmod_redis_server_info gauge\n\
         vmod_redis_server_info{server=\"127.0.0.1:6379\",role=\"master\"} 1\n\
         vmod_redis_server_info{server=\"/run/a \\\"b\\\"\\\\c\\n.sock\",role=\"auto\"} 1\n\
         # TYPE vmod_redis_server_sick gauge\n\
         vmod_redis_server_sick{server=\"127.0.0.1:6379\"} 0\n\
         vmod_redis_server_sick{server=\"/run/a \\\"b\\\"\\\\c\\n.sock\"} 1\n\
         # TYPE vmod_redis_server_connections_open gauge\n\
         vmod_redis_server_connections_open{server=\"127.0.0.1:6379\"} 3\n\
         vmod_redis_server_connections_open{server=\"/run/a \\\"b\\\"\\\\c\\n.sock\"} 0\n\
         # TYPE vmod_redis_server_connections_idle gauge\n\
         vmod_redis_server_connections_idle{server=\"127.0.0.1:6379\"} 2\n\
         vmod_redis_server_connections_idle{server=\"/run/a \\\"b\\\"\\\\c\\n.sock\"} 0\n\
         # TYPE vmod_redis_server_commands_in_flight gauge\n\
         vmod_redis_server_commands_in_flight{server=\"127.0.0.1:6379\"} 5\n\
         vmod_redis_server_commands_in_flight{server=\"/run/a \\\"b\\\"\\\\c\\n.sock\"} 0\n"
    );
}

#[test]
fn batch_sizes_fall_in_power_of_two_buckets() {
    let cases = [
        (1, Counter::PipelineBatchSize1),
        (2, Counter::PipelineBatchSize2),
        (3, Counter::PipelineBatchSize2),
        (4, Counter::PipelineBatchSize4),
        (7, Counter::PipelineBatchSize4),
        (8, Counter::PipelineBatchSize8),
        (15, Counter::PipelineBatchSize8),
        (16, Counter::PipelineBatchSize16),
        (31, Counter::PipelineBatchSize16),
        (32, Counter::PipelineBatchSize32),
        (63, Counter::PipelineBatchSize32),
        (64, Counter::PipelineBatchSize64),
        (10_000, Counter::PipelineBatchSize64),
    ];
    for (commands, counter) in cases {
        assert_eq!(Counter::batch_size(commands), counter, "{commands}");
    }
}
