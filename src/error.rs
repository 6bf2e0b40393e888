//! Errors of command execution and set-up, as the VCL log shows them.
use crate::config::ConfigError;
use crate::connection::{ConnectError, Failure, PoolError, PoolTimeout};

/// Why a command (or a database) failed. The text goes to VSL after
/// `[REDIS] db <name>`, so it names the server and what happened.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Config(#[from] ConfigError),
    #[error("{0}")]
    Connect(#[from] ConnectError),
    #[error("not connecting to {server} for {retry_in_ms} ms more: the last attempt failed")]
    Backoff { server: String, retry_in_ms: u128 },
    #[error("{0}")]
    PoolTimeout(#[from] PoolTimeout),
    #[error("I/O error on {server}: {source}")]
    Io { server: String, source: Failure },
    /// The command's own request got a reply that broke the protocol
    /// (malformed, or out of step on a pipelined connection): the server
    /// answered, so it ran the command, which is not retried.
    #[error("I/O error on {server}: {source}")]
    Unsettled { server: String, source: Failure },
    #[error("timeout after {timeout_ms} ms waiting for {server}")]
    Timeout { server: String, timeout_ms: u128 },
    #[error(
        "timeout after {held_ms} ms held, not sent: Sentinel is failing over the master {master}"
    )]
    FailoverHeld { master: String, held_ms: u128 },
    #[error(
        "not sent: Sentinel fails over (or has replaced) the master {master} this task's \
         MULTI / WATCH (or connection state) is on; that connection is closed, and what was \
         queued or set on it dropped"
    )]
    FailedOverUnderTask { master: String },
    #[error("no {role} server available")]
    NoServer { role: &'static str },
    #[error("command of {size} bytes is larger than the {limit} bytes limit")]
    CommandTooLarge { size: usize, limit: usize },
    #[error("refused, not sent: {reason}")]
    Refused { reason: &'static str },
    #[error("more than {max} cluster redirections (max_cluster_hops); the last: {last}")]
    TooManyRedirections { max: u32, last: String },
    #[error(
        "no cluster slot map until the next discovery (at most one a second); the last failed: {last}"
    )]
    NoSlotMap { last: std::sync::Arc<str> },
    #[error("no cluster slot map: gave up after {waited_ms} ms waiting for the discovery another worker runs")]
    DiscoveryWait { waited_ms: u128 },
    #[error("MULTI, held back until this command chose the node, refused by {server}: {reply}; the transaction is lost")]
    MultiRefused { server: String, reply: String },
    #[error("not sent: {0}")]
    Lost(crate::session::Lost),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A shared pool's refresh gives an [`Error`] already.
impl From<PoolError<Error>> for Error {
    fn from(err: PoolError<Error>) -> Self {
        match err {
            PoolError::Timeout(timeout) => timeout.into(),
            PoolError::Checkout(err) => err,
        }
    }
}

/// What a server's error reply means for the command that got it, read
/// once from the reply's first word (`MOVED 3999 127.0.0.1:6381`,
/// `NOSCRIPT No matching script`...). The retry decision
/// (`src/database/verdict.rs`) goes by it and its
/// [`retry`](ServerError::retry) rule, never by the text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ServerError {
    /// Cluster: the slot lives on another node now.
    Moved,
    /// Cluster: this key is being migrated; ask the other node once.
    Ask,
    /// Cluster: a multi-key command while its slot is being migrated.
    TryAgain,
    /// Cluster: the cluster does not serve (slots uncovered, no quorum).
    ClusterDown,
    /// A write to a replica (a demoted master).
    ReadOnly,
    /// A replica cut from its master refuses reads.
    MasterDown,
    /// `EVALSHA` of a script the server does not have.
    NoScript,
    /// The server is loading its dataset and runs nothing yet.
    Loading,
    /// A script or function runs and holds the server.
    Busy,
    /// The user may not run the command (ACL).
    NoPerm,
    /// The server has no such command (older server, renamed away).
    UnknownCommand,
    /// Anything else (`ERR`, `WRONGTYPE`, `EXECABORT`...): the command's
    /// answer.
    Other,
}

/// What the loop that runs a command does after an error reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Retry {
    /// The reply is the command's answer.
    Never,
    /// The command was not run: another attempt may serve it, within the
    /// retry count (cluster: the same node, as the slot did not move;
    /// standalone: the next server of the plan).
    Again,
    /// Cluster: to the node the reply names (`MOVED`, `ASK`), within
    /// `max_cluster_hops`.
    Redirect,
    /// The reply is the answer, and the server's role is not what routing
    /// thought (a failover): roles are asked again for the next commands.
    RolesChanged,
    /// `EVALSHA` failed for want of the script: sent again as `EVAL`.
    AsScript,
    /// The server will never run it for this user: not asked again
    /// (`ROLE` from an ACL user without `+role`).
    Refused,
}

