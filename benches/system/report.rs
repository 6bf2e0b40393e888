//! The Markdown report.
use super::*;

// Report

/// (YYYY-MM-DD, HH:MM) in UTC.
pub(crate) fn utc_now() -> (String, String) {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs()) as i64;
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let mo = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(mo <= 2);
    (
        format!("{y:04}-{mo:02}-{d:02}"),
        format!("{:02}:{:02}", rem / 3600, rem % 3600 / 60),
    )
}

pub(crate) fn first_line(mut cmd: Process) -> String {
    cmd.stdin(Stdio::null());
    match cmd.output() {
        Ok(out) => {
            let mut t = String::from_utf8_lossy(&out.stdout).into_owned();
            t.push_str(&String::from_utf8_lossy(&out.stderr));
            t.lines().next().unwrap_or("").trim().to_owned()
        }
        Err(e) => format!("({e})"),
    }
}

pub(crate) fn cmd(program: &str, args: &[&str]) -> Process {
    let mut c = Process::new(program);
    c.args(args);
    c
}

pub(crate) fn machine_section(r: &mut String, load_start: &str, pin: bool) {
    let cpu = fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines().find_map(|l| {
                l.strip_prefix("model name")
                    .map(|v| v.trim_start_matches([' ', '\t', ':']).to_owned())
            })
        })
        .unwrap_or_default();
    let mem = support::status_field("/proc/meminfo", "MemTotal")
        .map_or("?".into(), |kb| format!("{:.1} GiB", kb as f64 / 1048576.0));
    let kernel = fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let nproc = std::thread::available_parallelism().map_or(0, |n| n.get());
    let load_end = fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let _ = writeln!(r, "## Machine\n");
    let _ = writeln!(r, "- nproc: {nproc}; CPU: {cpu}; memory: {mem}");
    let _ = writeln!(r, "- kernel: {}", kernel.trim());
    let _ = writeln!(r, "- CPU pinning: {}", pin_note(pin));
    let _ = writeln!(
        r,
        "- load average (1, 5, 15 min) at start: {}; at end: {}",
        load_start.trim(),
        load_end
            .split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    let _ = writeln!(
        r,
        "- net.ipv4.tcp_tw_reuse = {}",
        fs::read_to_string("/proc/sys/net/ipv4/tcp_tw_reuse")
            .unwrap_or_default()
            .trim()
    );
    let _ = writeln!(r);
}

pub(crate) fn git_rev() -> String {
    let dir = env!("CARGO_MANIFEST_DIR");
    let rev = first_line(cmd("git", &["-C", dir, "rev-parse", "--short=12", "HEAD"]));
    let dirty = Process::new("git")
        .args(["-C", dir, "status", "--porcelain", "--untracked-files=no"])
        .output()
        .map(|o| !o.stdout.is_empty())
        .unwrap_or(false);
    if dirty {
        format!("{rev} (with uncommitted changes)")
    } else {
        rev
    }
}

/// `varnishd`: its `-V` line and path (see `varnishd_version`); `theirs`:
/// None with `--ours-only`.
pub(crate) fn versions_section(
    r: &mut String,
    env: &Env,
    theirs: Option<&Path>,
    varnishd: (&str, &str),
) {
    let _ = writeln!(r, "## Versions\n");
    let _ = writeln!(
        r,
        "- varnishd: {} (`{}`, the first in PATH)",
        varnishd.0, varnishd.1
    );
    let _ = writeln!(
        r,
        "- redis-server: {}",
        first_line(cmd("redis-server", &["--version"]))
    );
    match theirs {
        Some(theirs) => {
            let _ = writeln!(
                r,
                "- theirs: Debian `{THEIRS_PKG}` {} (`{}`, loaded with `import redis;`)",
                dpkg_version(THEIRS_PKG).unwrap_or_default(),
                theirs.display()
            );
        }
        None => {
            let _ = writeln!(r, "- theirs: not run (`--ours-only`)");
        }
    }
    let _ = writeln!(
        r,
        "- ours: git {} (`cargo build --release`, loaded by absolute path from a copy in `{}`)",
        git_rev(),
        env.ours_so
            .parent()
            .map_or(String::new(), |p| p.display().to_string())
    );
    let _ = writeln!(
        r,
        "- varnishapi ours was built against: {} (`pkg-config --modversion varnishapi`, \
         PKG_CONFIG_PATH `{}`)",
        first_line(cmd("pkg-config", &["--modversion", "varnishapi"])),
        std::env::var("PKG_CONFIG_PATH").unwrap_or_default()
    );
    let _ = writeln!(r, "- {}", first_line(cmd("rustc", &["-V"])));
    let _ = writeln!(r, "- {}", first_line(cmd("wrk", &["-v"])));
    let _ = writeln!(r);
}

