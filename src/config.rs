//! Parsing and validation of the arguments of `redis.db()` and
//! `redis.subnets()`.
//!
//! Everything here runs in `vcl_init`, where a bad value must fail
//! `vcl.load` with a message that names the argument and the value, instead
//! of leaving a half-configured object behind. The libvmod-redis this crate
//! replaces accepts almost anything silently (a port of 0, a malformed
//! subnet list); we reject such input up front.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;
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
    /// A feature that this VMOD declares but does not implement yet.
    #[error("{what} is not supported yet")]
    NotSupported {
        /// The feature as the operator wrote it, e.g. `type=cluster`.
        what: &'static str,
    },
    /// One entry of a `redis.subnets()` list is malformed.
    #[error("invalid subnets entry \"{entry}\": {reason} (expected \"<weight> <ipv4>/<prefix>\", e.g. \"0 192.168.1.0/24\")")]
    InvalidSubnet {
        /// The entry as given (trimmed).
        entry: String,
        /// What is wrong with it.
        reason: &'static str,
    },
}

/// What is wrong with a location; kept apart from [`ConfigError`] so callers
/// and tests can match on the cause.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum LocationError {
    /// Nothing (or only blanks) was given.
    #[error("empty")]
    Empty,
    /// `host` without `:port`.
    #[error("missing port (expected host:port, [ipv6]:port or an absolute UNIX socket path)")]
    MissingPort,
    /// The port is not a number in 1..=65535.
    #[error("port must be a number from 1 to 65535")]
    InvalidPort,
    /// `:port` without a host.
    #[error("missing host")]
    MissingHost,
    /// The host is neither an IPv4 address nor a plausible DNS name.
    #[error("invalid host name or address")]
    InvalidHost,
    /// `[` without `]` or the other way around, or text between `]` and `:`.
    #[error("unbalanced or misplaced brackets")]
    UnbalancedBrackets,
    /// The text between brackets is not an IPv6 address.
    #[error("invalid IPv6 address between brackets")]
    InvalidIpv6,
    /// An IPv6 address must be bracketed, or its port would be ambiguous.
    #[error("IPv6 addresses must be written in brackets, e.g. [::1]:6379")]
    BareIpv6,
    /// A UNIX socket path that does not start with `/`: varnishd's working
    /// directory is not something an operator should depend on.
    #[error("UNIX socket paths must be absolute (start with /)")]
    RelativePath,
    /// A URL such as `redis://host:6379`: only the address is wanted here.
    #[error("write host:port, not a URL")]
    Url,
    /// `user:password@host:port`: credentials have arguments of their own.
    #[error("credentials go in user and password, not in the location")]
    UserInfo,
}

/// Where a Redis server listens.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Location {
    /// TCP: an IPv4 or IPv6 address (kept without brackets) or a DNS name.
    Tcp {
        /// Address or name, IPv6 without brackets.
        host: String,
        /// 1..=65535.
        port: u16,
    },
    /// A UNIX socket, always an absolute path.
    Unix(PathBuf),
}

impl Location {
    /// The IP address of a TCP location written as a literal address; `None`
    /// for DNS names and UNIX sockets (callers resolve names themselves).
    pub fn ip(&self) -> Option<IpAddr> {
        match self {
            Location::Tcp { host, .. } => host.parse().ok(),
            Location::Unix(_) => None,
        }
    }
}

/// Checks a host that is not bracketed: an IPv4 literal, or a DNS name made
/// of letters, digits, `-`, `_` and `.`. All-numeric names must be valid
/// IPv4, so a typo like `256.1.1.1` or `10.0.0` is caught at load time
/// rather than sent to the resolver.
fn valid_host(host: &str) -> bool {
    if host.parse::<Ipv4Addr>().is_ok() {
        return true;
    }
    if host.len() > 253 || host.starts_with('.') || host.contains("..") {
        return false;
    }
    let name_chars = host
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    let all_numeric = host.bytes().all(|b| b.is_ascii_digit() || b == b'.');
    name_chars && !all_numeric
}

/// Parses a port; only plain decimal digits (no sign, no blanks).
fn parse_port(text: &str) -> Result<u16, LocationError> {
    if text.is_empty() {
        return Err(LocationError::MissingPort);
    }
    if !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(LocationError::InvalidPort);
    }
    match text.parse::<u16>() {
        Ok(0) | Err(_) => Err(LocationError::InvalidPort),
        Ok(port) => Ok(port),
    }
}

/// `text` with the user info of anything written like a URL or
/// `user:password@host` replaced by `***`, for messages that echo what the
/// operator wrote (`redis://:s3cret@host/0` becomes `redis://***@host/0`).
/// Locations never hold credentials, so a value with `@` in it is refused
/// anyway; only its host part is worth showing.
pub(crate) fn redact_credentials(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    // Each `@` ends user info that starts after the last separator (or
    // `://`) before it.
    while let Some(at) = rest.find('@') {
        let before = &rest[..at];
        let start = [
            before.rfind("://").map(|i| i + 3),
            before
                .char_indices()
                .rfind(|(_, c)| c.is_whitespace() || matches!(c, ',' | ';' | '"' | '\'' | '('))
                .map(|(i, c)| i + c.len_utf8()),
        ]
        .into_iter()
        .flatten()
        .max()
        .unwrap_or(0);
        out.push_str(&before[..start]);
        out.push_str("***@");
        rest = &rest[at + 1..];
    }
    out.push_str(rest);
    out
}

