//! The VMOD's one log: what a line is ([`Level`]), where a layer that has
//! no task sends it ([`Log`]), and which sinks besides VSL take every line
//! ([`LogSinks`], `VMOD_REDIS_LOG_SINKS`). The writing itself (VSL, syslog,
//! stderr) is `src/ffi/log.rs`, the one place that turns a level into a VSL
//! tag and a syslog priority, for lines of a task (`Ctx::log`) and lines
//! outside any (a [`Log`] it makes). The layers below the VCL layer (the
//! near cache's tracking threads, the TLS name check, the Sentinel threads,
//! a database at load) hold a [`Log`] and never depend on the FFI.
use std::sync::Arc;

/// How bad a line is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Level {
    /// Something failed or was refused: VSL `VCL_Error`, syslog `LOG_ERR`.
    Error,
    /// What happened (`debug=true` lines, a change Sentinel caused): VSL
    /// `Debug`, syslog `LOG_INFO` (as the C VMOD).
    Info,
}

/// Where a layer sends the lines it says outside any task; each line
/// carries its `[REDIS] ...` prefix. Cheap to clone: one writer shared.
#[derive(Clone)]
pub(crate) struct Log(Arc<Writer>);

/// What a [`Log`] hands each line to.
type Writer = dyn Fn(Level, &str) + Send + Sync;

impl Log {
    /// A log that hands every line to `write`.
    pub(crate) fn to(write: impl Fn(Level, &str) + Send + Sync + 'static) -> Log {
        Log(Arc::new(write))
    }

    /// A log that drops every line (a database built outside a VCL, tests).
    pub(crate) fn discard() -> Log {
        Log::to(|_, _| {})
    }

    pub(crate) fn line(&self, level: Level, text: &str) {
        (self.0)(level, text);
    }

    pub(crate) fn error(&self, text: &str) {
        self.line(Level::Error, text);
    }

    pub(crate) fn info(&self, text: &str) {
        self.line(Level::Info, text);
    }
}

/// The sinks of every log line besides VSL, read once per process from
/// `VMOD_REDIS_LOG_SINKS`, as the C VMOD's newest releases read it. Every
/// C VMOD release writes its log lines to syslog as well as VSL; that
/// stays the default.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LogSinks {
    pub(crate) syslog: bool,
    pub(crate) stderr: bool,
}

impl LogSinks {
    /// Without `VMOD_REDIS_LOG_SINKS`: syslog, as the C VMOD.
    pub(crate) const DEFAULT: LogSinks = LogSinks {
        syslog: true,
        stderr: false,
    };

    /// The value of `VMOD_REDIS_LOG_SINKS`: `syslog`, `stderr` or both,
    /// separated by commas or blanks, in any case; empty or `none`: VSL
    /// only; unset: [`LogSinks::DEFAULT`]. Unknown words are ignored (the
    /// variable is read where nothing can be refused).
    pub(crate) fn parse(value: Option<&str>) -> LogSinks {
        let Some(value) = value else {
            return LogSinks::DEFAULT;
        };
        let mut sinks = LogSinks {
            syslog: false,
            stderr: false,
        };
        for word in value.split([',', ' ', '\t']).filter(|w| !w.is_empty()) {
            if word.eq_ignore_ascii_case("syslog") {
                sinks.syslog = true;
            } else if word.eq_ignore_ascii_case("stderr") {
                sinks.stderr = true;
            }
        }
        sinks
    }
}

#[cfg(test)]
mod tests {
    use parking_lot::Mutex;

    use super::*;

    fn sinks(syslog: bool, stderr: bool) -> LogSinks {
        LogSinks { syslog, stderr }
    }

    #[test]
    fn syslog_unless_told_otherwise() {
        assert_eq!(LogSinks::parse(None), sinks(true, false));
        assert_eq!(LogSinks::parse(Some("syslog,stderr")), sinks(true, true));
        assert_eq!(LogSinks::parse(Some(" STDERR ")), sinks(false, true));
        assert_eq!(LogSinks::parse(Some("stderr syslog")), sinks(true, true));
        assert_eq!(LogSinks::parse(Some("")), sinks(false, false));
        assert_eq!(LogSinks::parse(Some("none")), sinks(false, false));
        assert_eq!(LogSinks::parse(Some("journal,stderr")), sinks(false, true));
    }

    #[test]
    fn a_clone_writes_to_the_same_place_at_the_level_asked() {
        let lines = Arc::new(Mutex::new(Vec::new()));
        let seen = lines.clone();
        let log = Log::to(move |level, text| seen.lock().push((level, text.to_owned())));
        log.error("a");
        log.clone().info("b");
        assert_eq!(
            *lines.lock(),
            [
                (Level::Error, "a".to_owned()),
                (Level::Info, "b".to_owned())
            ]
        );
    }
}
