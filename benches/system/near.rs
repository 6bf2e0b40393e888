//! [ext] The near cache (issue 24), ours only:
//! * `--s2-read-heavy`: per request 3 GETs of hot keys (3 x 1,000 keys,
//!   preloaded, chosen by digits of `req.xid`), `wrk -c400`; columns: the
//!   same VCL with no Redis call (the ceiling), private with
//!   `near_cache` (64 MB), private without;
//! * `--s2-write-heavy`: per request SET + GET of a fresh key (`"w" +
//!   req.xid`: nothing ever hits), private with and without `near_cache`:
//!   what tracking costs when it saves nothing;
//! * `--s1-cached`: the S1 slope (µs per command over N = 0, 1, 2, 4, 8)
//!   of a GET the near cache serves, beside the same GET uncached.
//!
//! Redis CPU per request: `INFO cpu` (sys + user) delta over the measured
//! run, divided by the requests wrk counted.
use super::*;

/// The near cache's byte budget in these runs.
const NEAR_CACHE_BYTES: u64 = 64 << 20;
/// Hot keys: `HOT_PREFIXES` x 1,000 (three decimal digits each).
const HOT_PREFIXES: [&str; 3] = ["ha", "hb", "hc"];

/// The S2 variant `--s2-read-heavy` or `--s2-write-heavy` chose.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum S2Variant {
    /// Seed 000's SET + GET + EVAL.
    Seed,
    ReadHeavy,
    WriteHeavy,
}

/// A column of a near-cache run.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum NearColumn {
    /// The same VCL, no Redis call.
    Ceiling,
    /// Private connections, `near_cache` of this many MiB.
    Near(u32),
    /// Private connections, no near cache.
    Private,
}

impl NearColumn {
    fn label(self) -> String {
        match self {
            NearColumn::Ceiling => "no Redis (ceiling)".into(),
            NearColumn::Near(mib) => format!("private + near_cache {mib} MiB"),
            NearColumn::Private => "private".into(),
        }
    }
}

pub(crate) struct NearRuns {
    pub(crate) variant: S2Variant,
    /// Each column's runs, `--s2-reps` of them, alternated.
    pub(crate) runs: Vec<(NearColumn, Vec<Run>)>,
}

fn db_vcl(redis: &Redis, near_mib: Option<u32>) -> Res<String> {
    let (location, _) = redis.location(Transport::Tcp)?;
    let mut db = DbSpec::master(&location, 0, false, 1);
    if let Some(mib) = near_mib {
        db.extra
            .push(format!("near_cache={}", u64::from(mib) << 20));
    }
    Ok(db.vcl())
}

/// The read-heavy VCL: three GETs of hot keys, each checked to be a
/// string (else a 501); `calls` false: the keys are made, no command sent.
pub(crate) fn read_heavy_vcl(import: &str, db: &str, calls: bool) -> String {
    // Three windows of the xid's digits (zero-padded first): three keys of
    // 1,000 each per request, not all moving together.
    let digits = ["^.*(...)$", "^.*(...).$", "^.*(...)..$"];
    let mut body = String::new();
    for (prefix, pattern) in HOT_PREFIXES.iter().zip(digits) {
        let _ = writeln!(
            body,
            "        set req.http.{prefix} = \"{prefix}\" + regsub(\"00000\" + req.xid, \"{pattern}\", \"\\1\");"
        );
        if calls {
            let _ = write!(
                body,
                "        db.command(\"GET\");
        db.push(req.http.{prefix});
        db.execute(true);
        if (!db.reply_is_string()) {{
            set resp.status = 501;
        }}
        db.free();
"
            );
        }
    }
    finish_vcl(import, db, &body)
}