fn parse_location(text: &str) -> Result<Location, LocationError> {
    if text.is_empty() {
        return Err(LocationError::Empty);
    }
    if text.starts_with('/') {
        return Ok(Location::Unix(PathBuf::from(text)));
    }
    if text.contains("://") {
        return Err(LocationError::Url);
    }
    if text.contains('@') {
        return Err(LocationError::UserInfo);
    }
    if let Some(rest) = text.strip_prefix('[') {
        let (addr, after) = rest
            .split_once(']')
            .ok_or(LocationError::UnbalancedBrackets)?;
        if addr.contains('[') || after.contains('[') || after.contains(']') {
            return Err(LocationError::UnbalancedBrackets);
        }
        let ip: Ipv6Addr = addr.parse().map_err(|_| LocationError::InvalidIpv6)?;
        let port = match after.strip_prefix(':') {
            Some(port) => parse_port(port)?,
            None if after.is_empty() => return Err(LocationError::MissingPort),
            None => return Err(LocationError::UnbalancedBrackets),
        };
        return Ok(Location::Tcp {
            host: ip.to_string(),
            port,
        });
    }
    if text.contains('[') || text.contains(']') {
        return Err(LocationError::UnbalancedBrackets);
    }
    let Some((host, port)) = text.rsplit_once(':') else {
        // `redis.sock` or `./run/redis.sock` is most likely a socket path.
        if text.contains('/') || text.ends_with(".sock") {
            return Err(LocationError::RelativePath);
        }
        return Err(LocationError::MissingPort);
    };
    if host.contains(':') {
        return Err(LocationError::BareIpv6);
    }
    if host.contains('/') {
        return Err(LocationError::RelativePath);
    }
    if host.is_empty() {
        return Err(LocationError::MissingHost);
    }
    if !valid_host(host) {
        return Err(LocationError::InvalidHost);
    }
    let port = parse_port(port)?;
    Ok(Location::Tcp {
        host: host.to_ascii_lowercase(),
        port,
    })
}

impl FromStr for Location {
    type Err = ConfigError;

    /// Accepts `host:port` (IPv4 or DNS name), `[ipv6]:port` and absolute
    /// UNIX socket paths. Surrounding blanks are ignored, as they can only
    /// be a typo in VCL. DNS names are lowercased so that the same server
    /// written twice compares equal.
    fn from_str(text: &str) -> Result<Location, ConfigError> {
        parse_location(text.trim()).map_err(|reason| ConfigError::InvalidLocation {
            value: redact_credentials(text),
            reason,
        })
    }
}

impl fmt::Display for Location {
    /// Canonical text for logs and stats labels: `host:port`, `[ipv6]:port`
    /// (brackets kept, so the text parses back) or the socket path.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Location::Tcp { host, port } if host.contains(':') => write!(f, "[{host}]:{port}"),
            Location::Tcp { host, port } => write!(f, "{host}:{port}"),
            Location::Unix(path) => write!(f, "{}", path.display()),
        }
    }
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

/// One `weight ipv4/prefix` pair of a subnets list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Subnet {
    weight: u32,
    network: u32,
    mask: u32,
}

/// Preference of servers by address, from `redis.subnets()`: the lower the
/// weight, the more a server is preferred when several can serve a command.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Subnets {
    entries: Vec<Subnet>,
}

impl Subnets {
    /// The weight of a UNIX socket: always the best, it is on this host.
    pub const BEST: u32 = 0;
    /// The weight of a server that no mask matches, or whose address is not
    /// known (DNS name, IPv6): after every matched one.
    pub const WORST: u32 = u32::MAX;

    /// Parses a comma-separated list such as
    /// `"0 192.168.1.102/32, 1 192.168.1.103/32, 2 0.0.0.0/32"`. A blank
    /// text gives an empty list (every TCP server then gets [`Self::WORST`]);
    /// the `VMOD_REDIS_SUBNETS` fallback is the caller's business. Host bits
    /// below the prefix are ignored (`10.1.2.3/8` means `10.0.0.0/8`), as in
    /// the usual CIDR readers. Weights are `0..=u32::MAX - 1` so a matched
    /// server always ranks before an unmatched one.
    pub fn parse(text: &str) -> Result<Subnets, ConfigError> {
        let mut entries = Vec::new();
        if text.trim().is_empty() {
            return Ok(Subnets { entries });
        }
        for raw in text.split(',') {
            let entry = raw.trim();
            let bad = |reason| ConfigError::InvalidSubnet {
                entry: entry.to_owned(),
                reason,
            };
            if entry.is_empty() {
                return Err(bad("empty entry"));
            }
            let mut words = entry.split_whitespace();
            let (Some(weight), Some(cidr), None) = (words.next(), words.next(), words.next())
            else {
                return Err(bad("expected a weight and a mask separated by blanks"));
            };
            if !weight.bytes().all(|b| b.is_ascii_digit()) {
                return Err(bad("weight must be a non-negative integer"));
            }
            let weight = match weight.parse::<u32>() {
                Ok(w) if w < Self::WORST => w,
                _ => return Err(bad("weight is too large")),
            };
            let Some((addr, prefix)) = cidr.split_once('/') else {
                return Err(bad("mask needs a /prefix length"));
            };
            let addr: Ipv4Addr = match addr.parse() {
                Ok(a) => a,
                Err(_) if addr.parse::<Ipv6Addr>().is_ok() => {
                    return Err(bad("only IPv4 masks are supported"))
                }
                Err(_) => return Err(bad("invalid IPv4 address")),
            };
            let prefix = match prefix.parse::<u8>() {
                Ok(p) if p <= 32 && prefix.bytes().all(|b| b.is_ascii_digit()) => p,
                _ => return Err(bad("prefix length must be 0 to 32")),
            };
            let mask = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
            entries.push(Subnet {
                weight,
                network: u32::from(addr) & mask,
                mask,
            });
        }
        Ok(Subnets { entries })
    }

