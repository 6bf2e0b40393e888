//! Load generators: wrk and ab.
use super::*;

// Load generators

#[derive(Clone, Debug, Default)]
pub(crate) struct Load {
    pub(crate) requests: u64,
    pub(crate) secs: f64,
    pub(crate) rps: f64,
    pub(crate) non2xx: u64,
    pub(crate) socket_errors: u64,
    pub(crate) p50_ms: f64,
    pub(crate) p99_ms: f64,
}

/// wrk, on the load CPU with `--pin`.
pub(crate) fn wrk_cmd(pin: bool, threads: u32, conns: u32, secs: u32, url: &str) -> Process {
    let mut cmd = Process::new("wrk");
    cmd.arg(format!("-t{threads}"))
        .arg(format!("-c{conns}"))
        .arg(format!("-d{secs}s"))
        .arg("--latency")
        .arg(url);
    let mut cmd = on_load_cpu(pin, &cmd).unwrap_or(cmd);
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

pub(crate) fn duration_ms(s: &str) -> Option<f64> {
    let num_end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let n: f64 = s[..num_end].parse().ok()?;
    Some(match &s[num_end..] {
        "us" => n / 1000.0,
        "ms" => n,
        "s" => n * 1000.0,
        "m" => n * 60_000.0,
        _ => return None,
    })
}

pub(crate) fn parse_wrk(out: &str) -> Res<Load> {
    let mut l = Load {
        p50_ms: f64::NAN,
        p99_ms: f64::NAN,
        ..Load::default()
    };
    let mut seen = false;
    for line in out.lines().map(str::trim) {
        let words: Vec<&str> = line.split_whitespace().collect();
        if words.len() >= 4 && words[1] == "requests" && words[2] == "in" {
            l.requests = words[0].parse().map_err(|_| format!("wrk: {line}"))?;
            l.secs = words[3]
                .trim_end_matches(',')
                .strip_suffix('s')
                .and_then(|s| s.parse().ok())
                .unwrap_or(f64::NAN);
            seen = true;
        } else if let Some(v) = line.strip_prefix("Requests/sec:") {
            l.rps = v.trim().parse().map_err(|_| format!("wrk: {line}"))?;
        } else if let Some(v) = line.strip_prefix("Non-2xx or 3xx responses:") {
            l.non2xx = v.trim().parse().unwrap_or(0);
        } else if let Some(v) = line.strip_prefix("Socket errors:") {
            l.socket_errors = v
                .split(',')
                .filter_map(|part| part.split_whitespace().nth(1)?.parse::<u64>().ok())
                .sum();
        } else if words.len() == 2 && words[0] == "50%" {
            l.p50_ms = duration_ms(words[1]).unwrap_or(f64::NAN);
        } else if words.len() == 2 && words[0] == "99%" {
            l.p99_ms = duration_ms(words[1]).unwrap_or(f64::NAN);
        }
    }
    if !seen || l.rps <= 0.0 {
        return Err(format!("wrk: no result in its output:\n{out}"));
    }
    Ok(l)
}

pub(crate) fn parse_ab(out: &str) -> Res<Load> {
    let mut l = Load {
        p50_ms: f64::NAN,
        p99_ms: f64::NAN,
        ..Load::default()
    };
    let field = |key: &str| {
        out.lines()
            .find_map(|line| line.trim().strip_prefix(key))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<f64>().ok())
    };
    l.requests = field("Complete requests:").ok_or("ab: no 'Complete requests'")? as u64;
    l.secs = field("Time taken for tests:").ok_or("ab: no 'Time taken'")?;
    l.rps = l.requests as f64 / l.secs;
    l.non2xx = field("Non-2xx responses:").unwrap_or(0.0) as u64;
    l.socket_errors = field("Failed requests:").unwrap_or(0.0) as u64;
    Ok(l)
}

/// One closed-loop, single-client run of S1.
pub(crate) fn s1_load(o: &Opts, url: &str, secs: u32, kind: &str) -> Res<Load> {
    let mut cmd = match o.s1_client {
        S1Client::Wrk => wrk_cmd(o.pin, 1, 1, secs, url),
        S1Client::Ab => {
            let mut cmd = Process::new("ab");
            cmd.args(["-q", "-k", "-c", "1", "-t", &secs.to_string()])
                .args(["-n", "100000000", url])
                .stdin(Stdio::null());
            cmd
        }
    };
    record(kind, &cmd);
    let (ok, out) = support::run_capture(&mut cmd, "load generator", None)?;
    if !ok {
        return Err(format!("{}: failed:\n{out}", command_line(&cmd)));
    }
    match o.s1_client {
        S1Client::Wrk => parse_wrk(&out),
        S1Client::Ab => parse_ab(&out),
    }
}
