//! How a server prepares a connection for its commands: every request a
//! connection gets besides the commands, in the order it gets them, and
//! the one record of them ([`Prepared`], kept with the connection).
//!
//! 1. At its opening, the [`Connector`](crate::connection::Connector):
//!    TLS, then `HELLO` (a protocol was asked for, `AUTH` included) or
//!    `AUTH` (a password); `AUTH` alone again for a server without
//!    `HELLO`. No `SELECT`: the module always uses database 0.
//! 2. At each checkout from a pool or a worker's list, before a command
//!    has it ([`Server::prepare_connection`], the pools'
//!    [`ManageConnection::prepare`](crate::connection::ManageConnection)):
//!    [ext] `INFO server` once (`near_cache`: which server it reached,
//!    compared with the tracking connection's), then `READONLY` once (a
//!    cluster replica, for the reads).
//! 3. Before each attempt's command, on its lease ([`Server::takes_role`],
//!    then [`Server::role_checked`]): `ROLE` (`type=auto`) on each
//!    connection once, and again while the role is unknown. Not at the
//!    checkout: a place on a multiplexed connection is leased without one,
//!    and the command must not be queued before the answer says whether
//!    the server may take it.
//!
//! The role check of `vcl_init`, on a connection of its own, is
//! [`Server::probe_role`].
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::{role_from_reply, Server};
use crate::config::Role;
use crate::connection::{within, Connection, Failure, Prepared};
use crate::error::{Error, Retry, ServerError};
use crate::protocol::resp::ProtocolError;
use crate::protocol::Reply;
use crate::stats::Stats;

/// The `ROLE` request, packed.
pub(crate) const ROLE: &[u8] = b"*1\r\n$4\r\nROLE\r\n";
/// The `READONLY` request, packed: a cluster replica serves the reads of a
/// connection only after it.
const READONLY: &[u8] = b"*1\r\n$8\r\nREADONLY\r\n";
/// `INFO server`, packed: its `run_id` says which server a connection reached.
pub(crate) const INFO_SERVER: &[u8] = b"*2\r\n$4\r\nINFO\r\n$6\r\nserver\r\n";

/// The `run_id` in an `INFO server` reply: which server process answered
/// (a restart, or another server behind the same location, gives another).
pub(crate) fn run_id(info: &Reply) -> Option<String> {
    let text = match info {
        Reply::String(bytes) => std::str::from_utf8(bytes).ok()?,
        Reply::Status(text) => text,
        _ => return None,
    };
    text.lines()
        .find_map(|line| line.strip_prefix("run_id:"))
        .map(|id| id.trim().to_owned())
        .filter(|id| !id.is_empty())
}

/// What a `ROLE` asked before a command said, for the command's attempt.
#[derive(Debug, PartialEq)]
pub(crate) enum RoleCheck {
    /// Refused (an ACL user without `+role`, `ROLE` renamed away): the
    /// server is taken as a master for good; `first` the first time, for
    /// a warning.
    Refused { text: String, first: bool },
    /// The role it is given now (see [`Server::role_answered`]);
    /// `changed` from a role known before: a failover, the other
    /// servers' roles are stale too.
    Answered { role: Role, changed: bool },
    /// No role in the reply (another error, such as `LOADING`): left to
    /// the next connection.
    Unanswered,
}

impl Server {
    /// Step 2 of the preparation (see the module): `INFO server` and
    /// `READONLY`, each once per connection, each request bounded by
    /// `timeout` and by `deadline`. `READONLY`'s reply is not looked at
    /// (a replica that refuses it answers reads with `MOVED`); an error
    /// reply to `INFO` leaves the identity unknown (never matched). A
    /// failure drops the connection (counted) and fails the checkout.
    pub(super) fn prepare_connection(
        &self,
        mut conn: Connection,
        timeout: Option<Duration>,
        deadline: Option<Instant>,
    ) -> Result<Connection, Error> {
        let timeout = within(timeout, deadline);
        if self.policy.identify && conn.prepared().identity().is_none() {
            let identity = match self.prepared_by(&mut conn, INFO_SERVER, timeout)? {
                reply @ Reply::String(_) => run_id(&reply).unwrap_or_default(),
                _ => String::new(),
            };
            conn.prepared_mut().identified(identity.into());
        }
        if self.policy.readonly_replicas
            && self.role() == Role::Slave
            && !conn.prepared().readonly()
        {
            conn.prepared_mut().sent_readonly();
            self.prepared_by(&mut conn, READONLY, timeout)?;
        }
        Ok(conn)
    }

    /// One request of [`Server::prepare_connection`]: a failure, or bytes after the
    /// reply, drop the connection (counted) and fail the checkout.
    fn prepared_by(
        &self,
        conn: &mut Connection,
        packed: &[u8],
        timeout: Option<Duration>,
    ) -> Result<Reply, Error> {
        match conn.request(packed, timeout) {
            Ok(reply) if !conn.is_broken() => Ok(reply),
            Ok(_) => {
                let stray = ProtocolError::Malformed("bytes after a reply");
                Err(self.failed(Failure::Protocol(stray), false, timeout))
            }
            Err(failure) => Err(self.failed(failure, false, timeout)),
        }
    }