    /// True when no mask was given.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The weight of a server: [`Self::BEST`] for a UNIX socket, the weight
    /// of the first mask that matches a literal IP address, else
    /// [`Self::WORST`] (DNS names are not resolved here; use
    /// [`Self::weight_ip`] with a resolved address).
    pub fn weight(&self, location: &Location) -> u32 {
        match location {
            Location::Unix(_) => Self::BEST,
            Location::Tcp { .. } => location.ip().map_or(Self::WORST, |ip| self.weight_ip(ip)),
        }
    }

    /// The weight of an address: the first matching mask's, else
    /// [`Self::WORST`]. IPv4-mapped IPv6 addresses match as IPv4; other IPv6
    /// addresses never match (masks are IPv4 only, as in libvmod-redis).
    pub fn weight_ip(&self, ip: IpAddr) -> u32 {
        let v4 = match ip {
            IpAddr::V4(v4) => v4,
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => v4,
                None => return Self::WORST,
            },
        };
        let addr = u32::from(v4);
        self.entries
            .iter()
            .find(|s| addr & s.mask == s.network)
            .map_or(Self::WORST, |s| s.weight)
    }
}

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
    pub tls: bool,
    pub tls_cafile: &'a str,
    pub tls_capath: &'a str,
    pub tls_certfile: &'a str,
    pub tls_keyfile: &'a str,
    pub tls_sni: &'a str,
    pub user: &'a str,
    pub password: Secret<&'a str>,
    pub sickness_ttl: i64,
    pub ignore_slaves: bool,
    pub max_cluster_hops: i64,
    pub debug: bool,
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
            tls: false,
            tls_cafile: "",
            tls_capath: "",
            tls_certfile: "",
            tls_keyfile: "",
            tls_sni: "",
            user: "",
            password: Secret(""),
            sickness_ttl: 60,
            ignore_slaves: false,
            max_cluster_hops: 32,
            debug: false,
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
    /// At least 1.
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
    /// 0: unlimited.
    pub max_cluster_hops: u32,
    pub debug: bool,
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
        if role == Role::Cluster {
            return Err(ConfigError::NotSupported {
                what: "type=cluster",
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
        if args.max_connections < 1 {
            return Err(ConfigError::MaxConnections {
                value: args.max_connections,
            });
        }
        let max_connections = count("max_connections", args.max_connections)?;
        let protocol: Protocol = args.protocol.parse()?;
        // tls_* arguments without tls=true are ignored, as the C VMOD does.
        let tls = if args.tls {
            if let Some(Location::Unix(path)) = &location {
                return Err(ConfigError::TlsOverUnix {
                    location: path.display().to_string(),
                });
            }
            Some(crate::tls::Tls::load(&crate::tls::TlsArgs {
                cafile: args.tls_cafile,
                capath: args.tls_capath,
                certfile: args.tls_certfile,
                keyfile: args.tls_keyfile,
                sni: args.tls_sni,
            })?)
        } else {
            None
        };
        // As the C VMOD: no password, no AUTH, and so no user either
        // (commands then get the server's NOAUTH error reply if it wants one).
        let password = (!args.password.is_empty()).then(|| Secret(args.password.0.to_owned()));
        let user = (!args.user.is_empty() && password.is_some()).then(|| args.user.to_owned());
        let sickness_ttl = duration("sickness_ttl", args.sickness_ttl, Duration::from_secs)?;
        let max_cluster_hops = count("max_cluster_hops", args.max_cluster_hops)?;
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
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tcp(host: &str, port: u16) -> Location {
        Location::Tcp {
            host: host.to_owned(),
            port,
        }
    }

    fn loc_err(text: &str) -> LocationError {
        match text.parse::<Location>() {
            Err(ConfigError::InvalidLocation { value, reason }) => {
                assert_eq!(value, redact_credentials(text));
                reason
            }
            other => panic!("{text:?}: expected InvalidLocation, got {other:?}"),
        }
    }

    #[test]
    fn location_accepted_forms() {
        let cases = [
            ("127.0.0.1:6379", tcp("127.0.0.1", 6379), "127.0.0.1:6379"),
            ("[::1]:6379", tcp("::1", 6379), "[::1]:6379"),
            ("[0:0::1]:1", tcp("::1", 1), "[::1]:1"),
            (
                "[2001:db8::7]:65535",
                tcp("2001:db8::7", 65535),
                "[2001:db8::7]:65535",
            ),
            (
                "redis.example:6379",
                tcp("redis.example", 6379),
                "redis.example:6379",
            ),
            (
                "Redis.Example:6379",
                tcp("redis.example", 6379),
                "redis.example:6379",
            ),
            ("localhost:6380", tcp("localhost", 6380), "localhost:6380"),
            ("my_host-1:6379", tcp("my_host-1", 6379), "my_host-1:6379"),
            ("  10.0.0.1:6379 ", tcp("10.0.0.1", 6379), "10.0.0.1:6379"),
            (
                "/run/redis.sock",
                Location::Unix(PathBuf::from("/run/redis.sock")),
                "/run/redis.sock",
            ),
        ];
        for (text, want, display) in cases {
            let got: Location = text.parse().unwrap_or_else(|e| panic!("{text:?}: {e}"));
            assert_eq!(got, want, "{text:?}");
            assert_eq!(got.to_string(), display, "{text:?}");
            // The canonical text parses back to the same location.
            assert_eq!(display.parse::<Location>().unwrap(), want);
        }
    }

    #[test]
    fn location_errors() {
        use LocationError::*;
        let cases = [
            ("", Empty),
            ("   ", Empty),
            ("localhost", MissingPort),
            ("127.0.0.1", MissingPort),
            ("127.0.0.1:", MissingPort),
            ("[::1]", MissingPort),
            ("[::1]:", MissingPort),
            (":6379", MissingHost),
            ("127.0.0.1:0", InvalidPort),
            ("127.0.0.1:65536", InvalidPort),
            ("127.0.0.1:70000", InvalidPort),
            ("127.0.0.1:-1", InvalidPort),
            ("127.0.0.1:+80", InvalidPort),
            ("127.0.0.1:http", InvalidPort),
            ("127.0.0.1:99999999999999999999", InvalidPort),
            ("[::1:6379", UnbalancedBrackets),
            ("::1]:6379", UnbalancedBrackets),
            ("[[::1]]:6379", UnbalancedBrackets),
            ("[::1]x:6379", UnbalancedBrackets),
            ("[::1]:63]79", UnbalancedBrackets),
            ("[127.0.0.1]:6379", InvalidIpv6),
            ("[nope]:6379", InvalidIpv6),
            ("::1:6379", BareIpv6),
            ("::1", BareIpv6),
            ("2001:db8::7:6379", BareIpv6),
            ("redis.sock", RelativePath),
            ("run/redis.sock", RelativePath),
            ("./redis.sock", RelativePath),
            ("dir/x:6379", RelativePath),
            ("redis://localhost:6379", Url),
            ("alice:pw@localhost:6379", UserInfo),
            ("pw@localhost:6379", UserInfo),
            ("256.1.1.1:6379", InvalidHost),
            ("10.0.0:6379", InvalidHost),
            ("bad host:6379", InvalidHost),
            ("a..b:6379", InvalidHost),
            (".a:6379", InvalidHost),
            ("h\u{e9}te:6379", InvalidHost),
        ];
        for (text, want) in cases {
            assert_eq!(loc_err(text), want, "{text:?}");
        }
    }

    #[test]
    fn location_error_message_names_value() {
        let err = "127.0.0.1:0".parse::<Location>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid location \"127.0.0.1:0\": port must be a number from 1 to 65535"
        );
    }

    #[test]
    fn credentials_never_echoed() {
        for (text, shown) in [
            ("redis://:s3cret@host/0", "redis://***@host/0"),
            ("rediss://alice:s3cret@h:6380", "rediss://***@h:6380"),
            ("alice:s3cret@127.0.0.1:6379", "***@127.0.0.1:6379"),
            ("a@b, c:d@e", "***@b, ***@e"),
            ("p@ss@host:1", "***@***@host:1"),
            ("127.0.0.1:6379", "127.0.0.1:6379"),
        ] {
            assert_eq!(redact_credentials(text), shown, "{text:?}");
        }
        let err = "redis://:s3cret@host/0".parse::<Location>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid location \"redis://***@host/0\": write host:port, not a URL"
        );
        let err = "alice:s3cret@host:6379".parse::<Location>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid location \"***@host:6379\": credentials go in user and password, not in the location"
        );
    }

    #[test]
    fn location_ip() {
        assert_eq!(
            tcp("127.0.0.1", 1).ip(),
            Some(IpAddr::V4(Ipv4Addr::LOCALHOST))
        );
        assert_eq!(tcp("::1", 1).ip(), Some(IpAddr::V6(Ipv6Addr::LOCALHOST)));
        assert_eq!(tcp("redis.example", 1).ip(), None);
        assert_eq!(Location::Unix("/x".into()).ip(), None);
    }

    #[test]
    fn roles_and_protocols() {
        for role in [Role::Master, Role::Slave, Role::Auto, Role::Cluster] {
            assert_eq!(role.as_str().parse::<Role>().unwrap(), role);
            assert_eq!(role.to_string(), role.as_str());
        }
        for proto in [Protocol::Resp2, Protocol::Resp3, Protocol::Default] {
            assert_eq!(proto.as_str().parse::<Protocol>().unwrap(), proto);
            assert_eq!(proto.to_string(), proto.as_str());
        }
        let err = "MASTER".parse::<Role>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid type \"MASTER\" (expected one of: master, slave, auto, cluster)"
        );
        assert!("".parse::<Role>().is_err());
        let err = "resp3".parse::<Protocol>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid protocol \"resp3\" (expected one of: RESP2, RESP3, default)"
        );
    }

    #[test]
    fn subnets_example_from_the_docs() {
        let s = Subnets::parse("0 192.168.1.102/32, 1 192.168.1.103/32, 2 0.0.0.0/32").unwrap();
        assert!(!s.is_empty());
        let w = |text: &str| s.weight(&text.parse().unwrap());
        assert_eq!(w("192.168.1.102:6379"), 0);
        assert_eq!(w("192.168.1.103:6379"), 1);
        assert_eq!(w("0.0.0.0:6379"), 2);
        assert_eq!(w("192.168.1.104:6379"), Subnets::WORST);
        assert_eq!(w("redis.example:6379"), Subnets::WORST);
        assert_eq!(w("[::1]:6379"), Subnets::WORST);
        assert_eq!(w("/run/redis.sock"), Subnets::BEST);
    }

    #[test]
    fn subnets_first_match_wins_and_prefixes() {
        let s = Subnets::parse("5 10.1.0.0/16,3 10.0.0.0/8,\t9 0.0.0.0/0").unwrap();
        let ip = |t: &str| t.parse::<IpAddr>().unwrap();
        assert_eq!(s.weight_ip(ip("10.1.2.3")), 5);
        assert_eq!(s.weight_ip(ip("10.2.2.3")), 3);
        assert_eq!(s.weight_ip(ip("11.0.0.1")), 9);
        assert_eq!(s.weight_ip(ip("::ffff:10.1.0.1")), 5);
        assert_eq!(s.weight_ip(ip("2001:db8::1")), Subnets::WORST);
        // Host bits below the prefix are ignored.
        let s = Subnets::parse("7 10.1.2.3/8").unwrap();
        assert_eq!(s.weight_ip(ip("10.200.0.1")), 7);
        assert_eq!(s.weight_ip(ip("11.1.2.3")), Subnets::WORST);
        // The largest weight still ranks before "no match".
        let s = Subnets::parse("4294967294 1.2.3.4/32").unwrap();
        assert_eq!(s.weight_ip(ip("1.2.3.4")), u32::MAX - 1);
    }

    #[test]
    fn subnets_empty() {
        for text in ["", "  ", "\t"] {
            let s = Subnets::parse(text).unwrap();
            assert!(s.is_empty());
            assert_eq!(s, Subnets::default());
            assert_eq!(s.weight(&tcp("127.0.0.1", 1)), Subnets::WORST);
            assert_eq!(s.weight(&Location::Unix("/s".into())), Subnets::BEST);
        }
    }

    #[test]
    fn subnets_errors() {
        let cases = [
            (
                "0 192.168.1.1",
                "0 192.168.1.1",
                "mask needs a /prefix length",
            ),
            (
                "x 1.2.3.4/32",
                "x 1.2.3.4/32",
                "weight must be a non-negative integer",
            ),
            (
                "-1 1.2.3.4/32",
                "-1 1.2.3.4/32",
                "weight must be a non-negative integer",
            ),
            (
                "99999999999 1.2.3.4/32",
                "99999999999 1.2.3.4/32",
                "weight is too large",
            ),
            (
                "4294967295 1.2.3.4/32",
                "4294967295 1.2.3.4/32",
                "weight is too large",
            ),
            (
                "0 1.2.3.4/33",
                "0 1.2.3.4/33",
                "prefix length must be 0 to 32",
            ),
            ("0 1.2.3.4/", "0 1.2.3.4/", "prefix length must be 0 to 32"),
            (
                "0 1.2.3.4/+8",
                "0 1.2.3.4/+8",
                "prefix length must be 0 to 32",
            ),
            ("0 1.2.3/24", "0 1.2.3/24", "invalid IPv4 address"),
            ("0 ::1/128", "0 ::1/128", "only IPv4 masks are supported"),
            ("0 1.2.3.4/32,", "", "empty entry"),
            ("0 1.2.3.4/32,,1 1.2.3.5/32", "", "empty entry"),
            (
                "0 1.2.3.4/32 junk",
                "0 1.2.3.4/32 junk",
                "expected a weight and a mask separated by blanks",
            ),
            (
                "1.2.3.4/32",
                "1.2.3.4/32",
                "expected a weight and a mask separated by blanks",
            ),
            (
                "0 1.2.3.4/32, 1 1.2.3.5",
                "1 1.2.3.5",
                "mask needs a /prefix length",
            ),
        ];
        for (text, entry, reason) in cases {
            match Subnets::parse(text) {
                Err(ConfigError::InvalidSubnet {
                    entry: e,
                    reason: r,
                }) => {
                    assert_eq!((e.as_str(), r), (entry, reason), "{text:?}");
                }
                other => panic!("{text:?}: expected InvalidSubnet, got {other:?}"),
            }
        }
        let msg = Subnets::parse("0 1.2.3.4").unwrap_err().to_string();
        assert_eq!(
            msg,
            "invalid subnets entry \"0 1.2.3.4\": mask needs a /prefix length \
             (expected \"<weight> <ipv4>/<prefix>\", e.g. \"0 192.168.1.0/24\")"
        );
    }

    fn args(location: &str) -> DbArgs<'_> {
        DbArgs {
            location,
            ..DbArgs::default()
        }
    }

    #[test]
    fn defaults_from_vmod_vcc() {
        let c = DbConfig::from_args(&args("127.0.0.1:6379")).unwrap();
        assert_eq!(c.location, Some(tcp("127.0.0.1", 6379)));
        assert_eq!(c.role, Role::Auto);
        assert_eq!(c.connection_timeout, Some(Duration::from_millis(1000)));
        assert_eq!(c.connection_ttl, None);
        assert_eq!(c.command_timeout, None);
        assert_eq!(c.max_command_retries, 0);
        assert!(c.shared_connections);
        assert_eq!(c.max_connections, 128);
        assert_eq!(c.protocol, Protocol::Default);
        assert_eq!(c.user, None);
        assert_eq!(c.password, None);
        assert_eq!(c.sickness_ttl, Duration::from_secs(60));
        assert!(!c.ignore_slaves);
        assert_eq!(c.max_cluster_hops, 32);
        assert!(!c.debug);
    }

    #[test]
    fn every_argument_is_carried() {
        let a = DbArgs {
            location: "/run/redis.sock",
            role: "slave",
            connection_timeout: 0,
            connection_ttl: 300,
            command_timeout: 250,
            max_command_retries: 2,
            shared_connections: false,
            max_connections: 1,
            protocol: "RESP3",
            user: "bob",
            password: Secret("s3cret"),
            sickness_ttl: 0,
            ignore_slaves: true,
            max_cluster_hops: 0,
            debug: true,
            ..DbArgs::default()
        };
        let c = DbConfig::from_args(&a).unwrap();
        assert_eq!(c.location, Some(Location::Unix("/run/redis.sock".into())));
        assert_eq!(c.role, Role::Slave);
        assert_eq!(c.connection_timeout, None);
        assert_eq!(c.connection_ttl, Some(Duration::from_secs(300)));
        assert_eq!(c.command_timeout, Some(Duration::from_millis(250)));
        assert_eq!(c.max_command_retries, 2);
        assert!(!c.shared_connections);
        assert_eq!(c.max_connections, 1);
        assert_eq!(c.protocol, Protocol::Resp3);
        assert_eq!(c.user.as_deref(), Some("bob"));
        assert_eq!(c.password.as_deref(), Some("s3cret"));
        assert_eq!(c.sickness_ttl, Duration::ZERO);
        assert!(c.ignore_slaves);
        assert_eq!(c.max_cluster_hops, 0);
        assert!(c.debug);

        let c = DbConfig::from_args(&DbArgs {
            role: "master",
            protocol: "RESP2",
            password: Secret("only-password"),
            ..args("[::1]:6380")
        })
        .unwrap();
        assert_eq!(c.role, Role::Master);
        assert_eq!(c.protocol, Protocol::Resp2);
        assert_eq!(c.user, None);
        assert_eq!(c.password.as_deref(), Some("only-password"));
    }

    fn err(a: DbArgs) -> String {
        DbConfig::from_args(&a).unwrap_err().to_string()
    }

    #[test]
    fn argument_errors() {
        let base = args("127.0.0.1:6379");
        // No first server: every server comes from add_server().
        assert_eq!(DbConfig::from_args(&args("")).unwrap().location, None);
        assert_eq!(DbConfig::from_args(&args("  ")).unwrap().location, None);
        assert_eq!(
            err(args("localhost")),
            "invalid location \"localhost\": missing port (expected host:port, \
             [ipv6]:port or an absolute UNIX socket path)"
        );
        assert_eq!(
            err(DbArgs {
                role: "cluster",
                ..base
            }),
            "type=cluster is not supported yet"
        );
        assert!(err(DbArgs {
            role: "primary",
            ..base
        })
        .starts_with("invalid type \"primary\""));
        assert!(err(DbArgs {
            protocol: "RESP4",
            ..base
        })
        .starts_with("invalid protocol"));
        for (a, name, value) in [
            (
                DbArgs {
                    connection_timeout: -1,
                    ..base
                },
                "connection_timeout",
                -1,
            ),
            (
                DbArgs {
                    connection_ttl: -2,
                    ..base
                },
                "connection_ttl",
                -2,
            ),
            (
                DbArgs {
                    command_timeout: -3,
                    ..base
                },
                "command_timeout",
                -3,
            ),
            (
                DbArgs {
                    max_command_retries: -4,
                    ..base
                },
                "max_command_retries",
                -4,
            ),
            (
                DbArgs {
                    sickness_ttl: -5,
                    ..base
                },
                "sickness_ttl",
                -5,
            ),
            (
                DbArgs {
                    max_cluster_hops: -6,
                    ..base
                },
                "max_cluster_hops",
                -6,
            ),
            (
                DbArgs {
                    max_connections: -7,
                    ..base
                },
                "max_connections",
                -7,
            ),
        ] {
            let msg = err(a);
            assert!(msg.starts_with(name), "{msg}");
            assert!(msg.contains(&value.to_string()), "{msg}");
        }
        assert_eq!(
            err(DbArgs {
                max_command_retries: -4,
                ..base
            }),
            "max_command_retries must not be negative (got -4)"
        );
        assert_eq!(
            err(DbArgs {
                max_connections: 0,
                ..base
            }),
            "max_connections must be at least 1 (got 0)"
        );
        assert_eq!(
            err(DbArgs {
                max_connections: 1 << 40,
                ..base
            }),
            "max_connections is too large (got 1099511627776, at most 4294967295)"
        );
        assert_eq!(
            err(DbArgs {
                max_command_retries: i64::MAX,
                ..base
            }),
            format!(
                "max_command_retries is too large (got {}, at most 4294967295)",
                i64::MAX
            )
        );
        assert!(err(DbArgs {
            max_cluster_hops: 1 << 33,
            ..base
        })
        .contains("too large"));
        // A user without a password is accepted and sends no AUTH (C VMOD).
        let c = DbConfig::from_args(&DbArgs {
            user: "bob",
            ..base
        })
        .unwrap();
        assert_eq!((c.user, c.password), (None, None));
    }

    #[test]
    fn tls_material_is_checked_only_with_tls_true() {
        let base = args("127.0.0.1:6379");
        // Ignored without tls=true, as the C VMOD does.
        let c = DbConfig::from_args(&DbArgs {
            tls_cafile: "/nonexistent/ca.pem",
            tls_sni: "bad name!",
            ..base
        })
        .unwrap();
        assert!(c.tls.is_none());
        assert_eq!(
            err(DbArgs {
                tls: true,
                tls_cafile: "/nonexistent/ca.pem",
                ..base
            }),
            "tls_cafile \"/nonexistent/ca.pem\": no such file or directory"
        );
        assert_eq!(
            err(DbArgs {
                tls: true,
                ..args("/run/redis.sock")
            }),
            "tls=true needs a host:port location, not the UNIX socket \"/run/redis.sock\""
        );
        // System roots by default.
        let c = DbConfig::from_args(&DbArgs { tls: true, ..base }).unwrap();
        assert!(c.tls.is_some());
    }

    #[test]
    fn first_bad_argument_is_reported() {
        let a = DbArgs {
            connection_timeout: -1,
            max_connections: 0,
            tls: true,
            ..args("127.0.0.1:6379")
        };
        assert!(err(a).starts_with("connection_timeout"));
    }

    #[test]
    fn huge_durations_are_accepted() {
        let c = DbConfig::from_args(&DbArgs {
            connection_timeout: i64::MAX,
            connection_ttl: i64::MAX,
            ..args("127.0.0.1:6379")
        })
        .unwrap();
        assert_eq!(
            c.connection_timeout,
            Some(Duration::from_millis(i64::MAX as u64))
        );
        assert_eq!(c.connection_ttl, Some(Duration::from_secs(i64::MAX as u64)));
    }

    #[test]
    fn password_stays_out_of_debug_output() {
        let a = DbArgs {
            user: "bob",
            password: Secret("hunter2-s3cret"),
            ..args("127.0.0.1:6379")
        };
        let shown = format!("{a:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(
            shown.contains("<redacted>") && shown.contains("bob"),
            "{shown}"
        );
        let c = DbConfig::from_args(&a).unwrap();
        for shown in [
            format!("{c:?}"),
            format!("{c:#?}"),
            format!("{:?}", c.clone()),
        ] {
            assert!(!shown.contains("hunter2"), "{shown}");
            assert!(shown.contains("<redacted>"), "{shown}");
        }
        // No password: nothing to hide, and nothing pretends there is one.
        let c = DbConfig::from_args(&args("127.0.0.1:6379")).unwrap();
        assert!(format!("{c:?}").contains("password: None"));
        assert!(!format!("{:?}", args("x:1")).contains("<redacted>"));
    }
}

