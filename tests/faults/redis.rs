//! The redis-server of a trial.
use super::*;

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
}

impl Redis {
    /// Starts on a free port (tries a few), its files in `dir`.
    pub(crate) fn start(dir: &Path) -> Res<Redis> {
        Redis::start_with(dir, &[])
    }

    /// [`Redis::start`] with more redis-server options. `dir` (its log,
    /// its data directory) is made if need be.
    pub(crate) fn start_with(dir: &Path, args: &[String]) -> Res<Redis> {
        make_dir(dir)?;
        support::on_free_port(5, |port| {
            let mut redis = Redis {
                dir: dir.to_path_buf(),
                port,
                child: None,
                pid: 0,
                args: args.to_vec(),
            };
            Ok(match redis.spawn() {
                Ok(()) => support::OnPort::Up(redis),
                Err(e) => support::OnPort::Retry(e),
            })
        })
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
