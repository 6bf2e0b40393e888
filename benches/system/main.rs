//! System benchmark: our VMOD side by side with the C VMOD (Debian package
//! `varnish-redis`) on the workloads of issue 3 (seeds 000, 001, 003).
//!
//! ```sh
//! cargo bench --bench system                 # full run (about 25 minutes)
//! cargo bench --bench system -- --quick      # development run (about 9 minutes)
//! cargo bench --bench system -- --only s1    # a subset: s1, s2, s3 (comma-separated)
//! cargo bench --bench system -- --only s2 --s2-cluster --s2-columns private,10,1
//! cargo bench --bench system -- --only s2 --s2-conns 1 --s2-columns 1,p1 --pin
//! cargo bench --bench system -- --only s1,s2 --s1-cached --s2-read-heavy   # the near cache
//! cargo bench --bench system -- --only s2 --s2-write-heavy
//! cargo bench --bench system -- --help       # every option
//! # ours alone on Varnish 8.0 (built from source; no C VMOD for it):
//! bash scripts/varnish 8.0 cargo bench --bench system -- --ours-only --only s1,s2
//! ```
//!
//! It installs nothing: it first checks for varnishd, varnishstat, the
//! `varnish-redis` package (not with `--ours-only`), redis-server,
//! redis-benchmark, wrk (and ab when `--s1-client ab`) and taskset (with
//! `--pin`), and prints the `apt-get install` line for what is missing.
//! Then it
//! 1. builds ours with `cargo build --release --lib` (under this process's
//!    environment: `PKG_CONFIG_PATH`, `CARGO_TARGET_DIR`) and copies the .so
//!    into a fresh 0755 directory under `$TMPDIR` (varnishd drops privileges);
//! 2. starts one `redis-server --save "" --appendonly no` on a free loopback
//!    port and a UNIX socket (and, when S3 runs, a TLS port: a CA and a
//!    certificate for 127.0.0.1 written into the temporary directory by
//!    tests/support/tls_material.rs, `--tls-auth-clients no`); with
//!    `--s2-cluster`, S2 runs against a Redis Cluster of 3 masters x 1
//!    replica instead (tests/support/cluster.rs), started for S2 and
//!    stopped after it;
//! 3. per configuration, starts `varnishd -F -a 127.0.0.1:<free port> -n
//!    <tmpdir> -f <vcl>` (all `-p` parameters at their defaults) loading ours
//!    (`import redis from "<abs path>";`), loads it with wrk, stops it, then
//!    the same with the C VMOD (`import redis;`): ours, theirs, ours,
//!    theirs... so that machine drift hits both alike (theirs is left out,
//!    "n/a", where it cannot run: TLS, and everywhere with `--ours-only`);
//! 4. writes `benches/results/<date>-<host>.md` (`-quick.md` with `--quick`,
//!    `-custom.md` with any other option)
//!    with the machine, versions, exact commands, every figure and the
//!    ratios ours/theirs, and two SVG plots next to it (`...-s1.svg`,
//!    `...-s2.svg`).
//!
//! Every process it starts is stopped by PID at the end, on failure, on a
//! panic, and on Ctrl-C / SIGTERM. Traffic stays on 127.0.0.1.
//!
//! Workloads:
//! * S1 (seed 001, VMOD overhead): `vcl_synth` runs N = 0, 1, 2, 4, 8
//!   commands of one kind (SET, GET, the EVAL script), each followed by
//!   `free()`, private connections, `max_connections=1`; one VCL per VMOD
//!   holds every cell, selected by URL. Closed loop, one client
//!   (`wrk -t1 -c1`), 1 s warm-up per cell; both varnishd run side by side
//!   and each cell is measured on ours then theirs, back to back. Per cell:
//!   ms per request and the varnishd child's CPU (utime + stime of
//!   `/proc/<child>/stat`) per request; per command kind: the slopes over N (least squares); the raw
//!   Redis round trip of the same repetition (`redis-benchmark -c 1 -t
//!   set,get`, p50, and `EVALSHA` of the same script). Repeated
//!   (`--reps`, default 5, 3 s per cell) and reported as median and spread.
//! * S2 (seed 000, private vs shared): SET + GET + EVAL with the seed's reply
//!   checks, `wrk -t2 -c400 -d20s` after a 2 s warm-up; columns: no Redis
//!   (the VMOD loaded, no command), private, shared with max_connections in
//!   {1000, 400, 100, 25, 10, 4, 2, 1}. Reports req/s, non-2xx, MAIN.threads
//!   and Redis `connected_clients` sampled mid-run, Redis
//!   `total_connections_received` delta, `workers.blocked` from `db.stats()`,
//!   the child's RSS after the run and its CPU per request, and Redis CPU per
//!   command (`INFO cpu` used_cpu_sys + used_cpu_user over `INFO stats`
//!   total_commands_processed, deltas over the measured run, the harness's
//!   own INFO commands subtracted).
//!   With `--s2-cluster`: both VMODs with `type=cluster` on the cluster's
//!   seed, the seed's keys made per request (`"foo" + req.xid`, `"bar" +
//!   req.xid`) so that the load spreads over the masters (FLUSHALL before
//!   each varnishd), the commands per master reported (`pN`: ours
//!   pipelines on N connections per master).
//! * S3 (seed 003, connections): the S2 load on private and shared(10), TCP
//!   vs UNIX socket location, `connection_ttl` 0 vs 1 s; and ours over TLS
//!   (ttl 0; the C VMOD of Debian 12 has no TLS), set against ours over TCP:
//!   req/s, and the connections Redis received against the commands it ran
//!   (pooled connections: no handshake per command).
//!
//! * [ext] near cache (issue 24; ours only; benches/system/near.rs):
//!   `--s2-read-heavy` runs S2 as 3 GETs of 3,000 preloaded hot keys per
//!   request, columns no Redis (the ceiling), private + `near_cache` 64 MB,
//!   private; `--s2-write-heavy` as SET + GET of a fresh key per request
//!   (nothing hits), private with and without `near_cache`; `--s1-cached`
//!   runs S1 as N GETs of one key, near-cache hits beside round trips.
//!   Each reports Redis CPU per request beside req/s.
//!
//! `--ours-only` runs ours alone: the C VMOD is neither required by the
//! preflight nor run, and theirs' columns say "n/a" as S3's TLS rows do
//! (ratios and targets against theirs too). It is for a Varnish the C VMOD
//! is not packaged for, such as 8.0 from `bash scripts/varnish 8.0`, whose
//! environment (PATH with 8.0's varnishd first, PKG_CONFIG_PATH) the run
//! follows: ours is built by cargo under that environment (build.rs reads
//! PKG_CONFIG_PATH and reruns when it changes), and varnishd, varnishstat
//! are the first in PATH. Every report names that varnishd and its
//! `varnishd -V`, and the varnishapi ours was built against; an ours-only
//! report's file name carries the release (`...-ours-varnish-8.0.0-quick.md`)
//! so that runs on two series the same day do not overwrite each other.
//!
//! `--pin` puts varnishd (manager and child, every thread: `taskset -a -c
//! -p 0` after start) on CPU 0 and redis-server(s) and wrk (started under
//! `taskset -c 1`) on CPU 1, so that one-client runs do not depend on where
//! the scheduler puts the processes; the report says whether it was on.
//!
//! Environment: `TMPDIR` (where the temporary directory goes),
//! `CARGO` (the cargo that builds the .so; set by `cargo bench`), `PATH`
//! (varnishd, varnishstat, redis-server, wrk...), `PKG_CONFIG_PATH` (the
//! Varnish ours is built against; `--ours-only` above).

