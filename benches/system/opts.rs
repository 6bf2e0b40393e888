//! Command-line options.
use super::*;

// Options

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum S1Client {
    Wrk,
    Ab,
}

#[derive(Debug)]
pub(crate) struct Opts {
    pub(crate) quick: bool,
    pub(crate) s1: bool,
    pub(crate) s2: bool,
    pub(crate) s3: bool,
    pub(crate) reps: usize,
    pub(crate) s1_secs: u32,
    pub(crate) s1_warm: u32,
    pub(crate) s2_secs: u32,
    pub(crate) s2_warm: u32,
    pub(crate) s2_threads: u32,
    pub(crate) s2_conns: u32,
    pub(crate) s2_reps: usize,
    pub(crate) s2_columns: Option<Vec<Mode>>,
    /// S2 against a 3-master cluster instead of the single server.
    pub(crate) s2_cluster: bool,
    /// [ext] near cache: S2 read-heavy or write-heavy instead of seed 000's.
    pub(crate) s2_variant: S2Variant,
    /// [ext] near cache: the budgets (MiB) of the near-cache columns.
    pub(crate) near_cache_mib: Vec<u32>,
    /// [ext] near cache: bytes of each preloaded hot key's value.
    pub(crate) s2_value_bytes: u32,
    /// [ext] near cache: S1 of a cached GET beside an uncached one,
    /// instead of seed 001's cells.
    pub(crate) s1_cached: bool,
    pub(crate) pin: bool,
    /// Ours alone: the C VMOD is neither required nor run (a Varnish it is
    /// not packaged for, such as 8.0); its columns say n/a.
    pub(crate) ours_only: bool,
    pub(crate) rb_requests: u32,
    pub(crate) s1_client: S1Client,
    pub(crate) out_dir: PathBuf,
    pub(crate) ours_so: Option<PathBuf>,
    /// The options as given (for the report), `--bench` left out.
    pub(crate) given: Vec<String>,
}

pub(crate) const USAGE: &str = "\
usage: cargo bench --bench system -- [options]
  --quick             S1: 2 reps x 2 s per cell; S2/S3: -d5s, 1 s warm-up
  --only LIST         s1,s2,s3 (default: all)
  --reps N            S1 repetitions (default 5, quick 2)
  --s1-secs N         S1 seconds per cell (default 3, quick 2)
  --s2-secs N         S2/S3 seconds per run (default 20, quick 5)
  --s2-conns N        S2/S3 wrk connections (default 400; 1: one client, one wrk thread)
  --s2-reps N         S2/S3 repetitions of every column, alternated (default 1)
  --s2-columns LIST   S2 columns, e.g. private,10,1,p1 (none, private, a shared
                      max_connections, or pN: ours pipelined on N connections, theirs
                      shared N; default: none,private,1000,400,100,25,10,4,2,1)
  --s2-cluster        S2 against a Redis Cluster (3 masters x 1 replica), both VMODs
                      with type=cluster, keys per request
  --s2-read-heavy     S2 as 3 GETs of 3,000 hot keys per request, ours only: no Redis
                      (the ceiling), private + near_cache 64 MB, private
  --near-cache-mib LIST  near cache budgets (MiB) of --s2-read-heavy / --s2-write-heavy,
                      a column each (default 64)
  --s2-value-bytes N  --s2-read-heavy: bytes of each hot key's value (default 12)
  --s2-write-heavy    S2 as SET + GET of a fresh key per request, ours only: private
                      with and without near_cache (tracking on, nothing hits)
  --s1-cached         S1 as N GETs of one key, ours only: near cache hits against
                      round trips (slopes in us per command)
  --ours-only         ours alone: the C VMOD is neither required nor run, its columns
                      say n/a (for a Varnish it is not packaged for, e.g. 8.0 from
                      `bash scripts/varnish 8.0`); the report names the varnishd
                      first in PATH and its version
  --pin               varnishd on CPU 0, redis-server(s) and wrk on CPU 1 (taskset)
  --s1-client wrk|ab  S1 load generator (default wrk: wrk -t1 -c1; ab: ab -k -c 1 -t)
  --out DIR           report directory (default benches/results)
  --ours PATH         use this libvmod_redis.so instead of building one
";

