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

pub(crate) fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:=,@%+".contains(c))
    {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

pub(crate) fn command_line(cmd: &Process) -> String {
    let mut line = shell_quote(&cmd.get_program().to_string_lossy());
    for arg in cmd.get_args() {
        line.push(' ');
        line.push_str(&shell_quote(&arg.to_string_lossy()));
    }
    line
}

pub(crate) fn record(kind: &str, cmd: &Process) {
    let mut commands = COMMANDS.lock();
    if !commands.iter().any(|(k, _)| k == kind) {
        commands.push((kind.to_owned(), command_line(cmd)));
    }
}

/// Runs a short command to completion and returns its stdout + stderr.
pub(crate) fn run_capture(cmd: &mut Process, name: &str) -> Res<(bool, String)> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let out = reap(spawn(cmd, name)?)?;
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    Ok((out.status.success(), text))
}