pub(crate) fn commands_section(r: &mut String) {
    let _ = writeln!(r, "## Commands\n");
    let _ = writeln!(
        r,
        "The first of each kind, as run (ports and paths vary per run; every \
         varnishd gets a fresh `-n` directory and a free port).\n"
    );
    let _ = writeln!(r, "```sh");
    for (kind, line) in COMMANDS.lock().iter() {
        let _ = writeln!(r, "# {kind}\n{line}");
    }
    let _ = writeln!(
        r,
        "# Redis INFO (clients mid-run, stats before/after each run) over one persistent \
         connection of the harness, subtracted from connected_clients"
    );
    let _ = writeln!(r, "```\n");
}

pub(crate) struct Targets {
    pub(crate) lines: Vec<String>,
}

impl Targets {
    pub(crate) fn add(&mut self, text: String) {
        self.lines.push(text);
    }
}

/// A figure of theirs, "n/a" when theirs did not run (`--ours-only`).
pub(crate) fn theirs_or_na(s1: &S1, show: impl FnOnce() -> String) -> String {
    if s1.theirs_ran() {
        show()
    } else {
        "n/a".to_owned()
    }
}

/// Whether a target against theirs is met, "n/a" when theirs did not run.
pub(crate) fn vs_theirs(theirs_ran: bool, ok: bool) -> &'static str {
    if theirs_ran {
        yes_no(ok)
    } else {
        "n/a (ours only)"
    }
}

/// One S1 table: a row per N, a column per command and VMOD, each cell
/// `show`ing the repetitions of `what`.
pub(crate) fn s1_cell_table(
    r: &mut String,
    s1: &S1,
    title: &str,
    what: fn(&Cell) -> f64,
    show: impl Fn(&[f64]) -> String,
) {
    let _ = writeln!(r, "### {title}\n");
    let _ = writeln!(
        r,
        "| N | SET ours | SET theirs | GET ours | GET theirs | EVAL ours | EVAL theirs |"
    );
    let _ = writeln!(r, "|---:|---:|---:|---:|---:|---:|---:|");
    for n in S1_NS {
        let mut row = format!("| {n} |");
        for ci in 0..S1_CMDS.len() {
            let _ = write!(row, " {} |", show(&s1.values(0, ci, n, what)));
            let _ = write!(
                row,
                " {} |",
                theirs_or_na(s1, || show(&s1.values(1, ci, n, what)))
            );
        }
        let _ = writeln!(r, "{row}");
    }
    let _ = writeln!(r);
}

