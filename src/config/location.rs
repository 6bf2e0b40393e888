//! Where a Redis server listens, as written in VCL.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;
use std::str::FromStr;

use super::ConfigError;

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
    /// A UNIX socket in `redis.sentinels()`: Sentinels advertise and are
    /// reached by address, as in the C VMOD.
    #[error("a Sentinel is reached at host:port only")]
    SentinelUnix,
}

/// Where a Redis server listens: the one name of a server, whether the
/// VCL, a cluster map or Sentinel gives it. Made by parsing or by
/// [`Location::tcp`], which normalise the host, so equal addresses compare
/// (and hash) equal.
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
    /// A TCP location from a host and a port as a server gives them (a
    /// cluster map, a redirection, a Sentinel report), normalised as
    /// parsing normalises them: an IPv6 address in its short form
    /// (`0:0:0:0:0:0:0:1` is `::1`), a DNS name in lowercase. So every
    /// spelling of one address is one `Location`, and its text the one
    /// the VCL's spelling shows. Refused as parsing refuses `host:port`
    /// (an IPv6 host is given without brackets).
    pub(crate) fn tcp(host: &str, port: u16) -> Result<Location, LocationError> {
        let host = if host.contains(':') {
            let ip: Ipv6Addr = host.parse().map_err(|_| LocationError::InvalidIpv6)?;
            ip.to_string()
        } else if host.is_empty() {
            return Err(LocationError::MissingHost);
        } else if valid_host(host) {
            host.to_ascii_lowercase()
        } else {
            return Err(LocationError::InvalidHost);
        };
        if port == 0 {
            return Err(LocationError::InvalidPort);
        }
        Ok(Location::Tcp { host, port })
    }

    /// The IP address of a TCP location written as a literal address; `None`
    /// for DNS names and UNIX sockets (callers resolve names themselves).
    pub fn ip(&self) -> Option<IpAddr> {
        match self {
            Location::Tcp { host, .. } => host.parse().ok(),
            Location::Unix(_) => None,
        }
    }

    /// The host of a TCP location (an IPv6 address without brackets), as
    /// replies that leave it out need it; `""` for a UNIX socket.
    pub(crate) fn host(&self) -> &str {
        match self {
            Location::Tcp { host, .. } => host,
            Location::Unix(_) => "",
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
        // Checked first, as the first thing wrong in the text.
        if addr.parse::<Ipv6Addr>().is_err() {
            return Err(LocationError::InvalidIpv6);
        }
        let port = match after.strip_prefix(':') {
            Some(port) => parse_port(port)?,
            None if after.is_empty() => return Err(LocationError::MissingPort),
            None => return Err(LocationError::UnbalancedBrackets),
        };
        return Location::tcp(addr, port);
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
    Location::tcp(host, port)
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