    /// Step 3 of the preparation (see the module): whether [`ROLE`] goes
    /// on the connection `prepared` records before the command, recorded
    /// there when it does. For `type=auto` servers, on every connection
    /// once (a reconnect may follow a failover), and on any connection
    /// while the role is unknown.
    pub(crate) fn takes_role(&self, prepared: &mut Prepared) -> bool {
        let takes = self.declared == Role::Auto
            && !self.role_refused.load(Ordering::Relaxed)
            && (!prepared.role_asked() || self.role() == Role::Auto);
        if takes {
            prepared.asked_role();
        }
        takes
    }

    /// Records what the server replied to the [`ROLE`] of
    /// [`Server::takes_role`], and says it.
    pub(crate) fn role_checked(&self, reply: Reply) -> RoleCheck {
        match reply {
            Reply::Error(text) if ServerError::of(&text).retry() == Retry::Refused => {
                let first = self.role_refused();
                RoleCheck::Refused { text, first }
            }
            reply => match role_from_reply(&reply) {
                Some(answered) => {
                    let before = self.role();
                    let role = self.role_answered(answered);
                    let changed = before != Role::Auto && before != role;
                    RoleCheck::Answered { role, changed }
                }
                None => RoleCheck::Unanswered,
            },
        }
    }

    /// Asks `ROLE` on a connection of its own and records the answer: the
    /// role check of `vcl_init`, the connect within `connect`, each
    /// request within `request`. Not counted in the database's counters,
    /// as in the C VMOD; a server that cannot be reached is marked sick
    /// (avoided while others can serve), and asked again by its first
    /// command.
    pub(crate) fn probe_role(
        &self,
        connect: Option<Duration>,
        request: Option<Duration>,
    ) -> Option<Role> {
        let probe_stats = Stats::default();
        let opened = (self.connector).connect_staged(&probe_stats, connect, request, None);
        let Ok(mut conn) = opened else {
            self.health.mark_failed();
            return None;
        };
        let reply = conn.request(ROLE, request).ok()?;
        Some(self.role_answered(role_from_reply(&reply)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(text: &str) -> Reply {
        Reply::Array(vec![Reply::String(text.as_bytes().to_vec())])
    }

    #[test]
    fn role_goes_on_each_connection_once_and_again_while_unknown() {
        let server = Server::for_test(0, "127.0.0.1:6379", Role::Auto);
        let mut first = Prepared::default();
        assert!(server.takes_role(&mut first), "a new connection");
        assert!(server.takes_role(&mut first), "the role still unknown");
        server.set_role(Role::Master);
        assert!(!server.takes_role(&mut first), "asked, and the role known");
        let mut second = Prepared::default();
        assert!(
            server.takes_role(&mut second),
            "a reconnect may follow a failover"
        );
        assert!(!server.takes_role(&mut second));
        server.forget_role();
        assert!(server.takes_role(&mut second), "the role forgotten");

        // A declared role is never asked.
        for declared in [Role::Master, Role::Slave] {
            let server = Server::for_test(1, "127.0.0.1:6380", declared);
            assert!(!server.takes_role(&mut Prepared::default()));
        }
    }

    #[test]
    fn what_role_said_is_recorded_in_the_server() {
        let server = Server::for_test(0, "127.0.0.1:6379", Role::Auto);
        let answered = |role, changed| RoleCheck::Answered { role, changed };
        // Learnt, not changed: it was unknown.
        assert_eq!(
            server.role_checked(status("master")),
            answered(Role::Master, false)
        );
        assert_eq!(
            server.role_checked(status("slave")),
            answered(Role::Slave, true)
        );
        assert_eq!(server.role(), Role::Slave);
        // LOADING: no role, left as it was.
        let loading = Reply::Error("LOADING Redis is loading the dataset in memory".into());
        assert_eq!(server.role_checked(loading), RoleCheck::Unanswered);
        assert_eq!(server.role(), Role::Slave);
        // Sentinel's replica stays one whatever it says of itself.
        server.set_role_by_sentinel(Role::Slave);
        assert_eq!(
            server.role_checked(status("master")),
            answered(Role::Slave, false)
        );

        // Refused: a master for good, said once, never asked again.
        let refused =
            || Reply::Error("NOPERM User u has no permissions to run the 'role' command".into());
        let server = Server::for_test(1, "127.0.0.1:6380", Role::Auto);
        assert!(matches!(
            server.role_checked(refused()),
            RoleCheck::Refused { first: true, .. }
        ));
        assert!(matches!(
            server.role_checked(refused()),
            RoleCheck::Refused { first: false, .. }
        ));
        assert_eq!(server.role(), Role::Master);
        assert!(!server.takes_role(&mut Prepared::default()));
    }
}
