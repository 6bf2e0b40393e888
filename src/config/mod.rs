//! Parsing and validation of the arguments of `redis.db()`,
//! `redis.subnets()`, `redis.weights()` and `redis.sentinels()`.
//!
//! Everything here runs in `vcl_init`, where a bad value must fail
//! `vcl.load` with a message that names the argument and the value, instead
//! of leaving a half-configured object behind. The libvmod-redis this crate
//! replaces accepts almost anything silently (a port of 0, a malformed
//! subnet list); we reject such input up front.

mod location;
mod sentinel;
mod subnets;
mod weights;

pub use crate::tls::TlsArgs;
pub(crate) use location::redact_credentials;
pub use location::{Location, LocationError};
pub use sentinel::{SentinelArgs, SentinelConfig};
pub use subnets::Subnets;
pub use weights::{Preference, Weights};

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// Why a configuration value was refused. Messages are meant for the
/// operator reading `vcl.load` output: they name the argument and the value
/// (never the password).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// A location string could not be parsed.
    #[error("invalid location \"{value}\": {reason}")]
    InvalidLocation {
        /// The text as given, user info redacted ([`redact_credentials`]).
        value: String,
        /// What is wrong with it.
        reason: LocationError,
    },
    /// An ENUM argument had a value that vmod.vcc does not declare.
    #[error("invalid {arg} \"{value}\" (expected one of: {expected})")]
    InvalidEnum {
        /// Argument name, e.g. `type`.
        arg: &'static str,
        /// The text as given.
        value: String,
        /// The accepted values, comma separated.
        expected: &'static str,
    },
    /// A count, timeout or TTL was below zero.
    #[error("{arg} must not be negative (got {value})")]
    Negative {
        /// Argument name.
        arg: &'static str,
        /// The value as given.
        value: i64,
    },
    /// A count does not fit the type the VMOD keeps it in.
    #[error("{arg} is too large (got {value}, at most {max})")]
    TooLarge {
        /// Argument name.
        arg: &'static str,
        /// The value as given.
        value: i64,
        /// The largest accepted value.
        max: u64,
    },
    /// `max_connections` below 1 would leave no way to run a command.
    #[error("max_connections must be at least 1 (got {value})")]
    MaxConnections {
        /// The value as given.
        value: i64,
    },
    /// Unusable TLS material (the message names the argument and file).
    #[error(transparent)]
    Tls(#[from] crate::tls::TlsError),
    /// TLS asked for a UNIX socket location.
    #[error("tls=true needs a host:port location, not the UNIX socket \"{location}\"")]
    TlsOverUnix { location: String },
    /// [ext] `pipelining=true` multiplexes the shared pool's connections;
    /// private connections have nothing to share.
    #[error("pipelining=true needs shared_connections=true")]
    PipeliningWithoutSharing,
    /// A UNIX socket given as a cluster seed: cluster nodes name each
    /// other by host and port, as the C VMOD requires.
    #[error("type=cluster needs host:port locations, not the UNIX socket \"{location}\"")]
    ClusterOverUnix { location: String },
    /// `cluster` mixed with another type in one database.
    #[error("type={role} in a database created with type={db_role}: a database created with type=cluster takes cluster seeds only (type=cluster), and type=cluster needs redis.db(type=cluster)")]
    ClusterMixed {
        /// The type given to `add_server()`.
        role: Role,
        /// The type given to `redis.db()`.
        db_role: Role,
    },
    /// One entry of a `redis.subnets()` list is malformed.
    #[error("invalid subnets entry \"{entry}\": {reason} (expected \"<weight> <ipv4>/<prefix>\", e.g. \"0 192.168.1.0/24\")")]
    InvalidSubnet {
        /// The entry as given (trimmed).
        entry: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// One rule of a `redis.weights()` list is malformed.
    #[error("invalid weights rule \"{rule}\": {reason} (expected \"<weight 0-3> <regular expression>\", e.g. \"0 ^192\\.168\\.1\\.102:\")")]
    InvalidWeights {
        /// The rule as given (trimmed).
        rule: String,
        /// What is wrong with it.
        reason: String,
    },
}

/// `as_str`, `Display` and `FromStr` for a Rust enum mirroring a VCL ENUM.
/// Parsing takes the exact ENUM strings only: varnishd never passes
/// anything else, so any other text means a bug in the glue, which we want
/// to see.
macro_rules! vcl_enum {
    ($name:ident, $arg:literal, $expected:literal, { $($variant:ident => $text:literal,)* }) => {
        impl $name {
            /// The VCL ENUM spelling, also used in stats and logs.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)*
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl FromStr for $name {
            type Err = ConfigError;

            fn from_str(text: &str) -> Result<$name, ConfigError> {
                match text {
                    $($text => Ok($name::$variant),)*
                    _ => Err(ConfigError::InvalidEnum {
                        arg: $arg,
                        value: text.to_owned(),
                        expected: $expected,
                    }),
                }
            }
        }
    };
}

/// Role of a server, from the VCL ENUM `{master, slave, auto, cluster}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    /// Accepts writes.
    Master,
    /// A replica: only serves `execute(master=false)`.
    Slave,
    /// Not known yet: the VMOD asks the server (`ROLE`).
    Auto,
    /// A Redis Cluster node.
    Cluster,
}

vcl_enum!(Role, "type", "master, slave, auto, cluster", {
    Master => "master",
    Slave => "slave",
    Auto => "auto",
    Cluster => "cluster",
});

/// RESP version to ask for on connect, from the VCL ENUM
/// `{RESP2, RESP3, default}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Protocol {
    /// Send `HELLO 2`.
    Resp2,
    /// Send `HELLO 3`.
    Resp3,
    /// Send no `HELLO`: keep what the server speaks by default.
    Default,
}