/// Property tests of what `vcl_init` hands us from the VCL: locations,
/// subnet lists and the whole `redis.db()` argument set.
///
/// Runtime: about 3 s of CPU in a debug build (`cargo test --lib
/// config::proptests`). Found no bug.
#[cfg(test)]
mod proptests {
    use super::*;
    use proptest::collection::vec;
    use proptest::prelude::*;

    /// Text that looks like a location often enough to be accepted.
    fn location_text() -> impl Strategy<Value = String> {
        let host = prop_oneof![
            any::<Ipv4Addr>().prop_map(|ip| ip.to_string()),
            any::<Ipv6Addr>().prop_map(|ip| format!("[{ip}]")),
            any::<Ipv6Addr>().prop_map(|ip| ip.to_string()),
            "[a-zA-Z0-9_.-]{1,12}",
            Just("LocalHost".to_owned()),
            Just(String::new()),
        ];
        let port = prop_oneof![
            (1..=u16::MAX).prop_map(|p| p.to_string()),
            Just("0".to_owned()),
            Just("65536".to_owned()),
            Just("+1".to_owned()),
            "[0-9]{0,6}",
        ];
        let blank = prop_oneof![Just(""), Just(" "), Just("\t"), Just("\u{a0}"), Just("\n")];
        prop_oneof![
            4 => (blank.clone(), host, ":", port, blank).prop_map(|(a, h, c, p, b)| format!("{a}{h}{c}{p}{b}")),
            1 => "/[ -~]{0,16}",
            1 => vec(
                prop::sample::select(vec![
                    "[", "]", ":", "::", "/", ".", "..", "://", "1", "80", "a", "Z", " ", "\u{e9}",
                    "\0", "\u{3000}", "redis", "sock", "::ffff:", "%eth0",
                ]),
                0..10,
            )
            .prop_map(|parts| parts.concat()),
            1 => any::<String>(),
        ]
    }

