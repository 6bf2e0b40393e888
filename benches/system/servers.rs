//! varnishd under test and its /proc figures (redis-server: redis.rs).
use super::*;

// /proc

pub(crate) fn stat_fields(pid: i32) -> Option<Vec<String>> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    // rest[0] is field 3 (state).
    Some(rest.split_whitespace().map(str::to_owned).collect())
}

#[allow(unsafe_code, reason = "libc::sysconf, which std does not wrap")]
pub(crate) fn clk_tck() -> f64 {
    // SAFETY: sysconf has no memory effects.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

/// utime + stime of a process (all its threads), in seconds.
pub(crate) fn cpu_seconds(pid: i32) -> Option<f64> {
    let f = stat_fields(pid)?;
    let utime: u64 = f.get(11)?.parse().ok()?;
    let stime: u64 = f.get(12)?.parse().ok()?;
    Some((utime + stime) as f64 / clk_tck())
}

// ---------------------------------------------------------------------------
// Varnish

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Vmod {
    Ours,
    Theirs,
}

impl Vmod {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Vmod::Ours => "ours",
            Vmod::Theirs => "theirs",
        }
    }
}

pub(crate) struct Env {
    pub(crate) tmp: PathBuf,
    pub(crate) ours_so: PathBuf,
    pub(crate) seq: usize,
    /// `--pin`: varnishd on its own CPU.
    pub(crate) pin: bool,
}

impl Env {
    pub(crate) fn import_line(&self, vmod: Vmod) -> String {
        match vmod {
            Vmod::Ours => format!("import redis from \"{}\";", self.ours_so.display()),
            Vmod::Theirs => "import redis;".to_owned(),
        }
    }
}

pub(crate) struct Varnish {
    pub(crate) varnishd: Varnishd,
    pub(crate) cache: i32,
    pub(crate) port: u16,
    pub(crate) workdir: PathBuf,
}

impl Varnish {
    pub(crate) fn start(env: &mut Env, label: &str, vcl: &str) -> Res<Varnish> {
        env.seq += 1;
        let name = format!("{:03}-{label}", env.seq);
        let vcl_path = env.tmp.join(format!("{name}.vcl"));
        support::write_public(&vcl_path, vcl)?;
        let workdir = env.tmp.join(format!("{name}.varnish"));
        let log = env.tmp.join(format!("{name}.log"));
        let varnishd = Varnishd::start(
            &workdir,
            &vcl_path,
            &log,
            &[],
            |port| matches!(http_get(port, "/stats"), Ok((200, _))),
            |cmd| record("varnishd", cmd),
        )
        .map_err(|e| format!("{label}: {e}"))?;
        let v = Varnish {
            cache: varnishd.child_pid,
            port: varnishd.port,
            varnishd,
            workdir,
        };
        if env.pin {
            // The manager too: a restarted child would inherit its mask.
            pin_pid(v.varnishd.manager_pid, VARNISH_CPU)?;
            pin_pid(v.cache, VARNISH_CPU)?;
        }
        Ok(v)
    }

    pub(crate) fn cpu(&self) -> f64 {
        cpu_seconds(self.cache).unwrap_or(f64::NAN)
    }

    pub(crate) fn rss_kb(&self) -> Option<u64> {
        support::proc_status(self.cache, "VmRSS")
    }

    pub(crate) fn varnishstat(&self, field: &str) -> Option<u64> {
        let mut cmd = Process::new("varnishstat");
        cmd.arg("-n").arg(&self.workdir).args(["-1", "-f", field]);
        record("varnishstat", &cmd);
        let (ok, out) = support::run_capture(&mut cmd, "varnishstat", None).ok()?;
        if !ok {
            return None;
        }
        out.lines()
            .find(|l| l.starts_with(field))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
    }

    pub(crate) fn stats_json(&self) -> Option<String> {
        match http_get(self.port, "/stats") {
            Ok((200, body)) => Some(body),
            _ => None,
        }
    }

    pub(crate) fn stop(&mut self) {
        self.varnishd.stop();
        let _ = fs::remove_dir_all(&self.workdir);
    }
}

impl Drop for Varnish {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A number after `"key": ` in the stats JSON, the first after `after`.
pub(crate) fn json_number(json: &str, after: &str, key: &str) -> Option<u64> {
    let start = json.find(after)?;
    let rest = &json[start..];
    let k = rest.find(&format!("\"{key}\""))?;
    let rest = &rest[k + key.len() + 2..];
    let rest = rest.trim_start().strip_prefix(':')?.trim_start();
    let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    digits.parse().ok()
}