vcl_enum!(Protocol, "protocol", "RESP2, RESP3, default", {
    Resp2 => "RESP2",
    Resp3 => "RESP3",
    Default => "default",
});

/// The VCL arguments of `redis.db()` as varnishd passes them (NULL strings
/// already mapped to ""). Kept as raw VCL values (timeouts in ms, TTLs in s,
/// ENUMs as their strings) so the FFI layer stays a plain copy and every
/// check lives in [`DbConfig::from_args`].
#[derive(Clone, Copy, Debug)]
pub struct DbArgs<'a> {
    pub location: &'a str,
    pub role: &'a str,
    pub connection_timeout: i64,
    pub connection_ttl: i64,
    pub command_timeout: i64,
    pub max_command_retries: i64,
    pub shared_connections: bool,
    pub max_connections: i64,
    pub protocol: &'a str,
    pub tls: TlsArgs<'a>,
    pub user: &'a str,
    pub password: Secret<&'a str>,
    pub sickness_ttl: i64,
    pub ignore_slaves: bool,
    pub max_cluster_hops: i64,
    pub debug: bool,
    pub pipelining: bool,
    /// [ext] Bytes of near cache (0: none).
    pub near_cache: i64,
    /// [ext] Seconds a near-cache entry is served at most (0: no bound).
    pub near_cache_ttl: i64,
}

impl Default for DbArgs<'_> {
    /// The defaults that vmod.vcc declares, so tests and callers only spell
    /// out what differs.
    fn default() -> Self {
        DbArgs {
            location: "",
            role: "auto",
            connection_timeout: 1000,
            connection_ttl: 0,
            command_timeout: 0,
            max_command_retries: 0,
            shared_connections: true,
            max_connections: 128,
            protocol: "default",
            tls: TlsArgs::default(),
            user: "",
            password: Secret(""),
            sickness_ttl: 60,
            ignore_slaves: false,
            max_cluster_hops: 32,
            debug: false,
            pipelining: false,
            near_cache: 0,
            near_cache_ttl: 0,
        }
    }
}

/// A password. Debug shows `<redacted>` instead (or `""` when there is
/// none), so a configuration dumped to a log never leaks it.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
pub struct Secret<T>(pub T);

impl<T: AsRef<str>> fmt::Debug for Secret<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.as_ref().is_empty() {
            f.write_str("\"\"")
        } else {
            f.write_str("<redacted>")
        }
    }
}

impl<T: AsRef<str>> std::ops::Deref for Secret<T> {
    type Target = str;
    fn deref(&self) -> &str {
        self.0.as_ref()
    }
}

