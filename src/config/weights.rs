//! `redis.weights()`: preference of servers by location, with rules on
//! the location's text; and [`Preference`], the one of `redis.subnets()`
//! and `redis.weights()` a VCL uses.

use regex::Regex;

use super::{ConfigError, Location, Subnets};

/// One `weight regexp` rule.
#[derive(Clone, Debug)]
struct Rule {
    weight: u32,
    pattern: Regex,
}

/// Preference of servers from `redis.weights()` (the C VMOD's, from its
/// releases for Varnish 8.0): the lower the weight, the more a server is
/// preferred. Rules are matched against the location's text, so DNS names
/// and IPv6 addresses get weights too, where subnets match IPv4 only.
#[derive(Clone, Debug, Default)]
pub struct Weights {
    rules: Vec<Rule>,
}

impl Weights {
    /// The weight of a UNIX socket, whatever the rules: it is on this host.
    pub const BEST: u32 = 0;
    /// The largest weight a rule may give, and the weight of a TCP server
    /// that no rule matches.
    pub const WORST: u32 = 3;

    /// Parses newline-separated `weight regexp` rules, e.g.
    /// `"0 ^10\.0\.0\.1:\n1 \.example\.com:"`. The weight is 0 to 3; the
    /// regular expression is the rest of the line (blanks around it
    /// dropped), unanchored. Blank lines are skipped, so the text may end
    /// with a newline; a blank text gives no rule (every TCP server then
    /// gets [`Self::WORST`]). The `VMOD_REDIS_WEIGHTS` fallback is the
    /// caller's business.
    pub fn parse(text: &str) -> Result<Weights, ConfigError> {
        let mut rules = Vec::new();
        for line in text.lines().map(str::trim).filter(|line| !line.is_empty()) {
            let bad = |reason: String| ConfigError::InvalidWeights {
                rule: line.to_owned(),
                reason,
            };
            let Some((weight, pattern)) = line.split_once(|c: char| c.is_ascii_whitespace()) else {
                return Err(bad(
                    "expected a weight and a regular expression separated by blanks".into(),
                ));
            };
            let weight = match weight.parse::<u32>() {
                Ok(w) if w <= Self::WORST && weight.bytes().all(|b| b.is_ascii_digit()) => w,
                _ => return Err(bad(format!("weight must be 0 to {}", Self::WORST))),
            };
            let pattern = Regex::new(pattern.trim_start())
                .map_err(|err| bad(format!("bad regular expression: {}", regex_reason(&err))))?;
            rules.push(Rule { weight, pattern });
        }
        Ok(Weights { rules })
    }

    /// The weight of a server: [`Self::BEST`] for a UNIX socket, else the
    /// weight of the first rule whose expression matches the location as
    /// written (`host:port`, `[ipv6]:port`), else [`Self::WORST`].
    pub fn weight(&self, location: &Location) -> u32 {
        if let Location::Unix(_) = location {
            return Self::BEST;
        }
        let text = location.to_string();
        self.rules
            .iter()
            .find(|rule| rule.pattern.is_match(&text))
            .map_or(Self::WORST, |rule| rule.weight)
    }
}

/// The cause of a regex error on one line: the crate's syntax errors span
/// several lines (the pattern, a caret, then `error: <cause>`), too much
/// for a `vcl.load` message that already quotes the rule.
fn regex_reason(err: &regex::Error) -> String {
    let text = err.to_string();
    let last = text.lines().rev().find(|line| !line.trim().is_empty());
    let last = last.unwrap_or(&text).trim();
    last.strip_prefix("error: ").unwrap_or(last).to_owned()
}

/// How a VCL ranks its servers by closeness: by `redis.subnets()` or by
/// `redis.weights()`, whichever it called (one at most: the other is
/// refused, see `vcl::weights`); subnets with no mask when neither.
#[derive(Clone, Debug)]
pub enum Preference {
    Subnets(Subnets),
    Weights(Weights),
}

impl Default for Preference {
    fn default() -> Self {
        Preference::Subnets(Subnets::default())
    }
}

impl Preference {
    /// The weight of a server at `location`: lower is closer.
    pub fn weight(&self, location: &Location) -> u32 {
        match self {
            Preference::Subnets(subnets) => subnets.weight(location),
            Preference::Weights(weights) => weights.weight(location),
        }
    }

