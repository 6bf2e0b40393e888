//! [ext] `redis.stats(db="*")`: one document for every database.
use super::every_database::{self, Part};
use super::test_json::parse_json;
use super::tests::{captured_db, servers, C_PROM};
use super::*;
use std::collections::{HashMap, HashSet};

fn prom_of_every(parts: &[Part], opts: &PrometheusOptions) -> String {
    let mut out = String::new();
    every_database::write_prometheus(&mut out, parts, opts);
    out
}

fn json_of_every(parts: &[Part]) -> String {
    let mut out = String::new();
    every_database::write_json(&mut out, parts);
    out
}

fn context<'a>(db_name: &'a str, servers: &'a [ServerSnapshot]) -> StatsContext<'a> {
    StatsContext { db_name, servers }
}

/// The `# TYPE` lines and the series (name and labels) of an exposition,
/// each of which a scraper takes once only.
fn families_and_series(text: &str) -> (Vec<&str>, Vec<&str>) {
    let mut families = Vec::new();
    let mut series = Vec::new();
    for line in text.lines().filter(|l| !l.starts_with("# HELP ")) {
        match line.strip_prefix("# TYPE ") {
            Some(family) => families.push(family.split(' ').next().unwrap()),
            None => series.push(line.rsplit_once(' ').unwrap().0),
        }
    }
    (families, series)
}

/// The exposition without its `# HELP` lines.
fn without_help(text: &str) -> String {
    text.lines()
        .filter(|l| !l.starts_with("# HELP "))
        .map(|l| format!("{l}\n"))
        .collect()
}

#[test]
fn one_database_is_its_own_stats_with_help_lines() {
    let db = captured_db(2);
    let opts = PrometheusOptions::default();
    let parts = [(&db, context("db", &[]))];
    assert_eq!(without_help(&prom_of_every(&parts, &opts)), C_PROM);

    let servers = servers();
    let alone = context("db", &servers);
    let mut own = String::new();
    db.write_prometheus(&mut own, &alone, &opts);
    assert!(
        !own.contains("# HELP"),
        "db.stats() is the C VMOD's text, without HELP:\n{own}"
    );
    assert_eq!(without_help(&prom_of_every(&[(&db, alone)], &opts)), own);
}

/// Each family has one `# HELP` line, right before its `# TYPE` line, with
/// a description (promtool lints a family without one).
#[test]
fn every_family_has_its_help_line_before_its_type_line() {
    let (a, b) = (captured_db(1), captured_db(2));
    let servers = servers();
    let text = prom_of_every(
        &[(&a, context("a", &servers)), (&b, context("b", &servers))],
        &PrometheusOptions::default(),
    );
    let lines: Vec<&str> = text.lines().collect();
    let mut types = 0;
    for (i, line) in lines.iter().enumerate() {
        let Some(typed) = line.strip_prefix("# TYPE ") else {
            continue;
        };
        types += 1;
        let family = typed.split(' ').next().unwrap();
        let help = lines[i - 1]
            .strip_prefix("# HELP ")
            .and_then(|h| h.strip_prefix(family))
            .and_then(|h| h.strip_prefix(' '))
            .unwrap_or_else(|| panic!("no HELP right before {line:?}"));
        assert!(help.len() > 10, "{family}: {help:?}");
    }
    let helps = lines.iter().filter(|l| l.starts_with("# HELP ")).count();
    // Every counter, the 6 reasons and 7 sizes as one family each, and
    // the 5 server gauges.
    let families = Counter::COUNT - 5 - 6 + 5;
    assert_eq!((types, helps), (families, families), "{text}");
    assert!(text.contains(
        "# HELP vmod_redis_commands_total Sends that got a reply, error replies included\n\
         # TYPE vmod_redis_commands_total counter\n"
    ));
    assert!(text.contains("# HELP vmod_redis_connections_dropped Connections closed, by reason: "));
    assert!(text.contains(
        "# HELP vmod_redis_ext_sentinel_failed [ext] Sessions with a Sentinel that failed"
    ));
}

/// The texts come from vmod_redis.vsc (varnishstat's): one line each, with
/// nothing the text format would have to escape.
#[test]
fn every_counter_has_a_one_line_help() {
    for c in Counter::ALL {
        let help = c.help();
        assert!(
            !help.is_empty() && !help.contains(['\n', '\\']),
            "{c:?}: {help:?}"
        );
        assert!(
            help.len() <= 100,
            "{c:?}: a short description, not {help:?}"
        );
    }
}

