//! Sending a command over a lease (a private, pooled or multiplexed
//! connection: `lease.rs`): its requests, and what a failed one says
//! of the server.
use std::time::Duration;

use super::execution::Execution;
use super::lease::Lease;
use super::Database;
use crate::connection::{Failure, RequestError};
use crate::error::{Error, Result, Retry, ServerError};
use crate::protocol::Reply;
use crate::server::Server;
use crate::stats::Counter;

impl Database {
    /// Sends the command of `x` on `lease`: an `EVAL` as `EVALSHA` first, unless
    /// `in_multi`, where the `NOSCRIPT` would only come with the `EXEC`.
    /// Each request ends by `deadline`.
    pub(super) fn send(
        &self,
        lease: &mut Lease<'_>,
        server: &Server,
        x: &mut Execution,
        in_multi: bool,
    ) -> Result<Reply> {
        let evalsha = if in_multi {
            None
        } else {
            x.command.packed_as_evalsha()
        };
        let timeout = x.request_timeout();
        let reply = match evalsha {
            Some(evalsha) => match self.request(lease, server, &evalsha, timeout) {
                Ok(Reply::Error(text)) if ServerError::of(&text).retry() == Retry::AsScript => {
                    self.stats.inc(Counter::CommandsNoscript);
                    let timeout = x.request_timeout();
                    self.request(lease, server, x.command.packed(), timeout)
                }
                reply => reply,
            },
            None => self.request(lease, server, x.command.packed(), timeout),
        };
        reply.map_err(unsettled)
    }

    /// One request on `lease`, turning transport failures into counted,
    /// logged errors (and the server sick when it went away).
    pub(super) fn request(
        &self,
        lease: &mut Lease<'_>,
        server: &Server,
        packed: &[u8],
        timeout: Option<Duration>,
    ) -> Result<Reply> {
        // Left out of step by the previous request of this attempt (ROLE,
        // or EVALSHA before EVAL): counted then.
        let was_broken = lease.is_broken();
        let result = lease.request(packed, timeout);
        if result.is_ok() && lease.is_broken() {
            // A reply followed by bytes nobody asked for: the connection
            // is out of step and dropped after this command.
            self.stats.inc(Counter::DroppedError);
        }
        match result {
            Ok(reply) => Ok(reply),
            Err(RequestError::Connect(err)) => Err(err),
            Err(RequestError::Failed(failure)) => Err(server.failed(failure, was_broken, timeout)),
            Err(RequestError::Collateral(failure)) => Err(server.failed(failure, true, timeout)),
            // Late while the server answered others: nothing to drop,
            // nothing said of the server.
            Err(RequestError::Late(_)) => Err(Error::Timeout {
                server: server.location().to_string(),
                timeout_ms: timeout.map_or(0, |t| t.as_millis()),
            }),
        }
    }
}

/// The error of the command's own request: one whose reply broke the
/// protocol is [`Error::Unsettled`] (the server ran the command), never
/// retried; a failure before it (`ROLE`, a connection's preparation) is
/// not.
fn unsettled(err: Error) -> Error {
    match err {
        Error::Io {
            server,
            source: source @ Failure::Protocol(_),
        } => Error::Unsettled { server, source },
        err => err,
    }
}
