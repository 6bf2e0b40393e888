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

/// How the VMOD reaches Redis.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Transport {
    Tcp,
    Unix,
    /// Ours only: the C VMOD of Debian 12 is built without TLS.
    Tls,
}

impl Transport {
    pub(crate) fn label(self) -> &'static str {
        match self {
            Transport::Tcp => "tcp",
            Transport::Unix => "unix",
            Transport::Tls => "tls",
        }
    }
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct RunCfg {
    pub(crate) mode: Mode,
    pub(crate) transport: Transport,
    pub(crate) ttl: u32,
    /// Repetition (0-based) and count, with `--s2-reps`.
    pub(crate) rep: usize,
    pub(crate) reps: usize,
}

impl RunCfg {
    pub(crate) fn new(mode: Mode, transport: Transport, ttl: u32) -> RunCfg {
        RunCfg {
            mode,
            transport,
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
            self.transport.label(),
            self.ttl,
            self.rep_suffix()
        )
    }

    pub(crate) fn column(&self) -> String {
        format!("{}{}", self.mode.label(), self.rep_suffix())
    }

    /// Whether the C VMOD can run it (it has no TLS here).
    pub(crate) fn theirs_runs(&self) -> bool {
        self.transport != Transport::Tls
    }
}

/// A configuration's runs: ours, and theirs unless it cannot run it (or
/// `--ours-only`).
pub(crate) type Row = (RunCfg, [Option<Run>; 2]);

/// Whether theirs ran any configuration (not with `--ours-only`).
pub(crate) fn theirs_ran(rows: &[Row]) -> bool {
    rows.iter().any(|(_, r)| r[1].is_some())
}

/// A figure of one VMOD in every repetition of a configuration it ran.
pub(crate) fn values(
    rows: &[Row],
    keep: impl Fn(&RunCfg) -> bool,
    vi: usize,
    what: impl Fn(&Run) -> f64,
) -> Vec<f64> {
    rows.iter()
        .filter(|(c, _)| keep(c))
        .filter_map(|(_, r)| r[vi].as_ref().map(&what))
        .collect()
}

pub(crate) fn rps_values(rows: &[Row], keep: impl Fn(&RunCfg) -> bool, vi: usize) -> Vec<f64> {
    values(rows, keep, vi, |r| r.load.rps)
}

/// The median req/s of one VMOD over the repetitions of a configuration
/// (NaN if it ran none).
pub(crate) fn median_rps(rows: &[Row], keep: impl Fn(&RunCfg) -> bool, vi: usize) -> f64 {
    median(&rps_values(rows, keep, vi))
}

/// The S2 columns (modes), in the order they ran.
pub(crate) fn columns(rows: &[Row]) -> Vec<Mode> {
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
    /// Redis over the measured run: connections received, commands, CPU.
    pub(crate) redis: Option<RedisUse>,
    /// The same from before varnishd started to the end of the run (its
    /// pooled connections are opened during the warm-up).
    pub(crate) redis_life: Option<RedisUse>,
    pub(crate) blocked: Option<u64>,
    pub(crate) cmds_failed: Option<u64>,
    pub(crate) rss_kb: Option<u64>,
    /// The child's VmRSS, sampled through the measured run: the highest,
    /// and every sample (200 ms apart).
    pub(crate) rss_peak_kb: Option<u64>,
    pub(crate) rss_samples_kb: Vec<u64>,
    /// [ext] The near cache's gauges, sampled likewise (`/near-cache` of
    /// the near-cache VCLs; `None` elsewhere).
    pub(crate) near: Option<NearSample>,
    pub(crate) cpu_us_per_req: f64,
}

/// [ext] What the samples of a run saw of its near cache.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct NearSample {
    /// `ext.near_cache.bytes`: the highest sampled, and at the end.
    pub(crate) peak_bytes: u64,
    pub(crate) bytes: u64,
    pub(crate) entries: u64,
    pub(crate) evictions: u64,
}

/// Samples the child's RSS and the near cache's gauges every 200 ms
/// until stopped: the peaks, and the last gauges.
struct Sampler {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<(Vec<u64>, Option<NearSample>)>,
}

