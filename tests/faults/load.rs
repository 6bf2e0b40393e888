//! The load driver: concurrent clients, their outcomes, and the checks on them.
use super::*;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Outcome {
    /// 200, every command got a reply.
    Ok,
    /// 200, at least one command got no reply (the VCL fell back).
    Fallback,
    /// 200, an error reply and no missing reply.
    ErrorReply,
    /// Any other status.
    Http(u16),
    /// Connection refused / reset / closed.
    Io,
    /// No response within the deadline.
    Hung,
}

#[derive(Clone, Copy)]
pub(crate) struct Sample {
    /// Since the start of the load, µs.
    pub(crate) start_us: u64,
    pub(crate) latency_us: u64,
    pub(crate) outcome: Outcome,
    /// Commands that got no reply (`0` in `x-r`).
    pub(crate) missed: u8,
    /// Commands that got a reply (`1` or `e`).
    pub(crate) replied: u8,
    /// Index of the path in `LoadSpec::paths`.
    pub(crate) path: u8,
}

impl Sample {
    pub(crate) fn end_us(&self) -> u64 {
        self.start_us + self.latency_us
    }
}

pub(crate) struct LoadSpec {
    pub(crate) port: u16,
    pub(crate) clients: usize,
    pub(crate) duration: Duration,
    /// Cycled through by each client; `{c}` is the client's number, `{n}`
    /// the request's within the client (with `{c}`: a key no other
    /// request of the load names).
    pub(crate) paths: Vec<String>,
    /// A request not answered within this is `Hung`.
    pub(crate) deadline: Duration,
}

pub(crate) struct Load {
    pub(crate) t0: Instant,
    pub(crate) stop: Arc<AtomicBool>,
    pub(crate) threads: Vec<thread::JoinHandle<Vec<Sample>>>,
}

/// Upper bound of requests per client, whatever the duration.
pub(crate) const MAX_REQUESTS_PER_CLIENT: usize = 5_000_000;

impl Load {
    pub(crate) fn start(spec: LoadSpec) -> Load {
        let t0 = Instant::now();
        let stop = Arc::new(AtomicBool::new(false));
        let end = t0 + spec.duration;
        let spec = Arc::new(spec);
        let threads = (0..spec.clients)
            .map(|c| {
                let spec = spec.clone();
                let stop = stop.clone();
                thread::Builder::new()
                    .name(format!("load-{c}"))
                    .stack_size(256 * 1024)
                    .spawn(move || client_loop(&spec, c, t0, end, &stop))
                    .expect("spawn load thread")
            })
            .collect();
        Load { t0, stop, threads }
    }

    /// Seconds since the load started.
    pub(crate) fn at(&self) -> f64 {
        self.t0.elapsed().as_secs_f64()
    }

    /// Sleeps until `secs` after the start of the load.
    pub(crate) fn sleep_until(&self, secs: f64) {
        let target = self.t0 + Duration::from_secs_f64(secs);
        let now = Instant::now();
        if target > now {
            thread::sleep(target - now);
        }
    }