mod clients;
#[path = "../../tests/support/cluster.rs"]
mod cluster;
mod figures;
mod load;
mod near;
mod opts;
mod pin;
mod preflight;
mod procs;
mod redis;
mod report;
mod report_s2;
mod s1;
mod s2;
mod servers;
#[path = "../../tests/support/mod.rs"]
mod support;
mod svg;
#[allow(
    dead_code,
    reason = "the bench uses the CA and the server certificate only"
)]
#[path = "../../tests/support/tls_material.rs"]
mod tls_material;
mod vcl;

use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command as Process, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use support::{
    cleanup_all, command_line, info_field, make_dir, spawn, stop_child, unregister_pid,
    RedisConfig, RedisConn, RedisServer, Res, Resp, TlsPort, Varnishd, Waited,
};

const THEIRS_PKG: &str = "varnish-redis";
const S1_NS: [u32; 5] = [0, 1, 2, 4, 8];
const S1_CMDS: [&str; 3] = ["SET", "GET", "EVAL"];
const SHARED_MAX: [u32; 8] = [1000, 400, 100, 25, 10, 4, 2, 1];
/// The script of the seeds' EVAL, byte for byte as the seed VCL pushes it.
const SCRIPT: &str = "
            redis.call('SET', KEYS[1], ARGV[1]);
            redis.call('EXPIRE', KEYS[1], ARGV[2]);
        ";

