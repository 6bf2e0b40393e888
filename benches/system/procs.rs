//! Processes started by the run (stopped by PID on every way out) and the commands recorded for the report.
use super::*;

// Cleanup: every process we start and the temporary directory are registered
// in `support`, stopped and removed by PID on every way out.

/// Cleans up when `main` returns or unwinds.
pub(crate) struct CleanupGuard;

impl Drop for CleanupGuard {
    fn drop(&mut self) {
        cleanup_all();
    }
}

/// Waits for a child we spawned and forgets its PID.
pub(crate) fn reap(mut child: Child) -> Res<std::process::Output> {
    let pid = child.id() as i32;
    let mut stdout = Vec::new();
    let mut stderr = Vec::new();
    if let Some(mut out) = child.stdout.take() {
        let _ = out.read_to_end(&mut stdout);
    }
    if let Some(mut err) = child.stderr.take() {
        let _ = err.read_to_end(&mut stderr);
    }
    let status = child.wait().map_err(|e| e.to_string())?;
    unregister_pid(pid);
    Ok(std::process::Output {
        status,
        stdout,
        stderr,
    })
}

// ---------------------------------------------------------------------------
// The commands that were run, for the report (first of each kind).

pub(crate) static COMMANDS: Mutex<Vec<(String, String)>> = Mutex::new(Vec::new());

pub(crate) fn record(kind: &str, cmd: &Process) {
    let mut commands = COMMANDS.lock();
    if !commands.iter().any(|(k, _)| k == kind) {
        commands.push((kind.to_owned(), command_line(cmd)));
    }
}
