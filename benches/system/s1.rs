//! S1 (seed 001): the VMOD's overhead per command, one client.
use super::*;

// S1

#[derive(Clone, Debug, Default)]
pub(crate) struct Cell {
    pub(crate) load: Load,
    pub(crate) ms: f64,
    pub(crate) cpu_us: f64,
}

/// After one S1 pass of one VMOD: db.stats() commands.failed and
/// connections.total, and Redis total_connections_received during the pass.
#[derive(Clone, Copy, Default)]
pub(crate) struct Sanity {
    pub(crate) failed: Option<u64>,
    pub(crate) connections: Option<u64>,
    pub(crate) received: Option<u64>,
}

#[derive(Default)]
pub(crate) struct S1 {
    /// [rep][vmod][(cmd, n)] (n = 0 stored under every cmd).
    pub(crate) cells: Vec<[BTreeMap<(usize, u32), Cell>; 2]>,
    /// [rep]: redis-benchmark p50 / avg in ms for SET, GET, EVALSHA.
    pub(crate) rtt: Vec<[(f64, f64); 3]>,
    /// [rep]: the harness's own blocking client (one connection, TCP_NODELAY,
    /// one request at a time, as a worker does): p50 / mean in ms.
    pub(crate) rtt_blocking: Vec<[(f64, f64); 3]>,
    /// [rep][vmod]: commands.failed, connections.total from db.stats(),
    /// Redis total_connections_received delta over the whole S1 pass.
    pub(crate) sanity: Vec<[Sanity; 2]>,
    pub(crate) secs: u32,
}

pub(crate) fn redis_benchmark(
    o: &Opts,
    redis: &Redis,
    extra: &[&str],
    kind: &str,
) -> Res<Vec<(f64, f64)>> {
    let mut cmd = Process::new("redis-benchmark");
    cmd.args([
        "-h",
        "127.0.0.1",
        "-p",
        &redis.port().to_string(),
        "-c",
        "1",
    ])
    .args(["-n", &o.rb_requests.to_string(), "--csv"])
    .args(extra);
    record(kind, &cmd);
    let (ok, out) = support::run_capture(&mut cmd, "redis-benchmark", None)?;
    if !ok {
        return Err(format!("redis-benchmark failed:\n{out}"));
    }
    // "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms",...
    let mut rows = Vec::new();
    for line in out.lines().filter(|l| !l.starts_with("\"test\"")) {
        let cols: Vec<&str> = line.split("\",\"").map(|c| c.trim_matches('"')).collect();
        if cols.len() >= 5 {
            let avg = cols[2].parse().unwrap_or(f64::NAN);
            let p50 = cols[4].parse().unwrap_or(f64::NAN);
            rows.push((p50, avg));
        }
    }
    if rows.is_empty() {
        return Err(format!("redis-benchmark: no CSV row in:\n{out}"));
    }
    Ok(rows)
}

/// True when `buf` holds one whole simple reply (`+`, `-`, `:`, `$`).
pub(crate) fn simple_reply_complete(buf: &[u8]) -> bool {
    let Some(eol) = buf.windows(2).position(|w| w == b"\r\n") else {
        return false;
    };
    if buf.first() != Some(&b'$') {
        return true;
    }
    match std::str::from_utf8(&buf[1..eol])
        .ok()
        .and_then(|n| n.parse::<i64>().ok())
    {
        Some(n) if n >= 0 => buf.len() >= eol + 2 + n as usize + 2,
        _ => true,
    }
}

/// `count` requests of one command, one at a time on one TCP connection
/// (TCP_NODELAY), each timed: (p50, mean) in ms.
pub(crate) fn blocking_rtt(port: u16, args: &[&str], count: usize) -> Res<(f64, f64)> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    stream.set_nodelay(true).map_err(|e| e.to_string())?;
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .map_err(|e| e.to_string())?;
    let mut req = format!("*{}\r\n", args.len());
    for a in args {
        let _ = write!(req, "${}\r\n{a}\r\n", a.len());
    }
    let mut buf = vec![0u8; 4096];
    let mut times = Vec::with_capacity(count);
    let deadline = Instant::now() + Duration::from_secs(60);
    for _ in 0..count {
        if Instant::now() > deadline {
            break;
        }
        let t0 = Instant::now();
        stream
            .write_all(req.as_bytes())
            .map_err(|e| e.to_string())?;
        let mut end = 0;
        while !simple_reply_complete(&buf[..end]) {
            let n = stream.read(&mut buf[end..]).map_err(|e| e.to_string())?;
            if n == 0 {
                return Err("redis closed the RTT probe connection".into());
            }
            end += n;
        }
        times.push(t0.elapsed().as_secs_f64() * 1000.0);
        if buf[0] == b'-' {
            return Err(format!(
                "RTT probe {}: {}",
                args[0],
                String::from_utf8_lossy(&buf[..end]).trim_end()
            ));
        }
    }
    let mean = times.iter().sum::<f64>() / times.len().max(1) as f64;
    Ok((median(&times), mean))
}