impl Sampler {
    fn start(pid: i32, port: u16) -> Sampler {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::spawn(move || {
            let (mut rss, mut near): (Vec<u64>, Option<NearSample>) = (Vec::new(), None);
            loop {
                let last = stopped.load(std::sync::atomic::Ordering::Relaxed);
                if let Some(kb) = support::proc_status(pid, "VmRSS") {
                    rss.push(kb);
                }
                if let Ok((200, body)) = http_get(port, "/near-cache") {
                    let n: Vec<u64> = body
                        .split_whitespace()
                        .filter_map(|v| v.parse().ok())
                        .collect();
                    if let [bytes, entries, evictions] = n[..] {
                        let peak = near.map_or(bytes, |s| s.peak_bytes.max(bytes));
                        near = Some(NearSample {
                            peak_bytes: peak,
                            bytes,
                            entries,
                            evictions,
                        });
                    }
                }
                if last {
                    return (rss, near);
                }
                sleep(Duration::from_millis(200));
            }
        });
        Sampler { stop, thread }
    }

    fn finish(self) -> (Vec<u64>, Option<NearSample>) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread.join().unwrap_or_default()
    }
}

impl Run {
    pub(crate) fn conns_received(&self) -> Option<u64> {
        self.redis.as_ref().map(|u| u.conns)
    }

    pub(crate) fn redis_cmds(&self) -> Option<u64> {
        self.redis.as_ref().map(|u| u.cmds)
    }

    pub(crate) fn redis_cpu_us_per_cmd(&self) -> f64 {
        self.redis
            .as_ref()
            .map_or(f64::NAN, RedisUse::cpu_us_per_cmd)
    }
}

/// The VCL of one run: the seed's commands on fixed keys, or on
/// per-request keys on a cluster (so that the load spreads over the masters).
fn run_vcl(env: &Env, redis: &Redis, cfg: RunCfg, vmod: Vmod) -> Res<String> {
    let (location, mut extra) = redis.location(cfg.transport)?;
    let (shared, max) = match cfg.mode {
        // Private connections are a budget per worker thread across the
        // servers (both VMODs): on a cluster, one per master, else each
        // command to another master than the last would reconnect.
        Mode::NoRedis | Mode::Private if redis.cluster => (false, 3),
        Mode::NoRedis | Mode::Private => (false, 1),
        Mode::Shared(n) | Mode::Pipelined(n) => (true, n),
    };
    if matches!(cfg.mode, Mode::Pipelined(_)) && vmod == Vmod::Ours {
        extra.push("pipelining=true".into());
    }
    let db = DbSpec {
        location,
        cluster: redis.cluster,
        ttl: cfg.ttl,
        shared,
        max,
        extra,
    };
    let keys = if redis.cluster { PER_REQUEST_KEYS } else { "" };
    Ok(s2_vcl(
        &env.import_line(vmod),
        &db.vcl(),
        (cfg.mode != Mode::NoRedis).then_some(keys),
    ))
}

pub(crate) fn run_load(
    o: &Opts,
    env: &mut Env,
    redis: &mut Redis,
    cfg: RunCfg,
    vmod: Vmod,
) -> Res<Run> {
    let vcl = run_vcl(env, redis, cfg, vmod)?;
    if redis.cluster {
        redis.flush()?;
    }
    let label = format!(
        "s2-{}-{}{}-ttl{}",
        vmod.name(),
        match cfg.mode {
            Mode::NoRedis => "none".to_owned(),
            Mode::Private => "private".to_owned(),
            Mode::Shared(n) => format!("shared{n}"),
            Mode::Pipelined(n) => format!("pipelined{n}"),
        },
        match cfg.transport {
            Transport::Tcp => String::new(),
            t => format!("-{}", t.label()),
        },
        cfg.ttl
    );
    let run = measure(o, env, redis, &label, &vcl)?;
    eprintln!(
        "system: {:32} {:6}: {:8.0} req/s, non-2xx {}, threads {}, redis clients {}, \
         connections received {}, blocked {}, RSS {} kB, {:.1} us CPU/req, \
         redis {} cmds{}, {:.2} us redis CPU/cmd",
        cfg.label(),
        vmod.name(),
        run.load.rps,
        run.load.non2xx,
        opt(run.threads_mid),
        opt(run.redis_clients_mid),
        opt(run.conns_received()),
        opt(run.blocked),
        opt(run.rss_kb),
        run.cpu_us_per_req,
        opt(run.redis_cmds()),
        run.redis
            .as_ref()
            .map_or(String::new(), |u| per_master(&u.per_master)),
        run.redis_cpu_us_per_cmd()
    );
    Ok(run)
}

