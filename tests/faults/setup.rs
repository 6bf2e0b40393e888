//! One trial's processes, its error log, its checks for leaks.
use super::*;

/// `varnishlog -g raw -i VCL_Error` running for the whole trial.
pub(crate) struct ErrorLog {
    pub(crate) child: Option<Child>,
    pub(crate) path: PathBuf,
}

impl ErrorLog {
    pub(crate) fn start(varnish: &Varnish, dir: &Path) -> Res<ErrorLog> {
        let path = dir.join("vcl_error.log");
        let out = fs::File::create(&path).map_err(|e| e.to_string())?;
        let child = support::spawn(
            Command::new("varnishlog")
                .arg("-n")
                .arg(&varnish.workdir)
                .args(["-g", "raw", "-i", "VCL_Error"])
                .stdin(Stdio::null())
                .stdout(out)
                .stderr(Stdio::null()),
            "varnishlog",
        )?;
        // It reads from the head of the log: give it a moment to attach.
        thread::sleep(Duration::from_millis(300));
        Ok(ErrorLog {
            child: Some(child),
            path,
        })
    }

    pub(crate) fn stop(&mut self) {
        if let Some(child) = self.child.take() {
            // Let it flush what it read last.
            thread::sleep(Duration::from_millis(300));
            stop_child(child, "varnishlog", Duration::from_secs(5));
        }
    }

    /// Distinct messages (numbers masked) with their count, most frequent
    /// first, and one example of each.
    pub(crate) fn summary(&mut self) -> Vec<String> {
        self.stop();
        let text = fs::read_to_string(&self.path).unwrap_or_default();
        let mut kinds: Vec<(String, usize, String)> = Vec::new();
        for line in text.lines() {
            let Some(msg) = line.split_once("VCL_Error").map(|(_, m)| m.trim()) else {
                continue;
            };
            let key: String = msg
                .chars()
                .map(|c| if c.is_ascii_digit() { '#' } else { c })
                .collect();
            match kinds.iter_mut().find(|(k, _, _)| *k == key) {
                Some(kind) => kind.1 += 1,
                None => kinds.push((key, 1, msg.to_string())),
            }
        }
        kinds.sort_by_key(|k| std::cmp::Reverse(k.1));
        kinds
            .into_iter()
            .take(12)
            .map(|(_, n, example)| format!("x{n}: {example}"))
            .collect()
    }
}

impl Drop for ErrorLog {
    fn drop(&mut self) {
        self.stop();
    }
}

/// What [`Setup::disrupt`] saw.
pub(crate) struct Disruption {
    pub(crate) report: Report,
    /// The child 0.3 s before the disruption, and settled after the load.
    pub(crate) before: Snapshot,
    pub(crate) after: Snapshot,
    pub(crate) counters: Counters,
    /// Load clock (s): disruption applied, restore begun, restore done.
    pub(crate) started: f64,
    pub(crate) restoring: f64,
    pub(crate) restored: f64,
}

/// Redis, varnishd with the VCL of `dbs`, and the failures so far.
pub(crate) struct Setup {
    pub(crate) name: String,
    pub(crate) redis: Redis,
    pub(crate) varnish: Varnish,
    /// `varnishlog -i VCL_Error` of the whole trial.
    pub(crate) errlog: ErrorLog,
    /// The child once started, before any load.
    pub(crate) idle: Snapshot,
    pub(crate) failures: Vec<String>,
}

impl Setup {
    pub(crate) fn start(name: &str, dbs: &[DbSpec]) -> Res<Setup> {
        let dir = support::trial_dir(name)?;
        let redis = Redis::start(&dir)?;
        Setup::in_front_of(name, &dir, redis, dbs)
    }

    /// [`Setup::start`] with Redis on TLS: every database reaches its TLS
    /// port (`tls = true`), verified against the CA that signed its
    /// certificate.
    pub(crate) fn start_tls(name: &str, dbs: &[DbSpec]) -> Res<Setup> {
        let dir = support::trial_dir(name)?;
        let redis = Redis::start_tls(&dir)?;
        let ca = redis.tls.as_ref().map(|tls| tls.ca.clone());
        let dbs: Vec<DbSpec> = dbs
            .iter()
            .map(|db| DbSpec {
                tls_cafile: ca.clone(),
                ..db.clone()
            })
            .collect();
        Setup::in_front_of(name, &dir, redis, &dbs)
    }