pub(crate) fn run_s1(o: &Opts, env: &mut Env, redis: &mut Redis) -> Res<S1> {
    let mut s1 = S1 {
        secs: o.s1_secs,
        ..S1::default()
    };
    let location = format!("127.0.0.1:{}", redis.port());
    let sha = match redis.probe().command(&["SCRIPT", "LOAD", SCRIPT])? {
        Resp::Bulk(Some(sha)) => sha,
        other => return Err(format!("SCRIPT LOAD: {other:?}")),
    };
    for rep in 0..o.reps {
        eprintln!(
            "system: S1 repetition {}/{}: redis-benchmark",
            rep + 1,
            o.reps
        );
        let sg = redis_benchmark(o, redis, &["-t", "set,get"], "redis-benchmark set,get")?;
        let ev = redis_benchmark(
            o,
            redis,
            &["EVALSHA", &sha, "1", "foo", "42", "1"],
            "redis-benchmark evalsha",
        )?;
        let nan = (f64::NAN, f64::NAN);
        s1.rtt.push([
            sg.first().copied().unwrap_or(nan),
            sg.get(1).copied().unwrap_or(nan),
            ev.first().copied().unwrap_or(nan),
        ]);
        let count = o.rb_requests as usize;
        s1.rtt_blocking.push([
            blocking_rtt(redis.port(), &["SET", "foo", "Hello world!"], count)?,
            blocking_rtt(redis.port(), &["GET", "foo"], count)?,
            blocking_rtt(
                redis.port(),
                &["EVALSHA", &sha, "1", "foo", "42", "1"],
                count,
            )?,
        ]);
        let mut per_vmod: [BTreeMap<(usize, u32), Cell>; 2] = Default::default();
        let mut sanity = [Sanity::default(); 2];
        // Both varnishd run side by side (the idle one costs next to
        // nothing) so that each cell is measured ours, theirs, back to
        // back: drift between the two is seconds, not minutes (ours alone
        // with `--ours-only`).
        let mut varnishes = Vec::new();
        for &vmod in o.vmods() {
            let vcl = s1_vcl(&env.import_line(vmod), &location);
            varnishes.push(Varnish::start(env, &format!("s1-{}", vmod.name()), &vcl)?);
        }
        let mut cells = vec![(0usize, 0u32)];
        for ci in 0..S1_CMDS.len() {
            for n in S1_NS.into_iter().filter(|n| *n > 0) {
                cells.push((ci, n));
            }
        }
        let mut received = [0u64; 2];
        for (ci, n) in cells {
            for (vi, &vmod) in o.vmods().iter().enumerate() {
                let v = &varnishes[vi];
                let url = format!("http://127.0.0.1:{}{}", v.port, s1_url(S1_CMDS[ci], n));
                s1_load(o, &url, o.s1_warm, "S1 warm-up")?;
                let conns0 = redis.probe().info("stats", "total_connections_received");
                let cpu0 = v.cpu();
                let load = s1_load(o, &url, o.s1_secs, "S1")?;
                let cpu1 = v.cpu();
                let conns1 = redis.probe().info("stats", "total_connections_received");
                received[vi] += conns1.zip(conns0).map_or(0, |(a, b)| a - b);
                if load.non2xx > 0 || load.socket_errors > 0 {
                    eprintln!(
                        "system: S1 {} {url}: {} non-2xx, {} socket errors",
                        vmod.name(),
                        load.non2xx,
                        load.socket_errors
                    );
                }
                let cell = Cell {
                    ms: 1000.0 / load.rps,
                    cpu_us: (cpu1 - cpu0) * 1e6 / load.requests.max(1) as f64,
                    load,
                };
                eprintln!(
                    "system: S1 rep {} {:6} {:4} N={n}: {:.4} ms/req (p50 {:.4}), {:.1} us CPU/req",
                    rep + 1,
                    vmod.name(),
                    if n == 0 { "-" } else { S1_CMDS[ci] },
                    cell.ms,
                    cell.load.p50_ms,
                    cell.cpu_us
                );
                if n == 0 {
                    for c in 0..S1_CMDS.len() {
                        per_vmod[vi].insert((c, 0), cell.clone());
                    }
                } else {
                    per_vmod[vi].insert((ci, n), cell);
                }
            }
        }
        for (vi, mut v) in varnishes.into_iter().enumerate() {
            let json = v.stats_json().unwrap_or_default();
            v.stop();
            sanity[vi] = Sanity {
                failed: json_number(&json, "\"commands\"", "failed"),
                connections: json_number(&json, "\"connections\"", "total"),
                received: Some(received[vi]),
            };
        }
        s1.cells.push(per_vmod);
        s1.sanity.push(sanity);
    }
    Ok(s1)
}

impl S1 {
    /// Whether theirs ran (not with `--ours-only`).
    pub(crate) fn theirs_ran(&self) -> bool {
        self.cells.iter().any(|rep| !rep[1].is_empty())
    }

    pub(crate) fn values(&self, vi: usize, ci: usize, n: u32, what: fn(&Cell) -> f64) -> Vec<f64> {
        self.cells
            .iter()
            .map(|rep| rep[vi].get(&(ci, n)).map_or(f64::NAN, what))
            .collect()
    }

    /// Per repetition: the least-squares slope over N, in µs per command.
    pub(crate) fn slopes(
        &self,
        vi: usize,
        ci: usize,
        what: fn(&Cell) -> f64,
        scale: f64,
    ) -> Vec<f64> {
        self.cells
            .iter()
            .map(|rep| {
                let points: Vec<(f64, f64)> = S1_NS
                    .iter()
                    .filter_map(|&n| rep[vi].get(&(ci, n)).map(|c| (n as f64, what(c) * scale)))
                    .collect();
                slope(&points)
            })
            .collect()
    }
}