#[test]
fn two_databases_have_each_family_once_and_every_series() {
    let (a, b) = (captured_db(2), captured_db(5));
    let servers = servers();
    for extended in [false, true] {
        let shown: &[ServerSnapshot] = if extended { &servers } else { &[] };
        let opts = PrometheusOptions {
            extra_labels: r#"env="prod""#,
            ..PrometheusOptions::default()
        };
        let text = prom_of_every(
            &[(&a, context("a", shown)), (&b, context("b", shown))],
            &opts,
        );
        let (families, series) = families_and_series(&text);
        let unique: HashSet<&str> = families.iter().copied().collect();
        assert_eq!(
            unique.len(),
            families.len(),
            "a # TYPE line repeats:\n{text}"
        );
        let unique: HashSet<&str> = series.iter().copied().collect();
        assert_eq!(unique.len(), series.len(), "a series repeats:\n{text}");

        // Every sample of each database's own output is there, under the
        // same family, the databases in order.
        let mut family_of: HashMap<&str, &str> = HashMap::new();
        let mut current = "";
        for line in text.lines().filter(|l| !l.starts_with("# HELP ")) {
            match line.strip_prefix("# TYPE ") {
                Some(family) => current = family,
                None => {
                    family_of.insert(line, current);
                }
            }
        }
        for (stats, name) in [(&a, "a"), (&b, "b")] {
            let mut own = String::new();
            stats.write_prometheus(&mut own, &context(name, shown), &opts);
            let mut own_family = "";
            for line in own.lines() {
                match line.strip_prefix("# TYPE ") {
                    Some(family) => own_family = family,
                    None => assert_eq!(family_of.get(line), Some(&own_family), "{line}"),
                }
            }
            assert_eq!(
                own.lines().filter(|l| !l.starts_with('#')).count() * 2,
                series.len()
            );
        }
        assert!(text.contains(
            "# TYPE vmod_redis_commands_total counter\n\
             vmod_redis_commands_total{env=\"prod\",name=\"a\"} 8\n\
             vmod_redis_commands_total{env=\"prod\",name=\"b\"} 20\n"
        ));
    }
}

#[test]
fn the_name_and_server_labels_stay_without_default_labels() {
    let (a, b) = (captured_db(1), captured_db(1));
    // Two servers each: the `server` label tells their gauges apart.
    let servers = &servers();
    let opts = PrometheusOptions {
        default_labels: false,
        ..PrometheusOptions::default()
    };
    let text = prom_of_every(
        &[(&a, context("a", servers)), (&b, context("b", servers))],
        &opts,
    );
    let (_, series) = families_and_series(&text);
    let unique: HashSet<&str> = series.iter().copied().collect();
    assert_eq!(unique.len(), series.len(), "a series repeats:\n{text}");
    assert!(text.contains("\nvmod_redis_connections_dropped{name=\"b\",reason=\"sick\"} 0\n"));
    assert!(text.contains(
        "\nvmod_redis_server_info{name=\"a\",server=\"127.0.0.1:6379\",role=\"master\"} 1\n"
    ));
}

#[test]
fn json_is_one_object_keyed_by_database() {
    let (a, b) = (captured_db(1), captured_db(3));
    let servers = servers();
    for shown in [&[][..], &servers[..]] {
        let text = json_of_every(&[(&a, context("a", shown)), (&b, context("b", shown))]);
        let mut own_a = String::new();
        a.write_json(&mut own_a, &context("a", shown));
        let mut own_b = String::new();
        b.write_json(&mut own_b, &context("b", shown));
        assert_eq!(text, format!("{{\"a\": {own_a},\"b\": {own_b}}}"));
        let super::test_json::Json::Obj(members) = parse_json(&text) else {
            panic!("not an object: {text}");
        };
        let keys: Vec<&str> = members.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["a", "b"]);
        assert_eq!(members[0].1, parse_json(&own_a));
    }
}

#[test]
fn no_database_is_an_empty_document() {
    assert_eq!(json_of_every(&[]), "{}");
    assert_eq!(prom_of_every(&[], &PrometheusOptions::default()), "");
}