/// The write-heavy VCL: SET and GET of a key no request used before.
pub(crate) fn write_heavy_vcl(import: &str, db: &str) -> String {
    let body = "        db.command(\"SET\");
        db.push(\"w\" + req.xid);
        db.push(\"Hello world!\");
        db.execute(true);
        if (!db.reply_is_status()) {
            set resp.status = 500;
        }
        db.free();
        db.command(\"GET\");
        db.push(\"w\" + req.xid);
        db.execute(true);
        if (!db.reply_is_string()) {
            set resp.status = 501;
        }
        db.free();
";
    finish_vcl(import, db, body)
}

fn finish_vcl(import: &str, db: &str, body: &str) -> String {
    // `/near-cache`: its gauges and evictions (a near-cache column only:
    // elsewhere the counters are 0), for [`super::s2::measure`]'s samples.
    format!(
        "{} elsif (req.url == \"/near-cache\") {{
        synthetic(\"\" + db.counter(\"ext.near_cache.bytes\") + \" \" +
            db.counter(\"ext.near_cache.entries\") + \" \" +
            db.counter(\"ext.near_cache.evictions\"));
    }} else {{
{body}        synthetic(\"\");
    }}

    return (deliver);
}}
",
        vcl_head(import, db)
    )
}

/// Every hot key, by MSET of 1,000: "Hello world!", or `value_bytes`
/// of it repeated when that is not 12.
fn preload(redis: &mut Redis, value_bytes: u32) -> Res<()> {
    let value: String = "Hello world!"
        .chars()
        .cycle()
        .take(value_bytes as usize)
        .collect();
    for prefix in HOT_PREFIXES {
        let mut args = vec!["MSET".to_owned()];
        for i in 0..1000 {
            args.push(format!("{prefix}{i:03}"));
            args.push(value.clone());
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        if let Resp::Error(e) = redis.probe().command(&args)? {
            return Err(format!("MSET: {e}"));
        }
    }
    Ok(())
}

pub(crate) fn run_near_s2(
    o: &Opts,
    env: &mut Env,
    redis: &mut Redis,
    variant: S2Variant,
) -> Res<NearRuns> {
    let near = o.near_cache_mib.iter().map(|&mib| NearColumn::Near(mib));
    let columns: Vec<NearColumn> = match variant {
        S2Variant::ReadHeavy => std::iter::once(NearColumn::Ceiling)
            .chain(near)
            .chain([NearColumn::Private])
            .collect(),
        _ => near.chain([NearColumn::Private]).collect(),
    };
    if variant == S2Variant::ReadHeavy {
        preload(redis, o.s2_value_bytes)?;
    }
    let import = env.import_line(Vmod::Ours);
    let mut runs: Vec<(NearColumn, Vec<Run>)> = columns.iter().map(|&c| (c, Vec::new())).collect();
    for rep in 0..o.s2_reps {
        for (column, column_runs) in &mut runs {
            let near_mib = match column {
                NearColumn::Near(mib) => Some(*mib),
                _ => None,
            };
            let db = db_vcl(redis, near_mib)?;
            let vcl = match variant {
                S2Variant::WriteHeavy => write_heavy_vcl(&import, &db),
                _ => read_heavy_vcl(&import, &db, *column != NearColumn::Ceiling),
            };
            if variant == S2Variant::WriteHeavy {
                // Fresh keys pile up run after run.
                redis.flush()?;
            }
            let label = format!(
                "{}-{}",
                if variant == S2Variant::WriteHeavy {
                    "s2w"
                } else {
                    "s2r"
                },
                match column {
                    NearColumn::Ceiling => "none".to_owned(),
                    NearColumn::Near(mib) => format!("near{mib}m"),
                    NearColumn::Private => "private".to_owned(),
                }
            );
            let run = measure(o, env, redis, &label, &vcl)?;
            eprintln!(
                "system: {:?} {:28} #{}: {:8.0} req/s, non-2xx {}, {:.1} us CPU/req, redis {} cmds ({:.3} per req), {:.2} us redis CPU/req, RSS {} kB (peak {} kB){}",
                variant,
                column.label(),
                rep + 1,
                run.load.rps,
                run.load.non2xx,
                run.cpu_us_per_req,
                opt(run.redis_cmds()),
                redis_cmds_per_req(&run),
                redis_cpu_us_per_req(&run),
                opt(run.rss_kb),
                opt(run.rss_peak_kb),
                run.near.map_or(String::new(), |n| format!(
                    ", near_cache bytes {} (peak {}), entries {}, evictions {}",
                    n.bytes, n.peak_bytes, n.entries, n.evictions
                ))
            );
            // RSS over the run, a sample a second: does it level off?
            let series: Vec<String> = run
                .rss_samples_kb
                .iter()
                .step_by(5)
                .map(|kb| format!("{:.0}", *kb as f64 / 1024.0))
                .collect();
            eprintln!("system:   RSS MiB, a second apart: {}", series.join(" "));
            column_runs.push(run);
        }
    }
    Ok(NearRuns { variant, runs })
}

fn redis_cpu_us_per_req(run: &Run) -> f64 {
    run.redis
        .as_ref()
        .map_or(f64::NAN, |u| ratio(u.cpu_s * 1e6, run.load.requests as f64))
}

fn redis_cmds_per_req(run: &Run) -> f64 {
    run.redis_cmds()
        .map_or(f64::NAN, |c| ratio(c as f64, run.load.requests as f64))
}

pub(crate) fn near_s2_section(r: &mut String, n: &NearRuns, o: &Opts) {
    let (title, what) = match n.variant {
        S2Variant::ReadHeavy => (
            "S2 read-heavy: the near cache against the ceiling",
            "per request 3 GETs of hot keys (3 x 1,000 preloaded keys, chosen by digits of `req.xid`)",
        ),
        _ => (
            "S2 write-heavy: what tracking costs when nothing hits",
            "per request SET + GET of a fresh key (`\"w\" + req.xid`)",
        ),
    };
    let _ = writeln!(
        r,
        "## {title}\n\n{what}; ours only, private connections (`max_connections=1`); \
         `wrk -t{} -c{} -d{}s` after a {} s warm-up; median of {} run(s) per column, \
         alternated. Redis CPU per request: `INFO cpu` sys + user over the measured run / requests.\n",
        o.s2_threads, o.s2_conns, o.s2_secs, o.s2_warm, o.s2_reps
    );
    let _ = writeln!(
        r,
        "| column | req/s | min-max | non-2xx | varnishd CPU µs/req | Redis cmds/req | Redis CPU µs/req | RSS MiB end / peak | near_cache bytes peak (MiB) | evictions |\n|---|---|---|---|---|---|---|---|---|---|"
    );
    let median_of = |runs: &[Run], what: &dyn Fn(&Run) -> f64| {
        median(&runs.iter().map(what).collect::<Vec<_>>())
    };
    for (column, runs) in &n.runs {
        let rps: Vec<f64> = runs.iter().map(|r| r.load.rps).collect();
        let (lo, hi) = min_max(&rps);
        let mib = |kb: &[u64]| f(kb.iter().copied().max().unwrap_or(0) as f64 / 1024.0, 1);
        let rss: Vec<u64> = runs.iter().filter_map(|r| r.rss_kb).collect();
        let rss_peak: Vec<u64> = runs.iter().filter_map(|r| r.rss_peak_kb).collect();
        let near: Vec<NearSample> = runs.iter().filter_map(|r| r.near).collect();
        let near_peak = near.iter().map(|n| n.peak_bytes).max();
        let _ = writeln!(
            r,
            "| {} | {} | {}-{} | {} | {} | {} | {} | {} / {} | {} | {} |",
            column.label(),
            f(median(&rps), 0),
            f(lo, 0),
            f(hi, 0),
            runs.iter().map(|r| r.load.non2xx).sum::<u64>(),
            f(median_of(runs, &|r| r.cpu_us_per_req), 1),
            f(median_of(runs, &redis_cmds_per_req), 3),
            f(median_of(runs, &redis_cpu_us_per_req), 2),
            mib(&rss),
            mib(&rss_peak),
            near_peak.map_or("–".into(), |b| f(b as f64 / 1048576.0, 2)),
            near.iter()
                .map(|n| n.evictions)
                .max()
                .map_or("–".into(), |e| e.to_string())
        );
    }
    let rps_of = |c: NearColumn| {
        n.runs
            .iter()
            .find(|(col, _)| *col == c)
            .map_or(f64::NAN, |(_, runs)| {
                median(&runs.iter().map(|r| r.load.rps).collect::<Vec<_>>())
            })
    };
    let near = n
        .runs
        .iter()
        .find_map(|(c, _)| matches!(c, NearColumn::Near(_)).then_some(*c))
        .map_or(f64::NAN, rps_of);
    let line = match n.variant {
        S2Variant::ReadHeavy => {
            let ceiling = rps_of(NearColumn::Ceiling);
            format!(
                "near cache / ceiling: {} (target ≥ 0.85); near cache / private: {}",
                f(ratio(near, ceiling), 2),
                f(ratio(near, rps_of(NearColumn::Private)), 2)
            )
        }
        _ => format!(
            "near cache on / off: {} (target: within 5 %, ≥ 0.95)",
            f(ratio(near, rps_of(NearColumn::Private)), 3)
        ),
    };
    let _ = writeln!(r, "\n{line}\n");
    eprintln!("system: {line}");
    // Memory: the budget holds, and RSS stays within it plus what the
    // same load costs without a near cache.
    let peak_rss = |c: NearColumn| {
        n.runs
            .iter()
            .find(|(col, _)| *col == c)
            .and_then(|(_, runs)| runs.iter().filter_map(|r| r.rss_peak_kb).max())
    };
    let private = peak_rss(NearColumn::Private);
    for (column, runs) in &n.runs {
        let NearColumn::Near(mib) = *column else {
            continue;
        };
        let budget = u64::from(mib) << 20;
        let peak = runs
            .iter()
            .filter_map(|r| r.near.map(|n| n.peak_bytes))
            .max();
        let over = match (peak_rss(*column), private) {
            (Some(a), Some(b)) => f((a as f64 - b as f64) / 1024.0, 1),
            _ => "–".into(),
        };
        let line = format!(
            "{}: near_cache bytes peak {} of a budget of {budget} ({}); RSS peak over the private column's: {over} MiB",
            column.label(),
            opt(peak),
            match peak {
                Some(p) if p <= budget => "held",
                Some(_) => "EXCEEDED",
                None => "not sampled",
            }
        );
        let _ = writeln!(r, "{line}\n");
        eprintln!("system: {line}");
    }
}

/// S1 of a GET, cached and not.
pub(crate) struct S1Cached {
    /// [rep][cached (0) / uncached (1)][N index]: ms per request.
    pub(crate) ms: Vec<[Vec<f64>; 2]>,
}

/// One VCL, two databases: `nc` with the near cache, `db` without; URL
/// `/c/N` runs N GETs on `nc`, `/u/N` on `db`.
pub(crate) fn s1_cached_vcl(import: &str, location: &str) -> String {
    let mut nc = DbSpec::master(location, 0, false, 1);
    nc.extra.push(format!("near_cache={NEAR_CACHE_BYTES}"));
    let nc = nc.vcl().replacen("new db =", "new nc =", 1);
    let db = DbSpec::master(location, 0, false, 1).vcl();
    let mut v = vcl_head(import, &format!("{nc}{db}"));
    for (prefix, obj) in [("c", "nc"), ("u", "db")] {
        for n in S1_NS {
            let _ = writeln!(v, " elsif (req.url == \"/{prefix}/{n}\") {{");
            for _ in 0..n {
                let _ = write!(
                    v,
                    "        {obj}.command(\"GET\");
        {obj}.push(\"foo\");
        {obj}.execute(true);
        {obj}.free();
"
                );
            }
            v.push_str("        synthetic(\"\");\n    }");
        }
    }
    v.push_str(
        " else {
        set resp.status = 404;
        synthetic(\"\");
    }

    return (deliver);
}
",
    );
    v
}

pub(crate) fn run_s1_cached(o: &Opts, env: &mut Env, redis: &mut Redis) -> Res<S1Cached> {
    if let Resp::Error(e) = redis.probe().command(&["SET", "foo", "Hello world!"])? {
        return Err(format!("SET foo: {e}"));
    }
    let location = format!("127.0.0.1:{}", redis.port());
    let vcl = s1_cached_vcl(&env.import_line(Vmod::Ours), &location);
    let mut v = Varnish::start(env, "s1-cached", &vcl)?;
    let mut out = S1Cached { ms: Vec::new() };
    for rep in 0..o.reps {
        let mut per: [Vec<f64>; 2] = Default::default();
        // Cached and uncached back to back for each N: drift hits both.
        for n in S1_NS {
            for (i, prefix) in ["c", "u"].into_iter().enumerate() {
                let url = format!("http://127.0.0.1:{}/{prefix}/{n}", v.port);
                s1_load(o, &url, o.s1_warm, "S1 cached warm-up")?;
                let load = s1_load(o, &url, o.s1_secs, "S1 cached")?;
                if load.non2xx > 0 || load.socket_errors > 0 {
                    return Err(format!(
                        "S1 cached {url}: {} non-2xx, {} socket errors",
                        load.non2xx, load.socket_errors
                    ));
                }
                let ms = 1000.0 / load.rps;
                eprintln!(
                    "system: S1 rep {} GET {} N={n}: {ms:.4} ms/req",
                    rep + 1,
                    if i == 0 { "cached" } else { "uncached" }
                );
                per[i].push(ms);
            }
        }
        out.ms.push(per);
    }
    v.stop();
    Ok(out)
}

impl S1Cached {
    /// Per repetition, µs per command (least squares over N).
    pub(crate) fn slopes(&self, i: usize) -> Vec<f64> {
        self.ms
            .iter()
            .map(|rep| {
                let points: Vec<(f64, f64)> = S1_NS
                    .iter()
                    .zip(&rep[i])
                    .map(|(&n, &ms)| (f64::from(n), ms * 1000.0))
                    .collect();
                slope(&points)
            })
            .collect()
    }
}

pub(crate) fn s1_cached_section(r: &mut String, s: &S1Cached, o: &Opts) {
    let _ = writeln!(
        r,
        "## S1 of a GET: near cache against a round trip\n\nOurs only, one client \
         (`wrk -t1 -c1`), {} s per cell after a {} s warm-up, N = 0, 1, 2, 4, 8 GETs of one \
         key per request, cached (`near_cache` 64 MB) and uncached cells back to back; \
         slope = least squares of µs per request over N, per repetition ({} of them).\n",
        o.s1_secs, o.s1_warm, o.reps
    );
    let _ = writeln!(
        r,
        "| GET | slope µs/command (median) | min-max over repetitions |\n|---|---|---|"
    );
    let mut lines = Vec::new();
    for (i, what) in ["near cache (hit)", "uncached (round trip)"]
        .into_iter()
        .enumerate()
    {
        let slopes = s.slopes(i);
        let (lo, hi) = min_max(&slopes);
        let _ = writeln!(
            r,
            "| {what} | {} | {}-{} |",
            f(median(&slopes), 2),
            f(lo, 2),
            f(hi, 2)
        );
        lines.push(format!(
            "S1 GET {what}: {} µs/command (min-max {}-{})",
            f(median(&slopes), 2),
            f(lo, 2),
            f(hi, 2)
        ));
    }
    let _ = writeln!(r, "\nTarget: a cached GET ≤ 3 µs per command.\n");
    for line in lines {
        eprintln!("system: {line}");
    }
}
