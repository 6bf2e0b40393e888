//! Parsing and validation of the arguments of `redis.sentinels()`, in
//! `vcl_init`: a bad value fails `vcl.load` naming the argument.
use std::time::Duration;

use super::{optional, ConfigError, Location, LocationError, Protocol, Secret, TlsArgs};

/// The VCL arguments of `redis.sentinels()` as varnishd passes them (NULL
/// strings already mapped to ""; `locations` already taken from
/// `VMOD_REDIS_SENTINELS` when empty).
#[derive(Clone, Copy, Debug)]
pub struct SentinelArgs<'a> {
    pub locations: &'a str,
    pub period: i64,
    pub connection_timeout: i64,
    pub command_timeout: i64,
    pub protocol: &'a str,
    pub tls: TlsArgs<'a>,
    pub password: Secret<&'a str>,
    pub debug: bool,
    pub discover: bool,
}

impl Default for SentinelArgs<'_> {
    /// The defaults that vmod.vcc declares.
    fn default() -> Self {
        SentinelArgs {
            locations: "",
            period: 60,
            connection_timeout: 500,
            command_timeout: 0,
            protocol: "default",
            tls: TlsArgs::default(),
            password: Secret(""),
            debug: false,
            discover: false,
        }
    }
}

/// The validated configuration of the Sentinels of one VCL.
#[derive(Clone, Debug)]
pub struct SentinelConfig {
    /// At least one, all `host:port` (the C VMOD allows nothing else).
    pub locations: Vec<Location>,
    /// `None`: no periodic check (VCL 0): events and warm-up only.
    pub period: Option<Duration>,
    /// `None`: no timeout (VCL 0); the thread bounds its waits anyway.
    pub connection_timeout: Option<Duration>,
    pub command_timeout: Option<Duration>,
    pub protocol: Protocol,
    pub tls: Option<crate::tls::Tls>,
    pub password: Option<Secret<String>>,
    /// Log connections, events and refreshes too (the C VMOD's `debug`).
    pub debug: bool,
    /// [ext] add and remove the replicas Sentinel reports.
    pub discover: bool,
}

impl SentinelConfig {
    /// Validates the arguments in the order vmod.vcc declares them.
    /// `Ok(None)`: an empty list, Sentinel is not used.
    pub fn from_args(args: &SentinelArgs) -> Result<Option<SentinelConfig>, ConfigError> {
        if args.locations.trim().is_empty() {
            return Ok(None);
        }
        let mut locations = Vec::new();
        for entry in args.locations.split(',') {
            let location: Location = entry.trim().parse()?;
            if let Location::Unix(path) = &location {
                return Err(ConfigError::InvalidLocation {
                    value: path.display().to_string(),
                    reason: LocationError::SentinelUnix,
                });
            }
            if !locations.contains(&location) {
                locations.push(location);
            }
        }
        let period = optional("period", args.period, Duration::from_secs)?;
        let connection_timeout = optional(
            "connection_timeout",
            args.connection_timeout,
            Duration::from_millis,
        )?;
        let command_timeout = optional(
            "command_timeout",
            args.command_timeout,
            Duration::from_millis,
        )?;
        let protocol: Protocol = args.protocol.parse()?;
        let tls = crate::tls::Tls::from_args(&args.tls)?;
        let password = (!args.password.is_empty()).then(|| Secret(args.password.0.to_owned()));
        Ok(Some(SentinelConfig {
            locations,
            period,
            connection_timeout,
            command_timeout,
            protocol,
            tls,
            password,
            debug: args.debug,
            discover: args.discover,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: SentinelArgs) -> Result<Option<SentinelConfig>, String> {
        SentinelConfig::from_args(&args).map_err(|e| e.to_string())
    }

    #[test]
    fn empty_list_means_no_sentinel() {
        assert!(parse(SentinelArgs::default()).unwrap().is_none());
        let blank = SentinelArgs {
            locations: "  ",
            ..Default::default()
        };
        assert!(parse(blank).unwrap().is_none());
    }

    #[test]
    fn list_with_defaults() {
        let config = parse(SentinelArgs {
            locations: "127.0.0.1:26379, localhost:26380,127.0.0.1:26379",
            ..Default::default()
        })
        .unwrap()
        .unwrap();
        let shown: Vec<String> = config.locations.iter().map(|l| l.to_string()).collect();
        // Duplicates are dropped, order kept: the first is tried first.
        assert_eq!(shown, ["127.0.0.1:26379", "localhost:26380"]);
        assert_eq!(config.period, Some(Duration::from_secs(60)));
        assert_eq!(config.connection_timeout, Some(Duration::from_millis(500)));
        assert_eq!(config.command_timeout, None);
        assert_eq!(config.protocol, Protocol::Default);
        assert!(config.tls.is_none() && config.password.is_none() && !config.discover);
    }

    #[test]
    fn bad_arguments_are_named() {
        let bad = |args: SentinelArgs| parse(args).unwrap_err();
        let list = |locations| SentinelArgs {
            locations,
            ..Default::default()
        };
        assert_eq!(
            bad(list("127.0.0.1")),
            "invalid location \"127.0.0.1\": missing port (expected host:port, [ipv6]:port or an absolute UNIX socket path)"
        );
        assert!(bad(list("127.0.0.1:26379,,127.0.0.1:26380")).contains("empty"));
        assert_eq!(
            bad(list("/run/sentinel.sock")),
            "invalid location \"/run/sentinel.sock\": a Sentinel is reached at host:port only"
        );
        let ok = "127.0.0.1:26379";
        assert_eq!(
            bad(SentinelArgs {
                locations: ok,
                period: -1,
                ..Default::default()
            }),
            "period must not be negative (got -1)"
        );
        assert_eq!(
            bad(SentinelArgs {
                locations: ok,
                connection_timeout: -5,
                ..Default::default()
            }),
            "connection_timeout must not be negative (got -5)"
        );
        assert_eq!(
            bad(SentinelArgs {
                locations: ok,
                command_timeout: -5,
                ..Default::default()
            }),
            "command_timeout must not be negative (got -5)"
        );
        assert!(bad(SentinelArgs {
            locations: ok,
            tls: TlsArgs {
                enabled: true,
                cafile: "/nonexistent/ca.pem",
                ..TlsArgs::default()
            },
            ..Default::default()
        })
        .contains("tls_cafile"));
    }

    #[test]
    fn zero_period_disables_periodic_checks() {
        let config = parse(SentinelArgs {
            locations: "127.0.0.1:26379",
            period: 0,
            password: Secret("pw"),
            discover: true,
            ..Default::default()
        })
        .unwrap()
        .unwrap();
        assert_eq!(config.period, None);
        assert_eq!(config.password.as_deref(), Some("pw"));
        assert!(config.discover);
        // The password never shows in a dump of the configuration.
        assert!(!format!("{config:?}").contains("pw\""));
    }
}
