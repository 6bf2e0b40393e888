//! The report's S2 and S3 sections.
use super::*;

/// A column of the load tables: its header and one run's figure.
type Figure = (&'static str, fn(&Run) -> String);

const FIGURES: [Figure; 12] = [
    ("non-2xx", |r| r.load.non2xx.to_string()),
    ("socket err", |r| r.load.socket_errors.to_string()),
    ("p50 ms", |r| f(r.load.p50_ms, 2)),
    ("p99 ms", |r| f(r.load.p99_ms, 1)),
    ("MAIN.threads", |r| opt(r.threads_mid)),
    ("Redis clients", |r| opt(r.redis_clients_mid)),
    ("connections received", |r| opt(r.conns_received())),
    ("workers.blocked", |r| opt(r.blocked)),
    ("commands.failed", |r| opt(r.cmds_failed)),
    ("RSS MiB", |r| {
        r.rss_kb.map_or("–".into(), |k| f(k as f64 / 1024.0, 1))
    }),
    ("CPU µs/req", |r| f(r.cpu_us_per_req, 1)),
    ("Redis CPU µs/cmd", |r| f(r.redis_cpu_us_per_cmd(), 2)),
];

/// A run's figure, "n/a" for a run that could not be made.
fn cell(run: &Option<Run>, show: impl Fn(&Run) -> String) -> String {
    run.as_ref().map_or_else(|| "n/a".to_owned(), show)
}

fn rps(run: &Option<Run>) -> f64 {
    run.as_ref().map_or(f64::NAN, |r| r.load.rps)
}

/// An `Option<u64>` figure as a number for medians (NaN when missing).
fn num(x: Option<u64>) -> f64 {
    x.map_or(f64::NAN, |v| v as f64)
}

pub(crate) fn load_table(
    r: &mut String,
    rows: &[Row],
    first_col: &str,
    label: fn(&RunCfg) -> String,
) {
    let mut head = format!("| {first_col} | req/s ours | req/s theirs | ours / theirs |");
    let mut rule = "|---|---:|---:|---:|".to_owned();
    for (name, _) in FIGURES {
        let _ = write!(head, " {name} o / t |");
        rule.push_str("---|");
    }
    let _ = writeln!(r, "{head}\n{rule}");
    for (cfg, [o, t]) in rows {
        let mut row = format!(
            "| {} | {} | {} | {} |",
            label(cfg),
            cell(o, |x| f(x.load.rps, 0)),
            cell(t, |x| f(x.load.rps, 0)),
            f(ratio(rps(o), rps(t)), 3)
        );
        for (_, show) in FIGURES {
            let _ = write!(row, " {} / {} |", cell(o, show), cell(t, show));
        }
        let _ = writeln!(r, "{row}");
    }
    let _ = writeln!(r);
}

/// With `--s2-cluster`: the commands each master processed per run.
fn per_master_table(r: &mut String, rows: &[Row]) {
    let _ = writeln!(
        r,
        "Commands per master during the measured run (Redis `total_commands_processed` \
         delta, the harness's INFO subtracted), and per request (5 expected: SET, GET, EVAL, \
         and the script's SET and EXPIRE, which Redis counts too):\n"
    );
    let _ = writeln!(r, "| column | VMOD | m0 | m1 | m2 | commands / request |");
    let _ = writeln!(r, "|---|---|---:|---:|---:|---:|");
    for (cfg, runs) in rows {
        for (run, vmod) in runs.iter().zip([Vmod::Ours, Vmod::Theirs]) {
            let Some(u) = run.as_ref().and_then(|x| x.redis.as_ref()) else {
                continue;
            };
            let share = |n: u64| format!("{n} ({}%)", f(ratio(100.0 * n as f64, u.cmds as f64), 0));
            let masters: Vec<String> = u.per_master.iter().map(|&n| share(n)).collect();
            let _ = writeln!(
                r,
                "| {} | {} | {} | {} |",
                cfg.column(),
                vmod.name(),
                masters.join(" | "),
                f(
                    ratio(
                        u.cmds as f64,
                        run.as_ref().map_or(0.0, |x| x.load.requests as f64)
                    ),
                    2
                )
            );
        }
    }
    let _ = writeln!(r);
}

pub(crate) fn s2_section(r: &mut String, rows: &[Row], o: &Opts, svg_name: &str, t: &mut Targets) {
    let _ = writeln!(r, "## S2: private vs shared (seed 000)\n");
    if o.s2_cluster {
        let _ = writeln!(
            r,
            "**On a Redis Cluster** of 3 masters x 1 replica (formed by tests/support/cluster.rs; \
             slots 0-5460, 5461-10922, 10923-16383), both VMODs with `type=cluster`, \
             `max_cluster_hops=16`, the seed node m0 as `location`; a shared pool's `max_connections` is per \
             server; private mode gets `max_connections=3` (the budget of each worker thread across the \
             servers, in both VMODs: one connection per master). The seed's fixed keys \"foo\" and \"bar\" would put the whole load on one \
             or two masters, so the keys here are per request (`\"foo\" + req.xid`, \
             `\"bar\" + req.xid`) and spread over the three; FLUSHALL on the masters before \
             each varnishd (those keys pile up otherwise). Redis CPU and commands are the \
             masters' (replicas left out).\n"
        );
    }
    let _ = writeln!(
        r,
        "SET + GET + EVAL per request with the seed's reply checks (500 / 501 / 502 on a wrong reply type), \
         `wrk -t{} -c{} -d{}s --latency` after a {} s warm-up with the same load; one fresh varnishd per \
         column and VMOD, ours first. \"no Redis\": the VMOD is imported and `db` created, no command runs. \
         MAIN.threads and Redis connected_clients are sampled once mid-run; connections received is the \
         delta of Redis `total_connections_received` over the measured run; workers.blocked is read from \
         `db.stats()` before and after the measured run (the delta); RSS is the varnishd child's VmRSS after the run; \
         Redis CPU µs/cmd is the delta of Redis `used_cpu_sys + used_cpu_user` over the delta of \
         `total_commands_processed` (the harness's own INFO commands subtracted; the script's \
         SET and EXPIRE count as commands too: 5 per request).\n",
        o.s2_threads, o.s2_conns, o.s2_secs, o.s2_warm
    );
    let _ = writeln!(r, "![S2 plot]({svg_name})\n");
    load_table(r, rows, "column", RunCfg::column);
    if o.s2_cluster {
        per_master_table(r, rows);
        let _ = writeln!(
            r,
            "<details><summary>VCL of S2 on the cluster (private column)</summary>\n\n```vcl\n{}```\n</details>\n",
            s2_vcl(
                "import redis;",
                &DbSpec {
                    cluster: true,
                    ..DbSpec::master("127.0.0.1:SEED_PORT", 0, false, 3)
                }
                .vcl(),
                Some(PER_REQUEST_KEYS)
            )
        );
    }
    let modes = columns(rows);
    let reps = rows.first().map_or(1, |(c, _)| c.reps);
    let medians = |m: Mode| {
        (
            median_rps(rows, |c| c.mode == m, 0),
            median_rps(rows, |c| c.mode == m, 1),
        )
    };
    if reps > 1 {
        let _ = writeln!(
            r,
            "Median req/s over the {reps} repetitions: {}\n",
            modes
                .iter()
                .map(|&m| {
                    let (o, t) = medians(m);
                    format!(
                        "{} {} / {} (×{})",
                        m.label(),
                        f(o, 0),
                        f(t, 0),
                        f(ratio(o, t), 3)
                    )
                })
                .collect::<Vec<_>>()
                .join("; ")
        );
    }
    let mut all = true;
    let mut worst = (f64::INFINITY, String::new());
    for &m in modes.iter().filter(|m| **m != Mode::NoRedis) {
        let (o, t) = medians(m);
        let q = ratio(o, t);
        all &= q >= 1.1;
        if q < worst.0 {
            worst = (q, m.label());
        }
    }
    let theirs = theirs_ran(rows);
    t.add(format!(
        "S2{} req/s ours ≥ 1.1 × theirs in every Redis column{} (lowest: {} at {}): {}",
        if o.s2_cluster { " (cluster)" } else { "" },
        if reps > 1 { ", medians" } else { "" },
        if theirs { f(worst.0, 3) } else { "n/a".into() },
        if theirs { &worst.1 } else { "–" },
        vs_theirs(theirs, all)
    ));
    let ours = || rows.iter().filter_map(|(c, r)| Some((c, r[0].as_ref()?)));
    let non2xx: u64 = ours().map(|(_, r)| r.load.non2xx).sum();
    t.add(format!(
        "S2 zero non-2xx for ours (total {non2xx}): {}",
        yes_no(non2xx == 0)
    ));
    let find = |m: Mode| ours().find(|(c, _)| c.mode == m).map(|(_, r)| r);
    if let (Some(s10), Some(p)) = (find(Mode::Shared(10)), find(Mode::Private)) {
        let q = ratio(medians(Mode::Shared(10)).0, medians(Mode::Private).0);
        t.add(format!(
            "S2 ours shared(10) / ours private = {} (target ≥ 0.95): {}; Redis clients mid-run {} vs {}",
            f(q, 3),
            yes_no(q >= 0.95),
            opt(s10.redis_clients_mid),
            opt(p.redis_clients_mid)
        ));
    }
    if let Some((_, [Some(o), Some(th)])) = rows.iter().find(|(c, _)| c.mode == Mode::Private) {
        t.add(format!(
            "S2 private: Redis connections received during the run, ours {} vs theirs {} for {} / {} requests",
            opt(o.conns_received()),
            opt(th.conns_received()),
            o.load.requests,
            th.load.requests
        ));
    }
    let rss: Vec<f64> = rows
        .iter()
        .filter_map(|(_, [o, t])| {
            Some(ratio(
                o.as_ref()?.rss_kb? as f64,
                t.as_ref()?.rss_kb? as f64,
            ))
        })
        .collect();
    if theirs {
        let _ = writeln!(
            r,
            "RSS ours / theirs: median {} (range {} – {}).\n",
            f(median(&rss), 2),
            f(min_max(&rss).0, 2),
            f(min_max(&rss).1, 2)
        );
    } else {
        let _ = writeln!(r, "RSS ours / theirs: n/a (ours only).\n");
    }
}

/// S3's TLS rows (ours only) against ours over TCP, ttl 0: the speed, and
/// the connections Redis received against the commands it ran (connection
/// reuse: no handshake per command).
fn tls_table(r: &mut String, rows: &[Row]) {
    let _ = writeln!(r, "### TLS (ours only)\n");
    let _ = writeln!(
        r,
        "Ours with `tls=true, tls_cafile=<CA>` on the server's TLS port (certificate for \
         127.0.0.1, `--tls-auth-clients no`) vs ours over TCP, both `connection_ttl` 0; \
         theirs is n/a: the C VMOD of Debian 12 is built without TLS. A TLS handshake per \
         command would show as about as many connections received as commands; pooled \
         connections show as a handful per varnishd, opened during the warm-up (\"life\": \
         from before varnishd starts to the end of the measured run; Redis has no handshake \
         counter, `total_connections_received` counts TLS connections). Medians over the \
         repetitions.\n"
    );
    let _ = writeln!(
        r,
        "| mode | req/s TLS | req/s TCP | TLS / TCP | connections received, measured run: TLS / TCP | \
         connections received, life: TLS / TCP | Redis commands, life: TLS | commands per TLS connection | \
         CPU µs/req TLS / TCP | Redis CPU µs/cmd TLS / TCP |"
    );
    let _ = writeln!(r, "|---|---:|---:|---:|---|---|---:|---:|---|---|");
    for mode in S3_MODES {
        let get = |transport: Transport, what: fn(&Run) -> f64| {
            median(&values(
                rows,
                |c| c.mode == mode && c.transport == transport && c.ttl == 0,
                0,
                what,
            ))
        };
        let pair = |what: fn(&Run) -> f64, decimals: usize| {
            format!(
                "{} / {}",
                f(get(Transport::Tls, what), decimals),
                f(get(Transport::Tcp, what), decimals)
            )
        };
        let life_conns = |x: &Run| num(x.redis_life.as_ref().map(|u| u.conns));
        let life_cmds = |x: &Run| num(x.redis_life.as_ref().map(|u| u.cmds));
        let rps = |x: &Run| x.load.rps;
        let _ = writeln!(
            r,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            mode.label(),
            f(get(Transport::Tls, rps), 0),
            f(get(Transport::Tcp, rps), 0),
            f(ratio(get(Transport::Tls, rps), get(Transport::Tcp, rps)), 3),
            pair(|x| num(x.conns_received()), 0),
            pair(life_conns, 0),
            f(get(Transport::Tls, life_cmds), 0),
            f(
                ratio(
                    get(Transport::Tls, life_cmds),
                    get(Transport::Tls, life_conns)
                ),
                0
            ),
            pair(|x| x.cpu_us_per_req, 1),
            pair(Run::redis_cpu_us_per_cmd, 2)
        );
    }
    let _ = writeln!(r);
}

pub(crate) fn s3_section(r: &mut String, rows: &[Row], o: &Opts) {
    let _ = writeln!(r, "## S3: connections (seed 003)\n");
    let _ = writeln!(
        r,
        "The S2 load (`wrk -t{} -c{} -d{}s`) on private and shared (max_connections=10), \
         TCP (127.0.0.1) vs UNIX socket location, `connection_ttl` 0 (keep) vs 1 s (reconnect every second), \
         and ours over TLS (ttl 0; theirs n/a). \
         The TCP / ttl 0 rows repeat the S2 columns in a later varnishd: compare them to see the run-to-run noise.\n",
        o.s2_threads, o.s2_conns, o.s2_secs
    );
    load_table(r, rows, "configuration", RunCfg::label);
    tls_table(r, rows);
    let get = |mode: Mode, transport: Transport, ttl: u32, vi: usize| {
        median_rps(
            rows,
            |c| c.mode == mode && c.transport == transport && c.ttl == ttl,
            vi,
        )
    };
    let (tcp, unix) = (Transport::Tcp, Transport::Unix);
    let theirs = |x: f64| {
        if theirs_ran(rows) {
            f(x, 3)
        } else {
            "n/a".into()
        }
    };
    let _ = writeln!(r, "| ratio | ours | theirs |");
    let _ = writeln!(r, "|---|---:|---:|");
    for mode in S3_MODES {
        for ttl in [0, 1] {
            let _ = writeln!(
                r,
                "| {}, ttl {ttl}: unix / tcp | {} | {} |",
                mode.label(),
                f(ratio(get(mode, unix, ttl, 0), get(mode, tcp, ttl, 0)), 3),
                theirs(ratio(get(mode, unix, ttl, 1), get(mode, tcp, ttl, 1)))
            );
        }
        for transport in [tcp, unix] {
            let _ = writeln!(
                r,
                "| {}, {}: ttl 1 / ttl 0 | {} | {} |",
                mode.label(),
                transport.label(),
                f(
                    ratio(get(mode, transport, 1, 0), get(mode, transport, 0, 0)),
                    3
                ),
                theirs(ratio(
                    get(mode, transport, 1, 1),
                    get(mode, transport, 0, 1)
                ))
            );
        }
    }
    let _ = writeln!(r);
}
