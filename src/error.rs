//! Errors of command execution and set-up, as the VCL log shows them.
use crate::config::ConfigError;

/// Why a command (or a database) failed. The text goes to VSL after
/// `[REDIS] db <name>`, so it names the server and what happened.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Config(#[from] ConfigError),
    #[error("{feature} is not supported yet")]
    Unsupported { feature: &'static str },
    #[error("cannot connect to {server}: {detail}")]
    Connect { server: String, detail: String },
    #[error("not connecting to {server} for {retry_in_ms} ms more: the last attempt failed")]
    Backoff { server: String, retry_in_ms: u128 },
    #[error("no connection to {server} within {waited_ms} ms (pool of {pool_size}): {detail}")]
    PoolTimeout {
        server: String,
        waited_ms: u128,
        pool_size: u32,
        detail: String,
    },
    #[error("I/O error on {server}: {source}")]
    Io {
        server: String,
        source: crate::connection::Failure,
    },
    #[error("timeout after {timeout_ms} ms waiting for {server}")]
    Timeout { server: String, timeout_ms: u128 },
    #[error("no {role} server available")]
    NoServer { role: &'static str },
    #[error("no command to execute: call .command() first")]
    NoCommand,
    #[error("command of {size} bytes is larger than the {limit} bytes limit")]
    CommandTooLarge { size: usize, limit: usize },
    #[error("refused, not sent: {reason}")]
    Refused { reason: &'static str },
    #[error("more than {max} cluster redirections (max_cluster_hops); the last: {last}")]
    TooManyRedirections { max: u32, last: String },
    #[error("not sent: {0}")]
    Lost(crate::session::Lost),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