use clients::*;
use figures::*;
use load::*;
use near::*;
use opts::*;
use pin::*;
use preflight::*;
use procs::*;
use redis::*;
use report::*;
use report_s2::*;
use s1::*;
use s2::*;
use servers::*;
use svg::*;
use vcl::*;

// ---------------------------------------------------------------------------

/// `$TMPDIR/vmod-redis-system.<pid>` (0755), removed by `cleanup_all`.
fn make_tmp() -> Res<PathBuf> {
    let base = support::base_dir()?;
    support::register_dir(&base);
    Ok(base)
}

fn run(o: Opts) -> Res<()> {
    let started = Instant::now();
    let load_start = fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let load_start = load_start
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ");
    let theirs = preflight(&o)?;
    let tmp = make_tmp()?;
    let built = match &o.ours_so {
        Some(p) => p.clone(),
        None => build_ours()?,
    };
    let ours_dir = tmp.join("ours");
    make_dir(&ours_dir)?;
    let ours_so = support::install_so(&built, &ours_dir)?;
    let mut env = Env {
        tmp: tmp.clone(),
        ours_so,
        seq: 0,
        pin: o.pin,
    };
    let redis_dir = tmp.join("redis");
    make_dir(&redis_dir)?;
    // S3's TLS rows need the TLS port.
    let mut redis = Redis::start(&redis_dir, o.s3, o.pin)?;
    eprintln!(
        "system: redis-server on 127.0.0.1:{}{} and {}; temporary files in {}",
        redis.port(),
        redis
            .tls
            .as_ref()
            .map_or(String::new(), |t| format!(" (TLS on {})", t.port)),
        redis.sock.display(),
        tmp.display()
    );

    let s1_cached = if o.s1 && o.s1_cached {
        Some(run_s1_cached(&o, &mut env, &mut redis)?)
    } else {
        None
    };
    let s1 = if o.s1 && !o.s1_cached {
        Some(run_s1(&o, &mut env, &mut redis)?)
    } else {
        None
    };
    let near_s2 = if o.s2 && o.s2_variant != S2Variant::Seed {
        Some(run_near_s2(&o, &mut env, &mut redis, o.s2_variant)?)
    } else {
        None
    };
    let s2 = match (o.s2 && near_s2.is_none(), o.s2_cluster) {
        (false, _) => None,
        (true, false) => Some(run_pairs(&o, &mut env, &mut redis, &s2_cfgs(&o))?),
        (true, true) => {
            let dir = tmp.join("cluster");
            make_dir(&dir)?;
            let mut cluster = Redis::start_cluster(&dir, o.pin)?;
            eprintln!(
                "system: S2 on a cluster of 3 masters x 1 replica, seed 127.0.0.1:{}",
                cluster.port()
            );
            let rows = run_pairs(&o, &mut env, &mut cluster, &s2_cfgs(&o));
            cluster.stop();
            Some(rows?)
        }
    };
    let s3 = if o.s3 {
        Some(run_pairs(&o, &mut env, &mut redis, &s3_cfgs())?)
    } else {
        None
    };
    redis.stop();

    // Report.
    let (date, time) = utc_now();
    let host = fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap_or_else(|_| "host".into())
        .trim()
        .to_owned();
    // Only a full run takes the plain name (the one the README links to).
    let kind = match (o.quick, o.given.is_empty()) {
        (true, _) => "quick",
        (false, true) => "full",
        (false, false) => "custom",
    };
    let (varnish, varnishd_path) = varnishd_version();
    // Ours alone is run on several Varnish series the same day: the name
    // says which, so that one run does not overwrite another's.
    let ours_only = if o.ours_only {
        format!("-ours-{}", varnish_release(&varnish).unwrap_or("varnish"))
    } else {
        String::new()
    };
    let base = format!(
        "{date}-{host}{ours_only}{}",
        if kind == "full" {
            String::new()
        } else {
            format!("-{kind}")
        }
    );
    fs::create_dir_all(&o.out_dir).map_err(|e| format!("{}: {e}", o.out_dir.display()))?;
    let elapsed = started.elapsed().as_secs();
    let mut r = String::new();
    if o.ours_only {
        let _ = writeln!(r, "# vmod-redis alone: system benchmark\n");
    } else {
        let _ = writeln!(r, "# vmod-redis vs the C VMOD: system benchmark\n");
    }
    let _ = writeln!(
        r,
        "{date} {time} UTC on `{host}`; {} run (`cargo bench --bench system{}`), {} min {} s. \
         Generated by `benches/system/`: ours is this repository's VMOD, theirs the C VMOD \
         (libvmod-redis, Debian `{THEIRS_PKG}`). Ratios are ours / theirs. {}\
         Varnish: {varnish} (`{varnishd_path}`). CPU pinning: {}.\n",
        kind,
        if o.given.is_empty() {
            String::new()
        } else {
            format!(" -- {}", o.given.join(" "))
        },
        elapsed / 60,
        elapsed % 60,
        if o.ours_only {
            "**Ours only** (`--ours-only`): theirs was not run, its columns say n/a. "
        } else {
            ""
        },
        pin_note(o.pin)
    );
    let mut targets = Targets { lines: Vec::new() };
    let mut body = String::new();
    if let Some(s1) = &s1 {
        let name = format!("{base}-s1.svg");
        fs::write(o.out_dir.join(&name), s1_svg(s1)).map_err(|e| e.to_string())?;
        s1_section(&mut body, s1, &o, &name, &mut targets);
    }
    if let Some(s2) = &s2 {
        let name = format!("{base}-s2.svg");
        let title = format!(
            "S2{}: req/s, wrk -t{} -c{} -d{}s, SET+GET+EVAL{}",
            if o.s2_cluster {
                " on a 3-master cluster"
            } else {
                ""
            },
            o.s2_threads,
            o.s2_conns,
            o.s2_secs,
            if o.s2_reps > 1 {
                format!("; median of {} runs, whiskers min-max", o.s2_reps)
            } else {
                String::new()
            }
        );
        fs::write(o.out_dir.join(&name), s2_svg(s2, &title)).map_err(|e| e.to_string())?;
        s2_section(&mut body, s2, &o, &name, &mut targets);
    }
    if let Some(s1_cached) = &s1_cached {
        s1_cached_section(&mut body, s1_cached, &o);
    }
    if let Some(near_s2) = &near_s2 {
        near_s2_section(&mut body, near_s2, &o);
    }
    if let Some(s3) = &s3 {
        s3_section(&mut body, s3, &o);
    }
    if !targets.lines.is_empty() {
        let _ = writeln!(r, "## Targets of issue 3\n");
        for line in &targets.lines {
            let _ = writeln!(r, "- {line}");
        }
        let _ = writeln!(r);
    }
    r.push_str(&body);
    machine_section(&mut r, &load_start, o.pin);
    versions_section(&mut r, &env, theirs.as_deref(), (&varnish, &varnishd_path));
    commands_section(&mut r);
    let _ = writeln!(r, "<details><summary>VCL of S1 (ours; theirs says <code>import redis;</code>)</summary>\n\n```vcl\n{}```\n</details>\n",
        s1_vcl("import redis from \"/path/to/libvmod_redis.so\";", "127.0.0.1:PORT"));
    let _ = writeln!(r, "<details><summary>VCL of S2 / S3 (private column; the others change <code>shared_connections</code>, <code>max_connections</code>, <code>location</code>, <code>connection_ttl</code>)</summary>\n\n```vcl\n{}```\n</details>",
        s2_vcl("import redis;", &DbSpec::master("127.0.0.1:PORT", 0, false, 1).vcl(), Some("")));
    let md = o.out_dir.join(format!("{base}.md"));
    fs::write(&md, &r).map_err(|e| e.to_string())?;
    println!("{}", targets.lines.join("\n"));
    println!(
        "system: report written to {} ({} min {} s)",
        md.display(),
        elapsed / 60,
        elapsed % 60
    );
    Ok(())
}

fn main() {
    let opts = match parse_opts() {
        Ok(Some(o)) => o,
        Ok(None) => return,
        Err(e) => {
            eprintln!("system: {e}");
            std::process::exit(2);
        }
    };
    if let Err(e) = ctrlc::set_handler(|| {
        eprintln!("\nsystem: interrupted: stopping every process started");
        cleanup_all();
        std::process::exit(130);
    }) {
        eprintln!("system: cannot install the Ctrl-C handler: {e}");
    }
    let guard = CleanupGuard;
    let result = run(opts);
    drop(guard);
    if let Err(e) = result {
        eprintln!("system: {e}");
        std::process::exit(1);
    }
}