/// The validated configuration of one database object.
#[derive(Clone, Debug)]
pub struct DbConfig {
    /// The first server; `None` when `location` is empty (servers come
    /// from `.add_server()`).
    pub location: Option<Location>,
    pub role: Role,
    /// `None`: no timeout (VCL 0).
    pub connection_timeout: Option<Duration>,
    /// `None`: connections live forever (VCL 0).
    pub connection_ttl: Option<Duration>,
    /// `None`: no timeout (VCL 0).
    pub command_timeout: Option<Duration>,
    pub max_command_retries: u32,
    pub shared_connections: bool,
    /// At least 1; shared: at most [`MAX_SHARED_POOL`].
    pub max_connections: u32,
    pub protocol: Protocol,
    /// `tls=true`: the checked TLS settings.
    pub tls: Option<crate::tls::Tls>,
    /// ACL user; `Some` only with a password.
    pub user: Option<String>,
    pub password: Option<Secret<String>>,
    /// Zero: a failing server is never marked sick.
    pub sickness_ttl: Duration,
    pub ignore_slaves: bool,
    /// At least 1: a VCL 0 ("no limit") is [`UNLIMITED_CLUSTER_HOPS`].
    pub max_cluster_hops: u32,
    pub debug: bool,
    pub pipelining: bool,
    /// [ext] Bytes of near cache; 0: none.
    pub near_cache: usize,
    /// [ext] `None`: entries are served until invalidated or evicted.
    pub near_cache_ttl: Option<Duration>,
    /// The values above that are not what the VCL gave, for the log.
    pub adjusted: Vec<Adjusted>,
}

/// Redirections one command follows when `max_cluster_hops` is 0 ("no
/// limit"): a cluster whose nodes disagree for good must not hold a worker
/// forever.
pub(crate) const UNLIMITED_CLUSTER_HOPS: u32 = 1024;

/// A value of `redis.db()` not used as given (the C VMOD takes it as
/// given), said once at `vcl_init`: what was given, what is used and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Adjusted {
    pub arg: &'static str,
    pub given: i64,
    pub used: u32,
    pub why: &'static str,
}

impl fmt::Display for Adjusted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Adjusted {
            arg,
            given,
            used,
            why,
        } = self;
        write!(f, "{arg}={given} is used as {arg}={used}: {why}")
    }
}

/// A non-negative count that fits in u32.
fn count(arg: &'static str, value: i64) -> Result<u32, ConfigError> {
    if value < 0 {
        return Err(ConfigError::Negative { arg, value });
    }
    u32::try_from(value).map_err(|_| ConfigError::TooLarge {
        arg,
        value,
        max: u64::from(u32::MAX),
    })
}

/// A non-negative amount of time; `unit` turns the VCL integer into a
/// Duration.
fn duration(
    arg: &'static str,
    value: i64,
    unit: fn(u64) -> Duration,
) -> Result<Duration, ConfigError> {
    u64::try_from(value)
        .map(unit)
        .map_err(|_| ConfigError::Negative { arg, value })
}

/// Like [`duration`], with 0 meaning "none", as every VCL timeout and TTL.
fn optional(
    arg: &'static str,
    value: i64,
    unit: fn(u64) -> Duration,
) -> Result<Option<Duration>, ConfigError> {
    duration(arg, value, unit).map(|d| (!d.is_zero()).then_some(d))
}

/// Most connections a shared pool holds, whatever `max_connections` says:
/// a connection in use is held by a worker thread, of which varnishd runs
/// thread_pools x thread_pool_max (2 x 5000 by default).
pub const MAX_SHARED_POOL: u32 = 10_000;

/// `max_connections` as used: a shared pool's capped at
/// [`MAX_SHARED_POOL`], said in `adjusted`.
fn max_connections(args: &DbArgs, adjusted: &mut Vec<Adjusted>) -> Result<u32, ConfigError> {
    if args.max_connections < 1 {
        return Err(ConfigError::MaxConnections {
            value: args.max_connections,
        });
    }
    let given = count("max_connections", args.max_connections)?;
    if !args.shared_connections || given <= MAX_SHARED_POOL {
        return Ok(given);
    }
    adjusted.push(Adjusted {
        arg: "max_connections",
        given: args.max_connections,
        used: MAX_SHARED_POOL,
        why: "a shared pool holds at most that many (as many as the worker threads \
              varnishd runs by default: thread_pools x thread_pool_max = 2 x 5000)",
    });
    Ok(MAX_SHARED_POOL)
}

