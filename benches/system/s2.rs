//! S2 / S3 (seeds 000, 003): private vs shared under load, and connection settings.
use super::*;

// S2 / S3

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Mode {
    NoRedis,
    Private,
    Shared(u32),
    /// Ours with [ext] `pipelining=true` on this many connections; the C
    /// VMOD, which cannot pipeline, runs as `Shared` with as many.
    Pipelined(u32),
}

impl Mode {
    pub(crate) fn label(self) -> String {
        match self {
            Mode::NoRedis => "no Redis".into(),
            Mode::Private => "private".into(),
            Mode::Shared(n) => format!("shared {n}"),
            Mode::Pipelined(n) => format!("pipelined {n} (theirs: shared {n})"),
        }
    }
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct RunCfg {
    pub(crate) mode: Mode,
    pub(crate) unix: bool,
    pub(crate) ttl: u32,
    /// Repetition (0-based) and count, with `--s2-reps`.
    pub(crate) rep: usize,
    pub(crate) reps: usize,
}

impl RunCfg {
    pub(crate) fn new(mode: Mode, unix: bool, ttl: u32) -> RunCfg {
        RunCfg {
            mode,
            unix,
            ttl,
            rep: 0,
            reps: 1,
        }
    }

    pub(crate) fn rep_suffix(&self) -> String {
        if self.reps > 1 {
            format!(" #{}", self.rep + 1)
        } else {
            String::new()
        }
    }

    pub(crate) fn label(&self) -> String {
        format!(
            "{}, {}, ttl {}{}",
            self.mode.label(),
            if self.unix { "unix" } else { "tcp" },
            self.ttl,
            self.rep_suffix()
        )
    }