    fn subnets_text() -> impl Strategy<Value = String> {
        vec(
            prop::sample::select(vec![
                "0",
                "1",
                "4294967294",
                "4294967295",
                " ",
                "\t",
                ",",
                "/",
                ".",
                "1.2.3.4",
                "0.0.0.0",
                "::1",
                "32",
                "33",
                "8",
                "+8",
                "-1",
                "x",
                "\u{a0}",
                "\u{663}",
            ]),
            0..16,
        )
        .prop_map(|parts| parts.concat())
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

        /// Any text: no panic; an error names the text as given (user info
        /// redacted); a parsed
        /// location prints as text that parses back to it, unchanged.
        #[test]
        fn location_parses_back_from_its_display(text in location_text()) {
            match text.parse::<Location>() {
                Ok(location) => {
                    let display = location.to_string();
                    prop_assert_eq!(display.parse::<Location>(), Ok(location.clone()), "{}", display);
                    prop_assert_eq!(location.to_string(), display.parse::<Location>().unwrap().to_string());
                    if let Location::Tcp { host, port } = &location {
                        prop_assert!(*port > 0);
                        prop_assert_eq!(host.to_ascii_lowercase(), host.clone());
                        prop_assert_eq!(location.ip().is_some(), host.parse::<IpAddr>().is_ok());
                    }
                }
                Err(ConfigError::InvalidLocation { value, .. }) => {
                    prop_assert_eq!(value, redact_credentials(&text));
                }
                Err(other) => prop_assert!(false, "{:?}: {:?}", text, other),
            }
        }

        /// Literal addresses are accepted as they are (IPv6 in brackets).
        #[test]
        fn literal_addresses_are_accepted(ip in any::<IpAddr>(), port in 1..=u16::MAX) {
            let text = match ip {
                IpAddr::V4(v4) => format!("{v4}:{port}"),
                IpAddr::V6(v6) => format!("[{v6}]:{port}"),
            };
            let location: Location = text.parse().unwrap();
            prop_assert_eq!(location.ip(), Some(ip));
            prop_assert_eq!(location.to_string(), text);
        }

        /// Any text into `Subnets::parse`: no panic.
        #[test]
        fn subnets_never_panic(text in prop_oneof![subnets_text(), any::<String>()]) {
            if let Ok(subnets) = Subnets::parse(&text) {
                prop_assert_eq!(subnets.is_empty(), text.trim().is_empty());
            }
        }

        /// The weight of an address is that of the first mask matching it
        /// (host bits of the mask ignored), else WORST; IPv4-mapped IPv6
        /// matches as IPv4, UNIX sockets are BEST.
        #[test]
        fn subnet_weight_is_the_first_match(
            entries in vec((0..u32::MAX, any::<Ipv4Addr>(), 0..=32u32, 0..3usize), 1..6),
            probes in vec(any::<Ipv4Addr>(), 8),
        ) {
            let blanks = ["", " ", "\t "];
            let text = entries
                .iter()
                .map(|(w, ip, prefix, b)| format!("{}{w} {ip}/{prefix}{}", blanks[*b], blanks[*b]))
                .collect::<Vec<_>>()
                .join(",");
            let subnets = Subnets::parse(&text).unwrap();
            // Probes: random, and one inside each network.
            let inside = entries.iter().map(|(_, ip, _, _)| *ip);
            for probe in probes.into_iter().chain(inside) {
                let want = entries
                    .iter()
                    .find(|(_, net, prefix, _)| {
                        let shift = 32 - prefix;
                        u64::from(u32::from(probe)) >> shift == u64::from(u32::from(*net)) >> shift
                    })
                    .map_or(Subnets::WORST, |(w, ..)| *w);
                prop_assert_eq!(subnets.weight_ip(IpAddr::V4(probe)), want, "{} in {}", probe, text);
                prop_assert_eq!(subnets.weight_ip(IpAddr::V6(probe.to_ipv6_mapped())), want);
                let location: Location = format!("{probe}:6379").parse().unwrap();
                prop_assert_eq!(subnets.weight(&location), want);
            }
            prop_assert_eq!(subnets.weight(&Location::Unix("/s".into())), Subnets::BEST);
        }
    }