/// `max_cluster_hops` as used: 0 ("no limit") is bounded, said in
/// `adjusted` where redirections are followed (type=cluster).
fn max_cluster_hops(
    args: &DbArgs,
    role: Role,
    adjusted: &mut Vec<Adjusted>,
) -> Result<u32, ConfigError> {
    let given = count("max_cluster_hops", args.max_cluster_hops)?;
    if given != 0 {
        return Ok(given);
    }
    if role == Role::Cluster {
        adjusted.push(Adjusted {
            arg: "max_cluster_hops",
            given: 0,
            used: UNLIMITED_CLUSTER_HOPS,
            why: "0 (no limit) is bounded, so that nodes that redirect to each other \
                  for good cannot hold a worker forever",
        });
    }
    Ok(UNLIMITED_CLUSTER_HOPS)
}

impl DbConfig {
    /// Validates the constructor arguments, checking them in the order
    /// vmod.vcc declares them so the first error reported is the first bad
    /// argument in the VCL.
    pub fn from_args(args: &DbArgs) -> Result<DbConfig, ConfigError> {
        // As in the C VMOD, servers may all come from `.add_server()`.
        let location: Option<Location> = if args.location.trim().is_empty() {
            None
        } else {
            Some(args.location.parse()?)
        };
        let role: Role = args.role.parse()?;
        if let (Role::Cluster, Some(Location::Unix(path))) = (role, &location) {
            return Err(ConfigError::ClusterOverUnix {
                location: path.display().to_string(),
            });
        }
        let connection_timeout = optional(
            "connection_timeout",
            args.connection_timeout,
            Duration::from_millis,
        )?;
        let connection_ttl = optional("connection_ttl", args.connection_ttl, Duration::from_secs)?;
        let command_timeout = optional(
            "command_timeout",
            args.command_timeout,
            Duration::from_millis,
        )?;
        let max_command_retries = count("max_command_retries", args.max_command_retries)?;
        let mut adjusted = Vec::new();
        let max_connections = max_connections(args, &mut adjusted)?;
        let protocol: Protocol = args.protocol.parse()?;
        if args.tls.enabled {
            if let Some(Location::Unix(path)) = &location {
                return Err(ConfigError::TlsOverUnix {
                    location: path.display().to_string(),
                });
            }
        }
        let tls = crate::tls::Tls::from_args(&args.tls)?;
        // As the C VMOD: no password, no AUTH, and so no user either
        // (commands then get the server's NOAUTH error reply if it wants one).
        let password = (!args.password.is_empty()).then(|| Secret(args.password.0.to_owned()));
        let user = (!args.user.is_empty() && password.is_some()).then(|| args.user.to_owned());
        let sickness_ttl = duration("sickness_ttl", args.sickness_ttl, Duration::from_secs)?;
        let max_cluster_hops = max_cluster_hops(args, role, &mut adjusted)?;
        if args.pipelining && !args.shared_connections {
            return Err(ConfigError::PipeliningWithoutSharing);
        }
        if args.near_cache < 0 {
            return Err(ConfigError::Negative {
                arg: "near_cache",
                value: args.near_cache,
            });
        }
        let near_cache = usize::try_from(args.near_cache).unwrap_or(usize::MAX);
        let near_cache_ttl = optional("near_cache_ttl", args.near_cache_ttl, Duration::from_secs)?;
        Ok(DbConfig {
            location,
            role,
            connection_timeout,
            connection_ttl,
            command_timeout,
            max_command_retries,
            shared_connections: args.shared_connections,
            max_connections,
            protocol,
            tls,
            user,
            password,
            sickness_ttl,
            ignore_slaves: args.ignore_slaves,
            max_cluster_hops,
            debug: args.debug,
            pipelining: args.pipelining,
            near_cache,
            near_cache_ttl,
            adjusted,
        })
    }
}

#[cfg(test)]
mod tests;

/// Property tests of what `vcl_init` hands us from the VCL: locations,
/// subnet lists and the whole `redis.db()` argument set.
///
/// Runtime: about 3 s of CPU in a debug build (`cargo test --lib
/// config::proptests`). Found no bug.
#[cfg(test)]
mod proptests;