impl ServerError {
    /// The kind of `text`, an error reply's text.
    pub(crate) fn of(text: &str) -> ServerError {
        let word = text.split_once(' ').map_or(text, |(word, _)| word);
        match word {
            "MOVED" => ServerError::Moved,
            "ASK" => ServerError::Ask,
            "TRYAGAIN" => ServerError::TryAgain,
            "CLUSTERDOWN" => ServerError::ClusterDown,
            "READONLY" => ServerError::ReadOnly,
            "MASTERDOWN" => ServerError::MasterDown,
            "NOSCRIPT" => ServerError::NoScript,
            "LOADING" => ServerError::Loading,
            "BUSY" => ServerError::Busy,
            "NOPERM" => ServerError::NoPerm,
            "ERR" if text.starts_with("ERR unknown command") => ServerError::UnknownCommand,
            _ => ServerError::Other,
        }
    }

    /// The kind of `reply` if it is an error reply: one match, nothing
    /// read, for any other reply. (Execution reads the text too: see
    /// `database/verdict.rs`.)
    #[cfg(test)]
    pub(crate) fn of_reply(reply: &crate::protocol::Reply) -> Option<ServerError> {
        match reply {
            crate::protocol::Reply::Error(text) => Some(ServerError::of(text)),
            _ => None,
        }
    }

    pub(crate) fn retry(self) -> Retry {
        match self {
            ServerError::Moved | ServerError::Ask => Retry::Redirect,
            ServerError::TryAgain | ServerError::ClusterDown | ServerError::Loading => Retry::Again,
            ServerError::ReadOnly | ServerError::MasterDown => Retry::RolesChanged,
            ServerError::NoScript => Retry::AsScript,
            ServerError::NoPerm | ServerError::UnknownCommand => Retry::Refused,
            ServerError::Busy | ServerError::Other => Retry::Never,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::Reply;

    #[test]
    fn error_replies_are_read_by_their_first_word() {
        let cases = [
            (
                "MOVED 3999 127.0.0.1:6381",
                ServerError::Moved,
                Retry::Redirect,
            ),
            ("ASK 3999 127.0.0.1:6381", ServerError::Ask, Retry::Redirect),
            (
                "TRYAGAIN Multiple keys request during rehashing of slot",
                ServerError::TryAgain,
                Retry::Again,
            ),
            (
                "CLUSTERDOWN The cluster is down",
                ServerError::ClusterDown,
                Retry::Again,
            ),
            (
                "LOADING Redis is loading the dataset in memory",
                ServerError::Loading,
                Retry::Again,
            ),
            (
                "READONLY You can't write against a read only replica.",
                ServerError::ReadOnly,
                Retry::RolesChanged,
            ),
            (
                "MASTERDOWN Link with MASTER is down",
                ServerError::MasterDown,
                Retry::RolesChanged,
            ),
            (
                "NOSCRIPT No matching script. Please use EVAL.",
                ServerError::NoScript,
                Retry::AsScript,
            ),
            (
                "BUSY Redis is busy running a script.",
                ServerError::Busy,
                Retry::Never,
            ),
            (
                "NOPERM User u has no permissions to run the 'role' command",
                ServerError::NoPerm,
                Retry::Refused,
            ),
            (
                "ERR unknown command 'ROLE', with args beginning with: ",
                ServerError::UnknownCommand,
                Retry::Refused,
            ),
            ("ERR syntax error", ServerError::Other, Retry::Never),
            (
                "WRONGTYPE Operation against a key holding the wrong kind of value",
                ServerError::Other,
                Retry::Never,
            ),
            ("", ServerError::Other, Retry::Never),
        ];
        for (text, kind, retry) in cases {
            assert_eq!(ServerError::of(text), kind, "{text}");
            assert_eq!(kind.retry(), retry, "{text}");
        }
    }

    #[test]
    fn a_word_is_matched_whole_and_in_its_case() {
        for text in [
            "MOVEDX 1 127.0.0.1:1",
            "moved 1 127.0.0.1:1",
            "ASKING",
            "NOSCRIPTS",
            "BUSYKEY Target key name already exists.",
            "ERR unknown subcommand 'X'",
        ] {
            assert_eq!(ServerError::of(text), ServerError::Other, "{text}");
        }
        assert_eq!(ServerError::of("MOVED"), ServerError::Moved);
    }

    #[test]
    fn only_error_replies_have_a_kind() {
        assert_eq!(ServerError::of_reply(&Reply::Status("MOVED".into())), None);
        assert_eq!(ServerError::of_reply(&Reply::Nil), None);
        assert_eq!(
            ServerError::of_reply(&Reply::Error("NOSCRIPT x".into())),
            Some(ServerError::NoScript)
        );
    }
}
