//! Where the VMOD's log lines go besides VSL: `VMOD_REDIS_LOG_SINKS`, as
//! the C VMOD's newest releases read it. Every C VMOD release writes its
//! log lines to syslog as well as VSL; that stays the default.

/// The sinks of every log line, read once per process.
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
    use super::LogSinks;

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
}
