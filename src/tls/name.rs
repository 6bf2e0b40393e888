//! The server's name, as hiredis (so the C VMOD) treats it: not checked.
//! hiredis verifies the chain against its CAs and sends `tls_sni` as SNI,
//! nothing more; Redis's utils/gen-test-certs.sh makes a server
//! certificate with `CN=Server-only` and no other name, reached by IP
//! address in most deployments that follow it. So by default a
//! certificate that does not name the server (`tls_sni`, else the host)
//! is taken once its chain is verified, and said once per server and
//! configuration (a database, the Sentinels); `tls_verify_name=true`
//! [ext] refuses it, with the verifier's own words.
//!
//! The verifier runs inside rustls, during the handshake, on the thread
//! that drives it (`connection/stream/tls.rs`, a thread of its own per
//! handshake): what it let through is left in a thread-local slot that
//! this thread takes when the handshake is over. A resumed session is not
//! verified again: its server's mismatch was said when it was.
use std::cell::RefCell;
use std::collections::HashSet;
use std::sync::OnceLock;

use parking_lot::Mutex;

use crate::logger::Log;

/// A server certificate, its chain verified, that does not name the
/// server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NameMismatch {
    /// The name it was checked against: `tls_sni`, else the host.
    pub expected: String,
    /// The names in the certificate: its DNS names and IP addresses, then
    /// its subject's CNs (`CN=...`).
    pub presented: Vec<String>,
}

impl NameMismatch {
    /// The log line's text about the server at `server`. The names are
    /// the certificate's (its CA's words, not ours): control characters
    /// shown as `?`, at most [`NAMES_SHOWN`] of them.
    pub(crate) fn describe(&self, server: &str) -> String {
        let shown: Vec<String> = self
            .presented
            .iter()
            .take(NAMES_SHOWN)
            .map(|name| {
                name.chars()
                    .map(|c| if c.is_control() { '?' } else { c })
                    .collect()
            })
            .collect();
        let mut names = match shown.is_empty() {
            true => "no name".to_owned(),
            false => shown.join(", "),
        };
        if self.presented.len() > NAMES_SHOWN {
            names += &format!(" and {} more", self.presented.len() - NAMES_SHOWN);
        }
        format!(
            "TLS: the certificate of {server} is not valid for name \"{}\" (it names {names}); \
             connected as hiredis does, its chain verified; tls_verify_name=true refuses such a server",
            self.expected
        )
    }
}

/// The most names of a certificate one log line shows.
const NAMES_SHOWN: usize = 8;

thread_local! {
    /// What the verifier let through in the handshake this thread drives.
    static LET_THROUGH: RefCell<Option<NameMismatch>> = const { RefCell::new(None) };
}

/// Called by the verifier when it takes a certificate that does not name
/// the server.
pub(super) fn let_through(mismatch: NameMismatch) {
    LET_THROUGH.with(|slot| *slot.borrow_mut() = Some(mismatch));
}

/// What the verifier let through on this thread since the last call.
pub(crate) fn take_let_through() -> Option<NameMismatch> {
    LET_THROUGH.with(|slot| slot.borrow_mut().take())
}

/// The name policy of one TLS configuration, shared by its clones (every
/// connector of a database, or of the Sentinels).
pub(super) struct NameCheck {
    /// `tls_verify_name=true`: a mismatch refuses the server.
    pub(super) strict: bool,
    /// The servers (`host:port`) whose mismatch was reported.
    said: Mutex<HashSet<String>>,
    /// Set once by the configuration's owner, which logs and counts the
    /// text ([`NameMismatch::describe`]); unset, nothing is reported
    /// (nor marked as said).
    report: OnceLock<Log>,
}

impl NameCheck {
    pub(super) fn new(strict: bool) -> NameCheck {
        NameCheck {
            strict,
            said: Mutex::new(HashSet::new()),
            report: OnceLock::new(),
        }
    }

    pub(super) fn report_to(&self, report: Log) {
        let _ = self.report.set(report);
    }

    /// Reports `mismatch` of the server at `server`, the first time only.
    /// Only after a handshake that let a mismatch through: no lock
    /// otherwise.
    pub(super) fn seen(&self, server: &str, mismatch: &NameMismatch) {
        let Some(report) = self.report.get() else {
            return;
        };
        if self.said.lock().insert(server.to_owned()) {
            report.error(&mismatch.describe(server));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn mismatch() -> NameMismatch {
        NameMismatch {
            expected: "127.0.0.1".into(),
            presented: vec!["CN=Server".into()],
        }
    }

    #[test]
    fn said_once_per_server_and_only_once_there_is_a_report() {
        let check = NameCheck::new(false);
        // No report yet (a configuration no one owns): not said, so not
        // marked either.
        check.seen("127.0.0.1:6380", &mismatch());
        let said = Arc::new(Mutex::new(Vec::new()));
        let into = said.clone();
        check.report_to(crate::logger::Log::to(move |_, text| {
            into.lock().push(text.to_owned())
        }));
        for _ in 0..3 {
            check.seen("127.0.0.1:6380", &mismatch());
            check.seen("127.0.0.1:6381", &mismatch());
        }
        assert_eq!(
            *said.lock(),
            [6380, 6381].map(|port| format!(
                "TLS: the certificate of 127.0.0.1:{port} is not valid for name \"127.0.0.1\" \
                 (it names CN=Server); connected as hiredis does, its chain verified; \
                 tls_verify_name=true refuses such a server"
            ))
        );
        let nameless = NameMismatch {
            presented: Vec::new(),
            ..mismatch()
        };
        assert!(nameless.describe("h:1").contains("(it names no name)"));
        let many = NameMismatch {
            presented: (0..20).map(|n| format!("h{n}\n")).collect(),
            ..mismatch()
        };
        assert!(
            many.describe("h:1")
                .contains("(it names h0?, h1?, h2?, h3?, h4?, h5?, h6?, h7? and 12 more);"),
            "{}",
            many.describe("h:1")
        );
    }
}
