//! `redis.subnets()`: preference of servers by address.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::{ConfigError, Location};

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