    pub(crate) fn column(&self) -> String {
        format!("{}{}", self.mode.label(), self.rep_suffix())
    }
}

/// The median req/s of one VMOD over the repetitions of a configuration.
/// The req/s of one VMOD in every repetition of a configuration.
pub(crate) fn rps_values(
    rows: &[(RunCfg, [Run; 2])],
    keep: impl Fn(&RunCfg) -> bool,
    vi: usize,
) -> Vec<f64> {
    rows.iter()
        .filter(|(c, _)| keep(c))
        .map(|(_, r)| r[vi].load.rps)
        .collect()
}

/// The median req/s of one VMOD over the repetitions of a configuration.
pub(crate) fn median_rps(
    rows: &[(RunCfg, [Run; 2])],
    keep: impl Fn(&RunCfg) -> bool,
    vi: usize,
) -> f64 {
    median(&rps_values(rows, keep, vi))
}

/// The S2 columns (modes), in the order they ran.
pub(crate) fn columns(rows: &[(RunCfg, [Run; 2])]) -> Vec<Mode> {
    let mut modes: Vec<Mode> = Vec::new();
    for (c, _) in rows {
        if !modes.contains(&c.mode) {
            modes.push(c.mode);
        }
    }
    modes
}

#[derive(Clone, Debug, Default)]
pub(crate) struct Run {
    pub(crate) load: Load,
    pub(crate) threads_mid: Option<u64>,
    pub(crate) redis_clients_mid: Option<u64>,
    pub(crate) conns_received: Option<u64>,
    pub(crate) blocked: Option<u64>,
    pub(crate) cmds_failed: Option<u64>,
    pub(crate) rss_kb: Option<u64>,
    pub(crate) cpu_us_per_req: f64,
}

pub(crate) fn run_load(
    o: &Opts,
    env: &mut Env,
    redis: &mut Redis,
    cfg: RunCfg,
    vmod: Vmod,
) -> Res<Run> {
    let location = if cfg.unix {
        redis.sock.display().to_string()
    } else {
        format!("127.0.0.1:{}", redis.port)
    };
    let (shared, max) = match cfg.mode {
        Mode::NoRedis | Mode::Private => (false, 1),
        Mode::Shared(n) | Mode::Pipelined(n) => (true, n),
    };
    let pipelining = matches!(cfg.mode, Mode::Pipelined(_)) && matches!(vmod, Vmod::Ours);
    let vcl = s2_vcl(
        &env.import_line(vmod),
        &db_new_pipelining(&location, cfg.ttl, shared, max, pipelining),
        cfg.mode != Mode::NoRedis,
    );
    let label = format!(
        "s2-{}-{}{}-ttl{}",
        vmod.name(),
        match cfg.mode {
            Mode::NoRedis => "none".to_owned(),
            Mode::Private => "private".to_owned(),
            Mode::Shared(n) => format!("shared{n}"),
            Mode::Pipelined(n) => format!("pipelined{n}"),
        },
        if cfg.unix { "-unix" } else { "" },
        cfg.ttl
    );
    let mut v = Varnish::start(env, &label, &vcl)?;
    let url = format!("http://127.0.0.1:{}/", v.port);
    let mut warm = wrk_cmd(o.s2_threads, o.s2_conns, o.s2_warm, &url);
    record("S2 warm-up", &warm);
    let (ok, out) = run_capture(&mut warm, "wrk")?;
    if !ok {
        return Err(format!("wrk warm-up failed:\n{out}"));
    }
    let blocked0 = v
        .stats_json()
        .and_then(|json| json_number(&json, "\"workers\"", "blocked"));
    let conns0 = redis.probe.info("stats", "total_connections_received");
    let cpu0 = v.cpu();
    let mut cmd = wrk_cmd(o.s2_threads, o.s2_conns, o.s2_secs, &url);
    record("S2", &cmd);
    let wrk = spawn(&mut cmd, "wrk")?;
    sleep(Duration::from_millis(u64::from(o.s2_secs) * 500));
    let threads_mid = v.varnishstat("MAIN.threads");
    // Minus this probe's own connection.
    let redis_clients_mid = redis
        .probe
        .info("clients", "connected_clients")
        .map(|c| c.saturating_sub(1));
    let out = reap(wrk)?;
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        return Err(format!("wrk failed:\n{text}"));
    }
    let load = parse_wrk(&text)?;
    let cpu1 = v.cpu();
    let conns1 = redis.probe.info("stats", "total_connections_received");
    let rss_kb = v.rss_kb();
    let json = v.stats_json().unwrap_or_default();
    v.stop();
    let run = Run {
        cpu_us_per_req: (cpu1 - cpu0) * 1e6 / load.requests.max(1) as f64,
        load,
        threads_mid,
        redis_clients_mid,
        conns_received: conns1.zip(conns0).map(|(a, b)| a - b),
        blocked: json_number(&json, "\"workers\"", "blocked")
            .zip(blocked0)
            .map(|(a, b)| a.saturating_sub(b)),
        cmds_failed: json_number(&json, "\"commands\"", "failed"),
        rss_kb,
    };
    eprintln!(
        "system: {:32} {:6}: {:8.0} req/s, non-2xx {}, threads {}, redis clients {}, \
         connections received {}, blocked {}, RSS {} kB, {:.1} us CPU/req",
        cfg.label(),
        vmod.name(),
        run.load.rps,
        run.load.non2xx,
        opt(run.threads_mid),
        opt(run.redis_clients_mid),
        opt(run.conns_received),
        opt(run.blocked),
        opt(run.rss_kb),
        run.cpu_us_per_req
    );
    Ok(run)
}

pub(crate) fn run_pairs(
    o: &Opts,
    env: &mut Env,
    redis: &mut Redis,
    cfgs: &[RunCfg],
) -> Res<Vec<(RunCfg, [Run; 2])>> {
    let mut out = Vec::new();
    for rep in 0..o.s2_reps {
        for &cfg in cfgs {
            let cfg = RunCfg {
                rep,
                reps: o.s2_reps,
                ..cfg
            };
            let ours = run_load(o, env, redis, cfg, Vmod::Ours)?;
            let theirs = run_load(o, env, redis, cfg, Vmod::Theirs)?;
            out.push((cfg, [ours, theirs]));
        }
    }
    Ok(out)
}

pub(crate) fn s2_cfgs(o: &Opts) -> Vec<RunCfg> {
    let mut modes = vec![Mode::NoRedis, Mode::Private];
    modes.extend(SHARED_MAX.iter().map(|&n| Mode::Shared(n)));
    o.s2_columns
        .as_ref()
        .unwrap_or(&modes)
        .iter()
        .map(|&mode| RunCfg::new(mode, false, 0))
        .collect()
}

pub(crate) fn s3_cfgs() -> Vec<RunCfg> {
    let mut cfgs = Vec::new();
    for mode in [Mode::Private, Mode::Shared(10)] {
        for unix in [false, true] {
            for ttl in [0, 1] {
                cfgs.push(RunCfg::new(mode, unix, ttl));
            }
        }
    }
    cfgs
}