    /// varnishd from `dir` with the VCL of `dbs` in front of `redis`.
    fn in_front_of(name: &str, dir: &Path, redis: Redis, dbs: &[DbSpec]) -> Res<Setup> {
        let so = support::vmod_so()?;
        let varnish = Varnish::start(dir, &vcl(&so, redis.vmod_port(), dbs, "boot"))?;
        // One request through every path first, so that what Varnish opens
        // lazily is open before the baseline is taken.
        for db in dbs {
            let _ = http_get(varnish.port, &format!("/{}/stats", db.name));
        }
        thread::sleep(Duration::from_millis(200));
        let idle = varnish.snapshot(&redis);
        Setup::started(name, dir, redis, varnish, idle)
    }

    /// varnishd from `dir` with the VCL `text`, in front of `redis` and
    /// the other servers of `ports` (all of them, for the baseline).
    pub(crate) fn with_vcl(
        name: &str,
        dir: &Path,
        redis: Redis,
        text: &str,
        ports: &[u16],
    ) -> Res<Setup> {
        let varnish = Varnish::start(dir, text)?;
        let _ = http_get(varnish.port, "/db/stats");
        thread::sleep(Duration::from_millis(500));
        let idle = settled_all(&varnish, ports);
        Setup::started(name, dir, redis, varnish, idle)
    }

    /// The setup of a started varnishd whose idle baseline is `idle`:
    /// its error log followed from now on.
    fn started(
        name: &str,
        dir: &Path,
        redis: Redis,
        varnish: Varnish,
        idle: Snapshot,
    ) -> Res<Setup> {
        let errlog = ErrorLog::start(&varnish, dir)?;
        let setup = Setup {
            name: name.to_string(),
            redis,
            varnish,
            errlog,
            idle,
            failures: Vec::new(),
        };
        setup.say(format!("child idle: {idle}"));
        Ok(setup)
    }

    pub(crate) fn say(&self, line: impl AsRef<str>) {
        println!("[{}] {}", self.name, line.as_ref());
    }

    /// Says the child's figures `before`, their `peak` (threads and fds)
    /// `during` what, and `after`.
    pub(crate) fn say_child(
        &self,
        before: &Snapshot,
        peak: &Snapshot,
        during: &str,
        after: &Snapshot,
    ) {
        self.say(format!("child before: {before}"));
        self.say(format!(
            "child peak {during}: threads {}, fds {}",
            peak.threads, peak.fds
        ));
        self.say(format!("child after: {after}"));
    }

    /// Says which request was the slowest, against `bound`.
    pub(crate) fn say_worst(&self, report: &Report, bound: Duration) {
        if let Some(w) = report.samples.iter().max_by_key(|x| x.latency_us) {
            self.say(format!(
                "worst request: {} ms, sent at {:.2} s (bound {} ms)",
                w.latency_us / 1000,
                w.start_us as f64 / 1e6,
                bound.as_millis()
            ));
        }
    }

    pub(crate) fn check(&mut self, ok: bool, what: impl FnOnce() -> String) {
        if !ok {
            self.failures.push(what());
        }
    }

    pub(crate) fn snapshot(&self) -> Snapshot {
        self.varnish.snapshot(&self.redis)
    }

    /// Runs `load`, applies `disrupt` to Redis `at` s into it and `restore`
    /// `lasting` s later, waits for the load to end, and takes what the
    /// checks need (a failed `restore` is reported once the load is over).
    pub(crate) fn disrupt(
        &mut self,
        load: LoadSpec,
        at: f64,
        lasting: f64,
        disrupt: impl FnOnce(&mut Redis),
        restore: impl FnOnce(&mut Redis) -> Res<()>,
    ) -> Res<Disruption> {
        let load = Load::start(load);
        load.sleep_until(at - 0.3);
        let before = self.snapshot();
        load.sleep_until(at);
        let started = load.at();
        disrupt(&mut self.redis);
        load.sleep_until(started + lasting);
        let restoring = load.at();
        let restore_result = restore(&mut self.redis);
        let restored = load.at();
        let report = load.finish();
        restore_result?;
        thread::sleep(Duration::from_millis(300));
        let after = self.settled_snapshot();
        let counters = counters(self.varnish.port, "db")?;
        Ok(Disruption {
            report,
            before,
            after,
            counters,
            started,
            restoring,
            restored,
        })
    }

