//! Where every log line of the VMOD is written: VSL (the task's log, or a
//! record outside any transaction), then the sinks `VMOD_REDIS_LOG_SINKS`
//! names (syslog by default, stderr). A line of a task comes through
//! `Ctx::log`, a line outside any (a thread of the module's own, a TLS
//! handshake, a database at load) through the [`Log`] [`outside_tasks`]
//! makes: both end in [`write`].
use std::ffi::CString;
use std::io::Write;
use std::sync::OnceLock;

use super::bindings;
use crate::logger::{Level, Log, LogSinks};

/// The transaction id of a record that belongs to no transaction: an
/// integer up to Varnish 7.2, a `vxid_t` struct (`NO_VXID`) from 7.3 on.
#[cfg(not(vrt_vxid_t))]
const NO_VXID: u32 = 0;
#[cfg(vrt_vxid_t)]
const NO_VXID: bindings::vxid_t = bindings::vxids { vxid: 0 };

/// The log of the layers that have no task: VSL records outside any
/// transaction, from any thread of the child (the Sentinel thread has no
/// `VRT_CTX`).
pub(crate) fn outside_tasks() -> Log {
    Log::to(|level, text| write(std::ptr::null_mut(), level, text))
}

/// Writes `msg` to `vsl`, the task's log, or outside any transaction when
/// it is NULL; then to the other sinks.
pub(super) fn write(vsl: *mut bindings::vsl_log, level: Level, msg: &str) {
    let text = c_text(msg);
    let tag = vsl_tag(level);
    // SAFETY: "%s" with one NUL-terminated string; `vsl` is NULL or the
    // log of the task whose call is running (Ctx::log), and VSL() writes a
    // non-transactional record under the log's own lock.
    unsafe {
        if vsl.is_null() {
            bindings::VSL(tag, NO_VXID, c"%s".as_ptr(), text.as_ptr());
        } else {
            bindings::VSLb(vsl, tag, c"%s".as_ptr(), text.as_ptr());
        }
    }
    to_sinks(level, msg, &text);
}

fn vsl_tag(level: Level) -> bindings::VSL_tag_e {
    match level {
        Level::Error => bindings::VSL_tag_e_SLT_VCL_Error,
        Level::Info => bindings::VSL_tag_e_SLT_Debug,
    }
}

/// Sends a log line to the sinks `VMOD_REDIS_LOG_SINKS` names besides
/// VSL (syslog by default, as every C VMOD release). The lines carry no
/// secret: what they quote of a server's refusal is cut before
/// (`connection/redact.rs`).
fn to_sinks(level: Level, msg: &str, text: &CString) {
    static SINKS: OnceLock<LogSinks> = OnceLock::new();
    let sinks = SINKS
        .get_or_init(|| LogSinks::parse(std::env::var("VMOD_REDIS_LOG_SINKS").ok().as_deref()));
    if sinks.syslog {
        let priority = match level {
            Level::Error => libc::LOG_ERR,
            // The C VMOD logs what is not an error at LOG_INFO.
            Level::Info => libc::LOG_INFO,
        };
        // SAFETY: "%s" with one NUL-terminated string; syslog() is
        // thread-safe and opens its socket itself.
        unsafe { libc::syslog(priority, c"%s".as_ptr(), text.as_ptr()) }
    }
    if sinks.stderr {
        // One write per line, so that lines of several threads do not mix.
        let line = format!("{msg}\n");
        let _ = std::io::stderr().write_all(line.as_bytes());
    }
}

/// A Rust string for C: interior NUL bytes would cut it, so they are shown
/// as `\0`.
pub(super) fn c_text(text: &str) -> CString {
    CString::new(text.replace('\0', "\\0")).unwrap_or_default()
}