pub(crate) fn parse_opts() -> Res<Option<Opts>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if !args.iter().any(|a| a == "--bench") {
        // `cargo test --benches` / `cargo test --all-targets` run bench
        // binaries without `--bench`: a 25-minute system run is not a test.
        println!("system: skipped (a benchmark: run it with `cargo bench --bench system`)");
        return Ok(None);
    }
    let quick = args.iter().any(|a| a == "--quick");
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut o = Opts {
        quick,
        s1: true,
        s2: true,
        s3: true,
        reps: if quick { 2 } else { 5 },
        s1_secs: if quick { 2 } else { 3 },
        s1_warm: 1,
        s2_secs: if quick { 5 } else { 20 },
        s2_warm: if quick { 1 } else { 2 },
        s2_threads: 2,
        s2_conns: 400,
        s2_reps: 1,
        s2_columns: None,
        s2_cluster: false,
        s2_variant: S2Variant::Seed,
        near_cache_mib: vec![64],
        s2_value_bytes: 12,
        s1_cached: false,
        pin: false,
        ours_only: false,
        rb_requests: if quick { 5_000 } else { 30_000 },
        s1_client: S1Client::Wrk,
        out_dir: manifest.join("benches/results"),
        ours_so: None,
        given: args.iter().filter(|a| *a != "--bench").cloned().collect(),
    };
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut value = |name: &str| {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{name} needs a value\n{USAGE}"))
        };
        let number = |name: &str, v: String| {
            v.parse::<u32>()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| format!("{name}: not a positive number: {v}"))
        };
        match arg.as_str() {
            "--bench" | "--quick" => {}
            "--s2-cluster" => o.s2_cluster = true,
            "--s2-read-heavy" => o.s2_variant = S2Variant::ReadHeavy,
            "--s2-write-heavy" => o.s2_variant = S2Variant::WriteHeavy,
            "--s1-cached" => o.s1_cached = true,
            "--pin" => o.pin = true,
            "--ours-only" => o.ours_only = true,
            "--help" | "-h" => {
                print!("{USAGE}");
                return Ok(None);
            }
            "--only" => {
                let list = value("--only")?;
                o.s1 = false;
                o.s2 = false;
                o.s3 = false;
                for part in list.split(',') {
                    match part.trim().to_ascii_lowercase().as_str() {
                        "s1" => o.s1 = true,
                        "s2" => o.s2 = true,
                        "s3" => o.s3 = true,
                        other => return Err(format!("--only: unknown workload {other}")),
                    }
                }
            }
            "--reps" => o.reps = number("--reps", value("--reps")?)? as usize,
            "--s1-secs" => o.s1_secs = number("--s1-secs", value("--s1-secs")?)?,
            "--s2-secs" => o.s2_secs = number("--s2-secs", value("--s2-secs")?)?,
            "--s2-conns" => {
                o.s2_conns = number("--s2-conns", value("--s2-conns")?)?;
                // wrk needs a connection per thread at least.
                o.s2_threads = o.s2_threads.min(o.s2_conns.max(1));
            }
            "--near-cache-mib" => {
                o.near_cache_mib = value("--near-cache-mib")?
                    .split(',')
                    .map(|n| number("--near-cache-mib", n.trim().to_owned()))
                    .collect::<Res<_>>()?;
            }
            "--s2-value-bytes" => {
                o.s2_value_bytes = number("--s2-value-bytes", value("--s2-value-bytes")?)?;
            }
            "--s2-reps" => o.s2_reps = number("--s2-reps", value("--s2-reps")?)? as usize,
            "--s2-columns" => {
                let mut modes = Vec::new();
                for part in value("--s2-columns")?.split(',') {
                    modes.push(match part.trim() {
                        "none" => Mode::NoRedis,
                        "private" => Mode::Private,
                        p if p.starts_with('p') => Mode::Pipelined(
                            p[1..]
                                .parse()
                                .ok()
                                .filter(|n| *n > 0)
                                .ok_or_else(|| format!("--s2-columns: unknown column {p}"))?,
                        ),
                        n => Mode::Shared(
                            n.parse()
                                .ok()
                                .filter(|n| *n > 0)
                                .ok_or_else(|| format!("--s2-columns: unknown column {n}"))?,
                        ),
                    });
                }
                o.s2_columns = Some(modes);
            }
            "--s1-client" => {
                o.s1_client = match value("--s1-client")?.as_str() {
                    "wrk" => S1Client::Wrk,
                    "ab" => S1Client::Ab,
                    other => return Err(format!("--s1-client: wrk or ab, not {other}")),
                }
            }
            "--out" => o.out_dir = PathBuf::from(value("--out")?),
            "--ours" => o.ours_so = Some(PathBuf::from(value("--ours")?)),
            other => return Err(format!("unknown option {other}\n{USAGE}")),
        }
    }
    if o.s2_variant != S2Variant::Seed && (o.s2_cluster || o.s2_columns.is_some()) {
        return Err(
            "--s2-read-heavy / --s2-write-heavy: their columns are fixed, single server".into(),
        );
    }
    if o.s2_cluster && !o.s2 {
        return Err("--s2-cluster: S2 is not run (see --only)".into());
    }
    Ok(Some(o))
}

impl Opts {
    /// The VMODs every configuration runs, ours first.
    pub(crate) fn vmods(&self) -> &'static [Vmod] {
        if self.ours_only {
            &[Vmod::Ours]
        } else {
            &[Vmod::Ours, Vmod::Theirs]
        }
    }
}
