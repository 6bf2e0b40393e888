//! What a failed vtc file shows: its output without the CLI pings, a summary of its last steps.
use super::*;

/// varnishtest's output without the manager's CLI pings (two `vsl|` lines
/// and a `dT` line every 3 s per varnishd), which fill the log of a test
/// that hangs until its timeout.
pub(crate) fn without_cli_pings(text: &str) -> String {
    let mut kept: Vec<&str> = Vec::new();
    for line in text.lines() {
        if line.contains(" CLI ") && (line.ends_with("Rd ping") || line.contains("Wr 200 19 PONG"))
        {
            // Drop the dT line announcing the ping too.
            if kept.last().is_some_and(|l| l.starts_with("**** dT")) {
                kept.pop();
            }
            continue;
        }
        kept.push(line);
    }
    kept.join("\n") + "\n"
}

/// The test's top-level commands (`**   top   === ...`), last ones only, and
/// every failure line (`---- `): what ran, and what went wrong where.
pub(crate) fn steps_summary(text: &str) -> String {
    const LAST_STEPS: usize = 12;
    let steps: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("**   top   === "))
        .collect();
    let failures: Vec<&str> = text.lines().filter(|l| l.starts_with("---- ")).collect();
    let mut out = format!(
        "\n--- last {} of {} top-level steps ---\n",
        LAST_STEPS.min(steps.len()),
        steps.len()
    );
    for l in &steps[steps.len().saturating_sub(LAST_STEPS)..] {
        out.push_str(l);
        out.push('\n');
    }
    out.push_str("--- failure lines ---\n");
    for l in &failures {
        out.push_str(l);
        out.push('\n');
    }
    if failures.is_empty() {
        out.push_str("(none: the test was stopped, most likely at the last step above)\n");
    }
    out
}

pub(crate) fn describe(status: ExitStatus) -> String {
    match status.code() {
        Some(c) => format!("exited with {c}"),
        None => format!("ended by {status}"),
    }
}