pub(crate) fn s1_section(r: &mut String, s1: &S1, o: &Opts, svg_name: &str, t: &mut Targets) {
    let reps = s1.cells.len();
    let _ = writeln!(r, "## S1: VMOD overhead (seed 001)\n");
    let _ = writeln!(
        r,
        "Private connections, `max_connections=1`; one client in a closed loop \
         ({}), {} s per cell after a {} s warm-up on the same URL; {reps} \
         repetitions, each: redis-benchmark, then {}. \
         Figures are medians over the repetitions, ± the spread (max − min) / median.\n",
        match o.s1_client {
            S1Client::Wrk => "`wrk -t1 -c1 --latency`; ms/request = 1000 / req/s",
            S1Client::Ab => "`ab -k -c 1 -t`; ms/request = time / requests",
        },
        s1.secs,
        o.s1_warm,
        if s1.theirs_ran() {
            "both varnishd started side by side and every cell measured on ours then on \
             theirs, back to back"
        } else {
            "ours' varnishd started and every cell measured (ours only: theirs n/a)"
        }
    );
    let _ = writeln!(r, "![S1 plot]({svg_name})\n");
    s1_cell_table(
        r,
        s1,
        "ms per request",
        |c| c.ms,
        |v| format!("{} ±{}%", f(median(v), 4), f(spread_pct(v), 1)),
    );
    s1_cell_table(
        r,
        s1,
        "varnishd child CPU per request (µs, utime + stime)",
        |c| c.cpu_us,
        |v| f(median(v), 1),
    );

    let rtt = |k: usize, p50: bool| -> Vec<f64> {
        s1.rtt
            .iter()
            .map(|x| if p50 { x[k].0 } else { x[k].1 } * 1000.0)
            .collect()
    };
    let _ = writeln!(
        r,
        "### Per-command slope (least squares over N = 0, 1, 2, 4, 8)\n"
    );
    let _ = writeln!(
        r,
        "| command | ours µs | theirs µs | ours / theirs | Redis RTT p50 µs (avg) | ours / RTT | theirs / RTT | blocking RTT p50 µs (mean) | ours / blocking p50 | ours per rep | theirs per rep |"
    );
    let _ = writeln!(r, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|");
    let blocking = |k: usize, p50: bool| -> Vec<f64> {
        s1.rtt_blocking
            .iter()
            .map(|x| if p50 { x[k].0 } else { x[k].1 } * 1000.0)
            .collect()
    };
    let rtt_names = ["SET", "GET", "EVALSHA"];
    let theirs_ran = s1.theirs_ran();
    let th = |x: String| theirs_or_na(s1, || x);
    for (ci, cmd) in S1_CMDS.iter().enumerate() {
        let ours = s1.slopes(0, ci, |c| c.ms, 1000.0);
        let theirs = s1.slopes(1, ci, |c| c.ms, 1000.0);
        let (mo, mt) = (median(&ours), median(&theirs));
        let rtt_p50 = median(&rtt(ci, true));
        let rtt_avg = median(&rtt(ci, false));
        let b_p50 = median(&blocking(ci, true));
        let b_mean = median(&blocking(ci, false));
        let list = |v: &[f64]| v.iter().map(|x| f(*x, 1)).collect::<Vec<_>>().join(", ");
        let _ = writeln!(
            r,
            "| {cmd} | {} | {} | {} | {} ({}) {} | {} | {} | {} ({}) | {} | {} | {} |",
            f(mo, 1),
            th(f(mt, 1)),
            th(f(ratio(mo, mt), 3)),
            f(rtt_p50, 0),
            f(rtt_avg, 0),
            rtt_names[ci],
            f(ratio(mo, rtt_p50), 3),
            th(f(ratio(mt, rtt_p50), 3)),
            f(b_p50, 1),
            f(b_mean, 1),
            f(ratio(mo, b_p50), 3),
            list(&ours),
            th(list(&theirs))
        );
        t.add(format!(
            "S1 latency {cmd}: ours/theirs slope {} (target ≤ 1.0): {}; ours slope / Redis {} RTT p50 {} (target ≤ 1.05): {} \
             (vs the blocking-socket RTT p50: {})",
            th(f(ratio(mo, mt), 3)),
            vs_theirs(theirs_ran, ratio(mo, mt) <= 1.0),
            rtt_names[ci],
            f(ratio(mo, rtt_p50), 3),
            yes_no(ratio(mo, rtt_p50) <= 1.05),
            f(ratio(mo, b_p50), 3)
        ));
    }
    let _ = writeln!(r);
    let _ = writeln!(
        r,
        "Redis RTT per repetition (redis-benchmark -c 1, p50 / avg µs): {}\n",
        s1.rtt
            .iter()
            .map(|x| x
                .iter()
                .zip(rtt_names)
                .map(|(v, n)| format!("{n} {}/{}", f(v.0 * 1000.0, 0), f(v.1 * 1000.0, 0)))
                .collect::<Vec<_>>()
                .join(", "))
            .collect::<Vec<_>>()
            .join("; ")
    );
    let _ = writeln!(
        r,
        "redis-benchmark prints its latencies in steps of about 8 µs at this size (see the \
         values above), too coarse for a 5 % target; the blocking RTT is the harness's own \
         client (one connection with TCP_NODELAY, one request at a time, each timed, {} \
         requests per command), which is also how a worker talks to Redis.\n",
        o.rb_requests
    );
    if o.s1_client == S1Client::Wrk {
        let _ = writeln!(
            r,
            "Robustness check: the same slopes from wrk's median latency (p50) instead of \
             the mean, which a few scheduling stalls cannot move (µs, median over repetitions): {}\n",
            S1_CMDS
                .iter()
                .enumerate()
                .map(|(ci, cmd)| {
                    let ours = median(&s1.slopes(0, ci, |c| c.load.p50_ms, 1000.0));
                    let theirs = median(&s1.slopes(1, ci, |c| c.load.p50_ms, 1000.0));
                    format!(
                        "{cmd} ours {} / theirs {} (ratio {})",
                        f(ours, 1),
                        th(f(theirs, 1)),
                        th(f(ratio(ours, theirs), 3))
                    )
                })
                .collect::<Vec<_>>()
                .join("; ")
        );
    }
    let _ = writeln!(r, "### varnishd child CPU per command (slope, µs)\n");
    let _ = writeln!(
        r,
        "| command | ours µs | theirs µs | ours / theirs | ours per rep | theirs per rep |"
    );
    let _ = writeln!(r, "|---|---:|---:|---:|---|---|");
    for (ci, cmd) in S1_CMDS.iter().enumerate() {
        let ours = s1.slopes(0, ci, |c| c.cpu_us, 1.0);
        let theirs = s1.slopes(1, ci, |c| c.cpu_us, 1.0);
        let (mo, mt) = (median(&ours), median(&theirs));
        let list = |v: &[f64]| v.iter().map(|x| f(*x, 1)).collect::<Vec<_>>().join(", ");
        let _ = writeln!(
            r,
            "| {cmd} | {} | {} | {} | {} | {} |",
            f(mo, 1),
            th(f(mt, 1)),
            th(f(ratio(mo, mt), 3)),
            list(&ours),
            th(list(&theirs))
        );
        t.add(format!(
            "S1 CPU {cmd}: ours/theirs CPU per command {} (target ≤ 0.8): {}",
            th(f(ratio(mo, mt), 3)),
            vs_theirs(theirs_ran, ratio(mo, mt) <= 0.8)
        ));
    }
    let _ = writeln!(r);
    let _ = writeln!(r, "Sanity per repetition (ours / theirs): db.stats() commands.failed; db.stats() connections.total; Redis total_connections_received during the measured runs ({} requests per VMOD and repetition, all cells):\n",
        s1.cells.first().map_or(0, |rep| rep[0].iter().filter(|((c, n), _)| *n > 0 || *c == 0).map(|(_, cell)| cell.load.requests).sum::<u64>()));
    for (i, s) in s1.sanity.iter().enumerate() {
        let _ = writeln!(
            r,
            "- rep {}: failed {} / {}; connections {} / {}; received {} / {}",
            i + 1,
            opt(s[0].failed),
            th(opt(s[1].failed)),
            opt(s[0].connections),
            th(opt(s[1].connections)),
            opt(s[0].received),
            th(opt(s[1].received))
        );
    }
    let _ = writeln!(r);
}