/// One S2-style run of `vcl` (a varnishd of its own, named `label`): a
/// warm-up, then the measured `wrk` run and what it cost.
pub(crate) fn measure(
    o: &Opts,
    env: &mut Env,
    redis: &mut Redis,
    label: &str,
    vcl: &str,
) -> Res<Run> {
    let life0 = redis.counters();
    let mut v = Varnish::start(env, label, vcl)?;
    let url = format!("http://127.0.0.1:{}/", v.port);
    let mut warm = wrk_cmd(o.pin, o.s2_threads, o.s2_conns, o.s2_warm, &url);
    record("S2 warm-up", &warm);
    let (ok, out) = support::run_capture(&mut warm, "wrk", None)?;
    if !ok {
        return Err(format!("wrk warm-up failed:\n{out}"));
    }
    let blocked0 = v
        .stats_json()
        .and_then(|json| json_number(&json, "\"workers\"", "blocked"));
    let redis0 = redis.counters();
    let cpu0 = v.cpu();
    let mut cmd = wrk_cmd(o.pin, o.s2_threads, o.s2_conns, o.s2_secs, &url);
    record("S2", &cmd);
    let wrk = spawn(&mut cmd, "wrk")?;
    let sampler = Sampler::start(v.cache, v.port);
    sleep(Duration::from_millis(u64::from(o.s2_secs) * 500));
    let threads_mid = v.varnishstat("MAIN.threads");
    let redis_clients_mid = redis.clients();
    let out = reap(wrk)?;
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        return Err(format!("wrk failed:\n{text}"));
    }
    let (rss_samples_kb, near) = sampler.finish();
    let rss_peak_kb = rss_samples_kb.iter().copied().max();
    let load = parse_wrk(&text)?;
    let cpu1 = v.cpu();
    let redis_use = redis0.and_then(|before| redis.usage(&before));
    let redis_life = life0.and_then(|before| redis.usage(&before));
    let rss_kb = v.rss_kb();
    let json = v.stats_json().unwrap_or_default();
    v.stop();
    let run = Run {
        cpu_us_per_req: (cpu1 - cpu0) * 1e6 / load.requests.max(1) as f64,
        load,
        threads_mid,
        redis_clients_mid,
        redis: redis_use,
        redis_life,
        blocked: json_number(&json, "\"workers\"", "blocked")
            .zip(blocked0)
            .map(|(a, b)| a.saturating_sub(b)),
        cmds_failed: json_number(&json, "\"commands\"", "failed"),
        rss_kb,
        rss_peak_kb,
        rss_samples_kb,
        near,
    };
    Ok(run)
}

/// A cluster's commands per master: " (m0 a, m1 b, m2 c)", or nothing.
pub(crate) fn per_master(cmds: &[u64]) -> String {
    if cmds.is_empty() {
        return String::new();
    }
    let list: Vec<String> = cmds
        .iter()
        .enumerate()
        .map(|(i, n)| format!("m{i} {n}"))
        .collect();
    format!(" ({})", list.join(", "))
}

pub(crate) fn run_pairs(
    o: &Opts,
    env: &mut Env,
    redis: &mut Redis,
    cfgs: &[RunCfg],
) -> Res<Vec<Row>> {
    let mut out = Vec::new();
    for rep in 0..o.s2_reps {
        for &cfg in cfgs {
            let cfg = RunCfg {
                rep,
                reps: o.s2_reps,
                ..cfg
            };
            let ours = run_load(o, env, redis, cfg, Vmod::Ours)?;
            let theirs = if cfg.theirs_runs() && !o.ours_only {
                Some(run_load(o, env, redis, cfg, Vmod::Theirs)?)
            } else {
                None
            };
            out.push((cfg, [Some(ours), theirs]));
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
        .map(|&mode| RunCfg::new(mode, Transport::Tcp, 0))
        .collect()
}

/// S3's modes; each runs over TCP and a UNIX socket with ttl 0 and 1, and
/// over TLS (ours only) with ttl 0.
pub(crate) const S3_MODES: [Mode; 2] = [Mode::Private, Mode::Shared(10)];

pub(crate) fn s3_cfgs() -> Vec<RunCfg> {
    let mut cfgs = Vec::new();
    for mode in S3_MODES {
        for transport in [Transport::Tcp, Transport::Unix] {
            for ttl in [0, 1] {
                cfgs.push(RunCfg::new(mode, transport, ttl));
            }
        }
        cfgs.push(RunCfg::new(mode, Transport::Tls, 0));
    }
    cfgs
}