    /// Waits for every client (each stops at the end of the duration, and
    /// each request is bounded by the deadline).
    pub(crate) fn finish(mut self) -> Report {
        let mut samples = Vec::new();
        for t in self.threads.drain(..) {
            samples.extend(t.join().unwrap_or_default());
        }
        samples.sort_by_key(|s| s.start_us);
        Report {
            samples,
            secs: self.t0.elapsed().as_secs_f64(),
        }
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

pub(crate) fn client_loop(
    spec: &LoadSpec,
    c: usize,
    t0: Instant,
    end: Instant,
    stop: &AtomicBool,
) -> Vec<Sample> {
    let paths: Vec<String> = spec
        .paths
        .iter()
        .map(|p| p.replace("{c}", &c.to_string()))
        .collect();
    let mut samples = Vec::with_capacity(4096);
    let mut conn: Option<BufReader<TcpStream>> = None;
    let mut i = c; // spread the commands across clients
    while Instant::now() < end
        && !stop.load(Ordering::Relaxed)
        && samples.len() < MAX_REQUESTS_PER_CLIENT
    {
        let path_index = i % paths.len();
        let numbered;
        let path = if paths[path_index].contains("{n}") {
            numbered = paths[path_index].replace("{n}", &samples.len().to_string());
            &numbered
        } else {
            &paths[path_index]
        };
        i += 1;
        let started = Instant::now();
        let result = match conn.as_mut() {
            Some(c) => request(c, path),
            None => connect(spec.port, spec.deadline).and_then(|mut c| {
                let r = request(&mut c, path);
                conn = Some(c);
                r
            }),
        };
        let latency = started.elapsed();
        let (outcome, missed, replied) = match result {
            Ok(resp) if resp.status == 200 => {
                let r = resp.headers.get("x-r").map(String::as_str).unwrap_or("");
                let missed = r.matches('0').count() as u8;
                let replied = r.matches(['1', 'e']).count() as u8;
                let outcome = if missed > 0 {
                    Outcome::Fallback
                } else if r.contains('e') {
                    Outcome::ErrorReply
                } else {
                    Outcome::Ok
                };
                (outcome, missed, replied)
            }
            Ok(resp) => (Outcome::Http(resp.status), 0, 0),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                conn = None;
                (Outcome::Hung, 0, 0)
            }
            Err(_) => {
                conn = None;
                (Outcome::Io, 0, 0)
            }
        };
        if outcome == Outcome::Io {
            // Do not spin on a refused connection.
            thread::sleep(Duration::from_millis(10));
        }
        let outcome = if latency > spec.deadline && outcome != Outcome::Io {
            Outcome::Hung
        } else {
            outcome
        };
        samples.push(Sample {
            start_us: started.duration_since(t0).as_micros() as u64,
            latency_us: latency.as_micros() as u64,
            outcome,
            missed,
            replied,
            path: path_index as u8,
        });
    }
    samples
}

pub(crate) struct Report {
    pub(crate) samples: Vec<Sample>,
    pub(crate) secs: f64,
}

/// Figures of a set of samples.
pub(crate) struct Figures {
    pub(crate) requests: usize,
    pub(crate) ok: usize,
    pub(crate) fallback: usize,
    pub(crate) error_reply: usize,
    pub(crate) http: usize,
    pub(crate) io: usize,
    pub(crate) hung: usize,
    pub(crate) missed: u64,
    pub(crate) replied: u64,
    pub(crate) p50_ms: f64,
    pub(crate) p99_ms: f64,
    pub(crate) worst_ms: f64,
}

impl Report {
    pub(crate) fn window(&self, from_s: f64, to_s: f64) -> Vec<Sample> {
        let (from, to) = ((from_s * 1e6) as u64, (to_s * 1e6) as u64);
        self.samples
            .iter()
            .filter(|s| s.start_us >= from && s.start_us < to)
            .copied()
            .collect()
    }

    /// The requests of `LoadSpec::paths[path]`.
    pub(crate) fn of_path(&self, path: usize) -> Vec<Sample> {
        self.samples
            .iter()
            .filter(|s| usize::from(s.path) == path)
            .copied()
            .collect()
    }

    /// The requests answered before `to_s`.
    pub(crate) fn ended_before(&self, to_s: f64) -> Vec<Sample> {
        let to = (to_s * 1e6) as u64;
        self.samples
            .iter()
            .filter(|s| s.end_us() < to)
            .copied()
            .collect()
    }

    pub(crate) fn all(&self) -> Figures {
        figures(&self.samples)
    }

    /// When the last fallback was answered (load clock, s), if any was.
    pub(crate) fn last_fallback_end(&self) -> Option<f64> {
        self.samples
            .iter()
            .filter(|s| s.outcome == Outcome::Fallback)
            .map(|s| s.end_us() as f64 / 1e6)
            .reduce(f64::max)
    }