    /// The VCL function that gave it, for messages.
    pub(crate) fn function(&self) -> &'static str {
        match self {
            Preference::Subnets(_) => "redis.subnets()",
            Preference::Weights(_) => "redis.weights()",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> Location {
        text.parse().unwrap()
    }

    fn reason(text: &str) -> String {
        match Weights::parse(text) {
            Err(ConfigError::InvalidWeights { reason, .. }) => reason,
            other => panic!("{text:?}: expected an error, got {other:?}"),
        }
    }

    #[test]
    fn lower_weights_first_match_wins() {
        let w = Weights::parse("1 ^10\\.0\\.0\\.1:\n2 ^10\\.0\\.0\\.\n0 ^10\\.0\\.0\\.2:").unwrap();
        assert_eq!(w.weight(&at("10.0.0.1:6379")), 1);
        // The second rule matches before the third one.
        assert_eq!(w.weight(&at("10.0.0.2:6379")), 2);
        assert_eq!(w.weight(&at("10.1.0.1:6379")), Weights::WORST);
    }

    #[test]
    fn matched_against_the_location_as_written() {
        let w = Weights::parse(
            "0 :6380$\n1 ^\\[::1\\]:\n2 ^redis-[0-9]+\\.example\\.com:\n  3   spaces inside  \n",
        )
        .unwrap();
        assert_eq!(w.weight(&at("10.0.0.9:6380")), 0);
        assert_eq!(w.weight(&at("[::1]:6379")), 1);
        // IPv6 addresses are matched in their short form, as logged.
        assert_eq!(w.weight(&at("[0:0:0:0:0:0:0:1]:6379")), 1);
        assert_eq!(w.weight(&at("redis-12.example.com:6379")), 2);
        // DNS names are matched lowercase, as every location holds them.
        assert_eq!(w.weight(&at("REDIS-3.Example.COM:6379")), 2);
        // Unanchored, and a regex may hold blanks.
        assert_eq!(Weights::parse("1 side").unwrap().weight(&at("inside:1")), 1);
        assert_eq!(w.weight(&at("redis.example.org:6379")), Weights::WORST);
    }

    #[test]
    fn unix_sockets_are_always_the_closest() {
        let w = Weights::parse("3 .\n3 \\.sock$").unwrap();
        assert_eq!(w.weight(&at("/run/redis.sock")), Weights::BEST);
        assert_eq!(w.weight(&at("127.0.0.1:6379")), 3);
        assert_eq!(Weights::default().weight(&at("/run/redis.sock")), 0);
    }

    #[test]
    fn blank_text_and_lines() {
        for text in ["", "  ", "\n\n", " \r\n\t"] {
            let w = Weights::parse(text).unwrap();
            assert!(w.rules.is_empty(), "{text:?}");
            assert_eq!(w.weight(&at("127.0.0.1:1")), Weights::WORST);
        }
        let w = Weights::parse("\r\n0 ^a:\r\n\r\n1 ^b:\r\n").unwrap();
        assert_eq!(w.rules.len(), 2);
        assert_eq!(w.weight(&at("a:1")), 0);
        assert_eq!(w.weight(&at("b:1")), 1);
    }

    #[test]
    fn errors() {
        for weight in ["4", "-1", "+1", "10", "99999999999999999999", "1.0", "x"] {
            assert_eq!(
                reason(&format!("{weight} ^a:")),
                "weight must be 0 to 3",
                "{weight}"
            );
        }
        assert_eq!(
            reason("1"),
            "expected a weight and a regular expression separated by blanks"
        );
        assert_eq!(reason("1 ("), "bad regular expression: unclosed group");
        assert!(reason("0 [z-a]").starts_with("bad regular expression: "));
        // The rule is quoted as given, and a good rule before it is no help.
        let err = Weights::parse("0 ^a:\n 2 a(b ").unwrap_err().to_string();
        assert_eq!(
            err,
            "invalid weights rule \"2 a(b\": bad regular expression: unclosed group \
             (expected \"<weight 0-3> <regular expression>\", e.g. \"0 ^192\\.168\\.1\\.102:\")"
        );
    }

    #[test]
    fn preference_of_either_function() {
        let tcp = at("127.0.0.1:6379");
        assert_eq!(Preference::default().weight(&tcp), Subnets::WORST);
        let subnets = Preference::Subnets(Subnets::parse("1 127.0.0.0/8").unwrap());
        assert_eq!(subnets.weight(&tcp), 1);
        let weights = Preference::Weights(Weights::parse("2 ^127\\.").unwrap());
        assert_eq!(weights.weight(&tcp), 2);
        assert_eq!(weights.weight(&at("/s")), 0);
        assert_eq!(weights.function(), "redis.weights()");
    }
}