    /// Waits until Redis has caught up with the connections the child closed
    /// (both counts agree), 3 s at most, and returns the snapshot.
    pub(crate) fn settled_snapshot(&self) -> Snapshot {
        settled(|| self.snapshot())
    }

    /// Leak checks after a scenario, against the idle child before any
    /// load: threads back to the same count, fds other than Redis sockets
    /// back to the same count (a little slack for sessions Varnish has not
    /// closed yet), Redis connections within `bound` and seen alike by
    /// Varnish and Redis.
    pub(crate) fn check_leaks(&mut self, after: &Snapshot, bound: usize) {
        let before = self.idle;
        self.check_threads_fds(&before, after, "");
        self.check(after.redis_fds <= bound, || {
            format!(
                "child holds {} Redis connections, bound {bound}",
                after.redis_fds
            )
        });
        self.check(after.redis_clients == Some(after.redis_fds as u64), || {
            format!(
                "Redis sees {:?} clients, the child holds {} sockets to it",
                after.redis_clients, after.redis_fds
            )
        });
    }

    /// The child's thread count the same as `before`, its fds other than
    /// Redis sockets at most 2 more (sessions Varnish has not closed yet).
    /// `what` goes into the messages.
    pub(crate) fn check_threads_fds(&mut self, before: &Snapshot, after: &Snapshot, what: &str) {
        self.check(after.threads == before.threads, || {
            format!(
                "child threads{what}: {} before, {} after",
                before.threads, after.threads
            )
        });
        self.check(after.other_fds() <= before.other_fds() + 2, || {
            format!(
                "child fds other than Redis sockets{what}: {} before, {} after",
                before.other_fds(),
                after.other_fds()
            )
        });
    }

    /// After a scenario: a lone client gets replies to every command, and
    /// is never counted in `workers.blocked` (the pool's count of workers
    /// in it came back down).
    pub(crate) fn check_lone_client(&mut self, db: &str) -> Res<()> {
        let blocked = counters(self.varnish.port, db)?.get("workers.blocked");
        let mut conn = connect(self.varnish.port, Duration::from_secs(5))
            .map_err(|e| format!("connect: {e}"))?;
        let mut bad = Vec::new();
        for i in 0..30 {
            let resp = request(&mut conn, &format!("/{db}/mix/lone"))
                .map_err(|e| format!("lone client, request {i}: {e}"))?;
            let r = resp.headers.get("x-r").cloned().unwrap_or_default();
            if resp.status != 200 || r != "r111" {
                bad.push(format!("{} {r}", resp.status));
            }
        }
        let blocked_after = counters(self.varnish.port, db)?.get("workers.blocked");
        self.say(format!(
            "lone client after the scenario: 30 x (SET, GET, EVAL), {} not fully answered, workers.blocked +{}",
            bad.len(),
            blocked_after - blocked
        ));
        self.check(bad.is_empty(), || {
            format!("lone client after the scenario: {bad:?}")
        });
        self.check(blocked_after == blocked, || {
            format!(
                "a lone client was counted blocked {} times",
                blocked_after - blocked
            )
        });
        Ok(())
    }

    pub(crate) fn finish(mut self) -> Result<(), Failed> {
        let status = self.varnish.check_child(&mut self.failures);
        for line in self.errlog.summary() {
            self.say(format!("VCL_Error {line}"));
        }
        self.say(status);
        if self.failures.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "{} check(s) failed:\n- {}",
                self.failures.len(),
                self.failures.join("\n- ")
            )
            .into())
        }
    }
}

/// The connections a database may hold: shared, its pool; private, one per
/// worker thread.
pub(crate) fn connection_bound(db: &DbSpec) -> usize {
    match db.mode {
        Mode::Shared => db.max_connections as usize,
        // The multiplexed connections, and as many ordinary ones for the
        // commands that cannot share one.
        Mode::Pipelined => 2 * db.max_connections as usize,
        Mode::Private => (WORKER_THREADS * db.max_connections) as usize,
    }
}

pub(crate) fn ms(secs: f64) -> String {
    format!("{:.0} ms", secs * 1000.0)
}