    /// Seconds from `t` until the first reply answered after it, if any.
    pub(crate) fn first_ok_after(&self, t: f64) -> Option<f64> {
        self.samples
            .iter()
            .filter(|s| s.outcome == Outcome::Ok && s.end_us() as f64 / 1e6 >= t)
            .map(|s| s.end_us() as f64 / 1e6 - t)
            .reduce(f64::min)
    }
}

pub(crate) fn figures(samples: &[Sample]) -> Figures {
    let mut lat: Vec<u64> = samples.iter().map(|s| s.latency_us).collect();
    lat.sort_unstable();
    let pct = |p: f64| -> f64 {
        if lat.is_empty() {
            return 0.0;
        }
        let i = ((lat.len() as f64 * p).ceil() as usize).clamp(1, lat.len()) - 1;
        lat[i] as f64 / 1000.0
    };
    let count = |o: fn(&Outcome) -> bool| samples.iter().filter(|s| o(&s.outcome)).count();
    Figures {
        requests: samples.len(),
        ok: count(|o| *o == Outcome::Ok),
        fallback: count(|o| *o == Outcome::Fallback),
        error_reply: count(|o| *o == Outcome::ErrorReply),
        http: count(|o| matches!(o, Outcome::Http(_))),
        io: count(|o| *o == Outcome::Io),
        hung: count(|o| *o == Outcome::Hung),
        missed: samples.iter().map(|s| u64::from(s.missed)).sum(),
        replied: samples.iter().map(|s| u64::from(s.replied)).sum(),
        p50_ms: pct(0.50),
        p99_ms: pct(0.99),
        worst_ms: lat.last().map_or(0.0, |&l| l as f64 / 1000.0),
    }
}

impl std::fmt::Display for Figures {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} requests (ok {}, fallback {}, error replies {}, other status {}, io errors {}, hung {}); latency p50 {:.2} ms, p99 {:.2} ms, worst {:.2} ms",
            self.requests,
            self.ok,
            self.fallback,
            self.error_reply,
            self.http,
            self.io,
            self.hung,
            self.p50_ms,
            self.p99_ms,
            self.worst_ms
        )
    }
}

/// The failures every scenario shares: answers that are not a 200 from
/// Varnish, and requests past their deadline.
pub(crate) fn check_answers(f: &Figures, failures: &mut Vec<String>) {
    check_status(f, failures);
    if f.error_reply > 0 {
        failures.push(format!("{} requests got an error reply", f.error_reply));
    }
}

/// Every request answered by Varnish with a 200 (error replies allowed).
pub(crate) fn check_status(f: &Figures, failures: &mut Vec<String>) {
    if f.http + f.io + f.hung > 0 {
        failures.push(format!(
            "requests not answered with a 200: other status {}, io errors {}, hung {}",
            f.http, f.io, f.hung
        ));
    }
}

/// No request took longer than `bound`; `label` prefixes the failure.
pub(crate) fn check_worst(f: &Figures, bound: Duration, label: &str, failures: &mut Vec<String>) {
    if f.worst_ms > bound.as_secs_f64() * 1000.0 {
        failures.push(format!(
            "{label}worst request {:.1} ms, bound {} ms",
            f.worst_ms,
            bound.as_millis()
        ));
    }
}

/// The counters against what the clients saw: `commands.total` counts the
/// sends that got a reply (here one per command that got one),
/// `commands.failed` every failed attempt, i.e. one per command without a
/// reply plus one per retry.
pub(crate) fn check_counters(f: &Figures, c: &Counters, failures: &mut Vec<String>) {
    check_counters_with(f, c, 0, 0, failures);
}

/// [`check_counters`] where `busy` retries followed a reply that the retry
/// count covers (`TRYAGAIN`, `CLUSTERDOWN`), not a failed attempt, and
/// `redirected` sends got a `MOVED` or `ASK`: each of those replies is
/// one more in `commands.total`.
pub(crate) fn check_counters_with(
    f: &Figures,
    c: &Counters,
    busy: u64,
    redirected: u64,
    failures: &mut Vec<String>,
) {
    if c.get("commands.total") != f.replied + busy + redirected {
        failures.push(format!(
            "commands.total {} but {} commands got a reply, after {busy} replies retried and {redirected} redirections",
            c.get("commands.total"),
            f.replied
        ));
    }
    if c.get("commands.failed") + busy != f.missed + c.get("commands.retried") {
        failures.push(format!(
            "commands.failed {} but {} commands got no reply and {} were retried ({busy} after a reply)",
            c.get("commands.failed"),
            f.missed,
            c.get("commands.retried")
        ));
    }
}
