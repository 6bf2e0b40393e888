//! The redis-server of a trial.
use super::*;
use std::os::unix::fs::PermissionsExt;

pub(crate) fn redis_info(port: u16, section: &str, field: &str) -> Option<u64> {
    info_field(&redis_cmd(port, None, &["INFO", section]).ok()?, field)
}

pub(crate) struct Redis {
    pub(crate) dir: PathBuf,
    pub(crate) port: u16,
    pub(crate) child: Option<Child>,
    pub(crate) pid: i32,
    /// Given to redis-server after the suite's own options.
    pub(crate) args: Vec<String>,
    /// A TLS port beside the plain one (which the trial's own probes
    /// use), and the files it serves.
    pub(crate) tls: Option<TlsPort>,
}

impl Redis {
    /// Starts on a free port (tries a few), its files in `dir`.
    pub(crate) fn start(dir: &Path) -> Res<Redis> {
        Redis::start_with(dir, &[])
    }

    /// [`Redis::start`] with more redis-server options. `dir` (its log,
    /// its data directory) is made if need be.
    pub(crate) fn start_with(dir: &Path, args: &[String]) -> Res<Redis> {
        Redis::start_on_free_ports(dir, args, || Ok(None))
    }

    /// [`Redis::start`] with a TLS port too (`--tls-auth-clients no`): a
    /// certificate for 127.0.0.1 signed by the CA of `tls.ca`, the files
    /// in `<dir>/tls` (tests/support/tls_material.rs).
    pub(crate) fn start_tls(dir: &Path) -> Res<Redis> {
        let tls_dir = dir.join("tls");
        make_dir(&tls_dir)?;
        let material = tls_material::write_material(&tls_dir)?;
        // varnishd's workers read the CA under their own user.
        fs::set_permissions(&material.ca, fs::Permissions::from_mode(0o644))
            .map_err(|e| format!("chmod {}: {e}", material.ca.display()))?;
        Redis::start_on_free_ports(dir, &[], || {
            Ok(Some(TlsPort {
                port: support::free_port()?,
                cert: material.server_cert.clone(),
                key: material.server_key.clone(),
                ca: material.ca.clone(),
                auth_clients: "no",
            }))
        })
    }

    /// Starts on a free port, with the TLS port `tls` gives if any (both
    /// picked again on each try: either may be taken before redis-server
    /// binds it).
    fn start_on_free_ports(
        dir: &Path,
        args: &[String],
        tls: impl Fn() -> Res<Option<TlsPort>>,
    ) -> Res<Redis> {
        make_dir(dir)?;
        support::on_free_port(5, |port| {
            let mut redis = Redis {
                dir: dir.to_path_buf(),
                port,
                child: None,
                pid: 0,
                args: args.to_vec(),
                tls: tls()?,
            };
            Ok(match redis.spawn() {
                Ok(()) => support::OnPort::Up(redis),
                Err(e) => support::OnPort::Retry(e),
            })
        })
    }

    /// The port the VMOD reaches: the TLS one if any.
    pub(crate) fn vmod_port(&self) -> u16 {
        self.tls.as_ref().map_or(self.port, |tls| tls.port)
    }

    pub(crate) fn log(&self) -> PathBuf {
        self.dir.join("redis.log")
    }

    /// Starts redis-server on `self.port` and waits (10 s at most) for PING.
    pub(crate) fn spawn(&mut self) -> Res<()> {
        let data = self.dir.join("redis.data");
        make_dir(&data)?;
        let mut config = RedisConfig::new(data);
        config.port = self.port;
        config.log = Some(self.log());
        let mut args = vec!["--enable-debug-command".to_string(), "yes".to_string()];
        if let Some(tls) = &self.tls {
            args.extend(tls.args());
        }
        args.extend(self.args.iter().cloned());
        let spawn = |cmd: &mut Command| {
            cmd.stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            support::spawn(cmd, "redis-server")
        };
        let port = self.port;
        let (server, waited) = RedisServer::start(
            &config,
            &args,
            spawn,
            Duration::from_secs(10),
            Duration::from_millis(20),
            || support::pings(Ipv4Addr::LOCALHOST, port, None).is_ok(),
        )?;
        let child = server.into_child();
        self.pid = child.id() as i32;
        let what = match waited {
            Waited::Ready => {
                self.child = Some(child);
                return Ok(());
            }
            Waited::Exited(status) => {
                unregister_pid(self.pid);
                format!("exited ({status})")
            }
            Waited::TimedOut => {
                support::kill_child(child);
                "not up after 10 s".to_string()
            }
        };
        Err(format!(
            "redis-server on port {port} {what}:\n{}",
            tail_file(&self.log(), 20)
        ))
    }

    pub(crate) fn kill9(&mut self) {
        if let Some(child) = self.child.take() {
            support::kill_child(child);
        }
    }

    pub(crate) fn freeze(&mut self) {
        signal(self.pid, libc::SIGSTOP);
    }

    pub(crate) fn thaw(&mut self) -> Res<()> {
        signal(self.pid, libc::SIGCONT);
        Ok(())
    }

    pub(crate) fn stop(&mut self) {
        if let Some(child) = self.child.take() {
            stop_child(child, "redis-server", Duration::from_secs(5));
        }
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.stop();
    }
}
