//! The varnishd of a trial.
use super::*;

pub(crate) struct Varnish {
    /// The manager and the child (cache process) found at start.
    pub(crate) varnishd: Varnishd,
    pub(crate) port: u16,
    pub(crate) workdir: PathBuf,
    pub(crate) log: PathBuf,
}

impl Varnish {
    pub(crate) fn start(dir: &Path, vcl: &str) -> Res<Varnish> {
        let vcl_path = dir.join("boot.vcl");
        write_public(&vcl_path, vcl)?;
        let workdir = dir.join("varnish");
        let log = dir.join("varnishd.log");
        let params = [
            "thread_pools=1".to_string(),
            format!("thread_pool_min={WORKER_THREADS}"),
            format!("thread_pool_max={WORKER_THREADS}"),
            "vcl_cooldown=1".to_string(),
            // A small log ring, fully written early on: otherwise VmRSS
            // grows by its pages for the first 80 MB of log.
            "vsl_space=16M".to_string(),
            // The generated C of a VCL, compiled without optimisation:
            // a VCL churn cycle is mostly this compile (3 s at -O2 here
            // under load). It changes nothing in the VMOD.
            "cc_command=exec gcc -O0 -pthread -fpic -shared -Wl,-x -o %o %s".to_string(),
        ];
        let mut args = vec!["-s".to_string(), "malloc,32m".to_string()];
        for p in params {
            args.push("-p".to_string());
            args.push(p);
        }
        let varnishd = Varnishd::start(
            &workdir,
            &vcl_path,
            &log,
            &args,
            |port| http_get(port, "/ping").is_ok_and(|r| r.status == 200),
            |_| {},
        )?;
        let varnish = Varnish {
            port: varnishd.port,
            varnishd,
            workdir,
            log,
        };
        // Let the pool reach its fixed size before anyone measures.
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline
            && varnish.stat("MAIN.threads").unwrap_or(0) < u64::from(WORKER_THREADS)
        {
            thread::sleep(Duration::from_millis(50));
        }
        Ok(varnish)
    }

    /// `varnishstat -1` values of the given fields.
    pub(crate) fn stats(&self, fields: &[&str]) -> Res<HashMap<String, u64>> {
        let mut cmd = Command::new("varnishstat");
        cmd.arg("-n").arg(&self.workdir).arg("-1");
        for f in fields {
            cmd.args(["-f", f]);
        }
        let (ok, out) =
            support::run_capture(&mut cmd, "varnishstat", Some(Duration::from_secs(20)))?;
        if !ok {
            return Err(format!("varnishstat failed: {out}"));
        }
        Ok(out
            .lines()
            .filter_map(|l| {
                let mut words = l.split_whitespace();
                let name = words.next()?;
                let value = words.next()?.parse().ok()?;
                Some((name.to_string(), value))
            })
            .collect())
    }

    pub(crate) fn stat(&self, field: &str) -> Option<u64> {
        self.stats(&[field]).ok()?.get(field).copied()
    }

    /// `varnishadm -n <workdir> ARGS`, 120 s at most.
    pub(crate) fn adm(&self, args: &[&str]) -> Res<String> {
        let mut cmd = Command::new("varnishadm");
        cmd.arg("-n")
            .arg(&self.workdir)
            .args(["-t", "100"])
            .args(args);
        let (ok, out) =
            support::run_capture(&mut cmd, "varnishadm", Some(Duration::from_secs(120)))?;
        if ok {
            Ok(out)
        } else {
            Err(format!("varnishadm {}: {out}", args.join(" ")))
        }
    }

    /// The child against `redis`: its sockets to the port the VMOD
    /// reaches, Redis's clients (asked on its plain port).
    pub(crate) fn snapshot(&self, redis: &Redis) -> Snapshot {
        let pid = self.varnishd.child_pid;
        let mut snap = Snapshot::take(pid, redis.port);
        if redis.tls.is_some() {
            snap.redis_fds = tcp_inodes_count(pid, redis.vmod_port());
        }
        snap
    }

    /// The checks that follow every scenario: no panic, no restart.
    pub(crate) fn check_child(&self, failures: &mut Vec<String>) -> String {
        let stats = match self.stats(&["MGT.child_panic", "MGT.child_died"]) {
            Ok(stats) => stats,
            Err(e) => {
                failures.push(e);
                return "varnishstat failed".into();
            }
        };
        let panic = stats.get("MGT.child_panic").copied();
        let died = stats.get("MGT.child_died").copied();
        if panic != Some(0) {
            failures.push(format!(
                "MGT.child_panic = {panic:?}; varnishd log:\n{}",
                tail_file(&self.log, 60)
            ));
        }
        if died != Some(0) {
            failures.push(format!("MGT.child_died = {died:?}"));
        }
        let child = find_cache_child(self.varnishd.manager_pid);
        if child != Some(self.varnishd.child_pid) {
            failures.push(format!(
                "varnishd child changed: {} at start, {child:?} now",
                self.varnishd.child_pid
            ));
        }
        format!(
            "MGT.child_panic {}, MGT.child_died {}",
            panic.map_or("?".into(), |v| v.to_string()),
            died.map_or("?".into(), |v| v.to_string())
        )
    }
}
