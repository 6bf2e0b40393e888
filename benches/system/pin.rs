//! `--pin`: varnishd on one CPU, redis-server and wrk on the other, so that
//! a one-client run does not depend on where the scheduler puts them (on a
//! 2-core VM, one-client S2 runs were bimodal without it).
use super::*;

/// varnishd's CPU (manager, cache child, every thread).
pub(crate) const VARNISH_CPU: u32 = 0;
/// The CPU of redis-server(s) and wrk.
pub(crate) const LOAD_CPU: u32 = 1;

/// `cmd` under `taskset -c LOAD_CPU` when `pin`, else `None` (run `cmd`
/// itself); call it before setting stdio (which a Command does not give
/// back).
pub(crate) fn on_load_cpu(pin: bool, cmd: &Process) -> Option<Process> {
    if !pin {
        return None;
    }
    let mut t = Process::new("taskset");
    t.args(["-c", &LOAD_CPU.to_string()])
        .arg(cmd.get_program())
        .args(cmd.get_args());
    if let Some(dir) = cmd.get_current_dir() {
        t.current_dir(dir);
    }
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => t.env(k, v),
            None => t.env_remove(k),
        };
    }
    Some(t)
}

/// Pins every thread of a running process to `cpu`; threads it starts later
/// inherit the mask from the thread that creates them.
pub(crate) fn pin_pid(pid: i32, cpu: u32) -> Res<()> {
    let mut cmd = Process::new("taskset");
    cmd.args(["-a", "-c", "-p", &cpu.to_string(), &pid.to_string()]);
    record("taskset varnishd", &cmd);
    let (ok, out) = support::run_capture(&mut cmd, "taskset", None)?;
    if ok {
        Ok(())
    } else {
        Err(format!("{}: {out}", command_line(&cmd)))
    }
}

/// The report's line about pinning.
pub(crate) fn pin_note(pin: bool) -> String {
    if pin {
        format!(
            "on (`--pin`): varnishd (manager and child, all threads) on CPU {VARNISH_CPU}, \
             redis-server(s) and wrk on CPU {LOAD_CPU}"
        )
    } else {
        "off (the scheduler places every process)".to_owned()
    }
}