    fn int() -> impl Strategy<Value = i64> {
        prop_oneof![
            -2i64..3,
            Just(i64::MIN),
            Just(i64::MAX),
            Just(i64::from(u32::MAX)),
            Just(i64::from(u32::MAX) + 1),
            any::<i64>(),
        ]
    }

    fn word() -> impl Strategy<Value = String> {
        prop_oneof![
            prop::sample::select(vec![
                "",
                "master",
                "slave",
                "auto",
                "cluster",
                "RESP2",
                "RESP3",
                "default",
                "MASTER",
                "127.0.0.1:6379",
                "/run/redis.sock",
                " ",
                "x",
            ])
            .prop_map(str::to_owned),
            location_text(),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 500, ..ProptestConfig::default() })]

        /// Any `redis.db()` arguments: no panic, and accepted exactly when
        /// every argument is valid, each carried over as given.
        #[test]
        fn db_args_are_validated(
            strings in vec(word(), 10),
            ints in vec(int(), 7),
            flags in vec(any::<bool>(), 5),
            password in prop_oneof![Just(String::new()), "pw-[a-z0-9]{4,8}"],
        ) {
            let a = DbArgs {
                location: &strings[0],
                role: &strings[1],
                connection_timeout: ints[0],
                connection_ttl: ints[1],
                command_timeout: ints[2],
                max_command_retries: ints[3],
                shared_connections: flags[0],
                max_connections: ints[4],
                protocol: &strings[2],
                tls: false,
                tls_cafile: if flags[2] { "" } else { &strings[3] },
                tls_capath: if flags[2] { "" } else { &strings[4] },
                tls_certfile: "",
                tls_keyfile: "",
                tls_sni: if flags[2] { "" } else { &strings[5] },
                user: &strings[6],
                password: Secret(&password),
                sickness_ttl: ints[5],
                ignore_slaves: flags[3],
                max_cluster_hops: ints[6],
                debug: flags[4],
            };
            let u32_count = |v: i64| u32::try_from(v).is_ok();
            let valid = (a.location.trim().is_empty() || a.location.parse::<Location>().is_ok())
                && matches!(a.role, "master" | "slave" | "auto")
                && a.connection_timeout >= 0
                && a.connection_ttl >= 0
                && a.command_timeout >= 0
                && u32_count(a.max_command_retries)
                && a.max_connections >= 1
                && u32_count(a.max_connections)
                && matches!(a.protocol, "RESP2" | "RESP3" | "default")
                && a.sickness_ttl >= 0
                && u32_count(a.max_cluster_hops);
            match DbConfig::from_args(&a) {
                Ok(c) => {
                    prop_assert!(valid, "{:?} accepted", a);
                    prop_assert_eq!(c.location, a.location.parse::<Location>().ok());
                    prop_assert_eq!(i64::from(c.max_connections), a.max_connections);
                    prop_assert_eq!(i64::from(c.max_command_retries), a.max_command_retries);
                    prop_assert_eq!(i64::from(c.max_cluster_hops), a.max_cluster_hops);
                    let ms = |v: i64| (v > 0).then(|| Duration::from_millis(v as u64));
                    prop_assert_eq!(c.connection_timeout, ms(a.connection_timeout));
                    prop_assert_eq!(c.command_timeout, ms(a.command_timeout));
                    prop_assert_eq!(c.connection_ttl, (a.connection_ttl > 0).then(|| Duration::from_secs(a.connection_ttl as u64)));
                    prop_assert_eq!(c.sickness_ttl, Duration::from_secs(a.sickness_ttl as u64));
                    prop_assert_eq!(c.user.as_deref(), (!a.user.is_empty() && !a.password.is_empty()).then_some(a.user));
                    prop_assert_eq!(c.password.as_deref(), (!a.password.is_empty()).then_some(a.password.0));
                    prop_assert_eq!(
                        (c.shared_connections, c.ignore_slaves, c.debug),
                        (a.shared_connections, a.ignore_slaves, a.debug)
                    );
                }
                Err(e) => {
                    prop_assert!(!valid, "{:?} refused: {}", a, e);
                    // The message never shows the password.
                    if !a.password.is_empty() {
                        prop_assert!(!e.to_string().contains(a.password.0));
                    }
                }
            }
        }
    }
}
