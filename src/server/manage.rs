//! How a server's connections are opened, checked and prepared (what
//! preparing one sends: `prepare.rs`): the [`ManageConnection`] its pools hold, with what fails counted in the
//! database's counters and reflected in the server's health.
use std::time::{Duration, Instant};

use super::Server;
use crate::connection::{Connection, Failure, ManageConnection, OpenFailure};
use crate::error::Error;
use crate::stats::Counter;

/// The bounds of the two stages of an opening for a command whose
/// timeout is `command` (none: 0), as the C VMOD has them: the TCP / UNIX
/// connect within `connection_timeout` (the command's timeout when that
/// is 0), then the handshake on the connected socket (TLS, `HELLO` /
/// `AUTH`) within the command's timeout, as hiredis's socket timeout
/// bounds it. With no command timeout the C VMOD's handshake waits for
/// ever; ours within `connection_timeout`: a server that accepts and
/// never answers does not hold a worker for good (none if both are 0).
pub(crate) fn opening_bounds(
    connection: Option<Duration>,
    command: Option<Duration>,
) -> (Option<Duration>, Option<Duration>) {
    (connection.or(command), command.or(connection))
}

/// Whether a failed opening spaces the next attempts to its server (the
/// reconnect back-off, whose attempts meanwhile fail at once). A server
/// that could not be reached (connect refused, reset or timed out, name
/// unknown) or that refused the handshake (wrong password, certificate,
/// closed) would fail every attempt alike: spaced. One that accepted and
/// stayed silent in the handshake is alive and busy (`DEBUG SLEEP`, a
/// long script) or frozen: not spaced, as after a command that timed out
/// on an open connection; each command waits for it within its own
/// timeout (a stopped Redis stops accepting once its `tcp-backlog` is
/// full, then connects time out and are spaced; a proxy in front of a
/// stuck one may accept for ever, and each command waits its timeout).
pub(crate) fn backs_off(failure: OpenFailure) -> bool {
    match failure {
        OpenFailure::Unreachable | OpenFailure::Refused => true,
        OpenFailure::Silent => false,
    }
}

impl ManageConnection for Server {
    type Error = Error;

    /// A new connection for a command of `timeout`; a failure makes the
    /// server sick, and one that did not reach a live server
    /// ([`backs_off`]) spaces the next attempts, which fail at once until
    /// then.
    fn connect(
        &self,
        deadline: Option<Instant>,
        timeout: Option<Duration>,
    ) -> Result<Connection, Error> {
        if let Err(wait) = self.health.may_connect() {
            return Err(self.backoff(wait));
        }
        let policy = &self.policy;
        let (connect, handshake) = opening_bounds(policy.connect_timeout, timeout);
        match (self.connector).connect_staged(&policy.stats, connect, handshake, deadline) {
            Ok(conn) => {
                self.health.connect_succeeded();
                Ok(conn)
            }
            Err(err) => {
                self.health.mark_failed();
                if backs_off(err.failure) {
                    self.health.connect_failed();
                } else {
                    // It answered the connect: reached, as when a command
                    // times out on a connection already open.
                    self.health.connect_succeeded();
                }
                Err(err.into())
            }
        }
    }

    fn may_open(&self) -> Result<(), Error> {
        match self.health.connect_wait() {
            Some(wait) => Err(self.backoff(wait)),
            None => Ok(()),
        }
    }

    /// Not past `connection_ttl`, not older than the server's last failure,
    /// not closed by the server while idle (else counted as dropped).
    fn is_usable(&self, conn: &mut Connection, now: Instant) -> bool {
        let stats = &self.policy.stats;
        if conn.expired(self.policy.ttl, now) {
            stats.inc(Counter::DroppedTtl);
            false
        } else if self.health.outdates(conn.created()) {
            stats.inc(Counter::DroppedSick);
            false
        } else if conn.closed_while_idle(now) {
            // Redis `timeout`, a proxy, CLIENT KILL: found before a command
            // is written to it and fails.
            stats.inc(Counter::DroppedHungUp);
            false
        } else {
            true
        }
    }

    /// Step 2 of the preparation (`prepare.rs`): `INFO server` and
    /// `READONLY`, as the server wants them, each once per connection.
    fn prepare(
        &self,
        conn: Connection,
        timeout: Option<Duration>,
        deadline: Option<Instant>,
    ) -> Result<Connection, Error> {
        self.prepare_connection(conn, timeout, deadline)
    }
}

impl Server {
    /// The error of a connect refused by the reconnect spacing, `wait`
    /// before the next attempt.
    fn backoff(&self, wait: Duration) -> Error {
        Error::Backoff {
            server: self.location().to_string(),
            retry_in_ms: wait.as_millis().max(1),
        }
    }

    /// The error of a request that got no reply, its connection dropped
    /// with it (counted here unless `counted`), the server made sick.
    pub(crate) fn failed(
        &self,
        failure: Failure,
        counted: bool,
        timeout: Option<Duration>,
    ) -> Error {
        let stats = &self.policy.stats;
        let server = self.location().to_string();
        match failure {
            Failure::Timeout => {
                // A server that does not answer in time is avoided like
                // one that went away, while others can serve.
                if !counted {
                    stats.inc(Counter::DroppedError);
                }
                self.health.mark_failed();
                return Error::Timeout {
                    server,
                    timeout_ms: timeout.map_or(0, |t| t.as_millis()),
                };
            }
            _ if counted => {}
            Failure::HungUp(_) => stats.inc(Counter::DroppedHungUp),
            Failure::Io(_) | Failure::Protocol(_) => stats.inc(Counter::DroppedError),
        }
        self.health.mark_failed();
        Error::Io {
            server,
            source: failure,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: fn(u64) -> Option<Duration> = |ms| Some(Duration::from_millis(ms));

    #[test]
    fn the_handshake_is_bounded_by_the_command_timeout_the_connect_by_connection_timeout() {
        // As hiredis: connect within connection_timeout, the rest within
        // the command's timeout, whichever is longer.
        assert_eq!(opening_bounds(MS(200), MS(5_000)), (MS(200), MS(5_000)));
        assert_eq!(opening_bounds(MS(1_000), MS(100)), (MS(1_000), MS(100)));
        // connection_timeout=0: the command's timeout for both.
        assert_eq!(opening_bounds(None, MS(300)), (MS(300), MS(300)));
        // No command timeout: never for ever while connection_timeout has one.
        assert_eq!(opening_bounds(MS(200), None), (MS(200), MS(200)));
        assert_eq!(opening_bounds(None, None), (None, None));
    }

    #[test]
    fn only_a_server_that_was_not_reached_or_refused_is_backed_off() {
        assert!(backs_off(OpenFailure::Unreachable));
        assert!(backs_off(OpenFailure::Refused));
        assert!(!backs_off(OpenFailure::Silent));
    }
}
