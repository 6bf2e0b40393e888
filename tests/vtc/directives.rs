//! The `#@` lines of a vtc file: parsing, and the expansion of `${macros}` in their arguments.
use crate::modes::MODE_NAMES;

#[derive(Debug)]
pub(crate) enum Directive {
    Redis {
        name: String,
        args: Vec<String>,
        /// `#@ redis-tls`: a TLS port besides the plain one.
        tls: bool,
    },
    Replica {
        name: String,
        master: String,
        args: Vec<String>,
    },
    Sentinel {
        name: String,
        master: String,
        args: Vec<String>,
        /// `#@ sentinel-tls`: a TLS port besides the plain one.
        tls: bool,
    },
    Cluster {
        name: String,
        args: Vec<String>,
    },
    /// `#@ trickle NAME TARGET DELAY_MS [AFTER_MS]` (tests/vtc/trickle.rs).
    Trickle {
        name: String,
        target: String,
        delay_ms: u64,
        after_ms: u64,
    },
    Timeout(u64),
    Env(String, String),
    /// `#@ not-in MODE[,MODE]: REASON` (tests/vtc/modes.rs).
    NotIn {
        modes: Vec<String>,
        reason: String,
    },
    /// `#@ vrt >= N` / `#@ vrt < N`: the trial runs only when the module is
    /// built against a Varnish whose VRT major (vrt.h) holds it, for what
    /// differs by release (the C VMOD's `redis.db()` argument order).
    Vrt {
        at_least: bool,
        major: u32,
    },
}

impl Directive {
    /// False for a `#@ vrt` condition that `built_major` does not meet.
    pub(crate) fn runs_on_vrt(&self, built_major: u32) -> bool {
        match *self {
            Directive::Vrt { at_least, major } => (built_major >= major) == at_least,
            _ => true,
        }
    }
}

pub(crate) fn parse_directives(text: &str) -> Result<Vec<Directive>, String> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let Some(rest) = line.trim_start().strip_prefix("#@ ") else {
            continue;
        };
        let at = |msg: String| format!("line {}: {msg}: {line}", i + 1);
        if let Some(spec) = rest.strip_prefix("not-in ") {
            out.push(not_in(spec).map_err(at)?);
            continue;
        }
        let words = split_words(rest).map_err(at)?;
        let Some((kind, params)) = words.split_first() else {
            return Err(at("empty directive".into()));
        };
        let directive = match kind.as_str() {
            "redis" | "redis-tls" => {
                let (name, args) = params
                    .split_first()
                    .ok_or_else(|| at(format!("usage: #@ {kind} NAME [ARG...]")))?;
                Directive::Redis {
                    name: name.clone(),
                    args: args.to_vec(),
                    tls: kind == "redis-tls",
                }
            }
            "replica" => {
                if params.len() < 2 {
                    return Err(at("usage: #@ replica NAME MASTER [ARG...]".into()));
                }
                Directive::Replica {
                    name: params[0].clone(),
                    master: params[1].clone(),
                    args: params[2..].to_vec(),
                }
            }
            "sentinel" | "sentinel-tls" => match params {
                [name, master, args @ ..] => Directive::Sentinel {
                    name: name.clone(),
                    master: master.clone(),
                    args: args.to_vec(),
                    tls: kind == "sentinel-tls",
                },
                _ => return Err(at(format!("usage: #@ {kind} NAME MASTER [ARG...]"))),
            },
            "cluster" => {
                let (name, args) = params
                    .split_first()
                    .ok_or_else(|| at("usage: #@ cluster NAME [ARG...]".into()))?;
                Directive::Cluster {
                    name: name.clone(),
                    args: args.to_vec(),
                }
            }
            "trickle" => {
                let usage = || at("usage: #@ trickle NAME TARGET DELAY_MS [AFTER_MS]".into());
                let ms = |v: &String| v.parse::<u64>().map_err(|_| usage());
                match params {
                    [name, target, delay] => Directive::Trickle {
                        name: name.clone(),
                        target: target.clone(),
                        delay_ms: ms(delay)?,
                        after_ms: 0,
                    },
                    [name, target, delay, after] => Directive::Trickle {
                        name: name.clone(),
                        target: target.clone(),
                        delay_ms: ms(delay)?,
                        after_ms: ms(after)?,
                    },
                    _ => return Err(usage()),
                }
            }
            "timeout" => match params {
                [secs] => Directive::Timeout(
                    secs.parse()
                        .map_err(|_| at("usage: #@ timeout SECONDS".into()))?,
                ),
                _ => return Err(at("usage: #@ timeout SECONDS".into())),
            },
            "env" => match params {
                [name, value] => Directive::Env(name.clone(), value.clone()),
                _ => return Err(at("usage: #@ env NAME VALUE".into())),
            },
            "vrt" => {
                let usage = || at("usage: #@ vrt >= N | #@ vrt < N".into());
                match params {
                    [op, n] if op == ">=" || op == "<" => Directive::Vrt {
                        at_least: op == ">=",
                        major: n.parse().map_err(|_| usage())?,
                    },
                    _ => return Err(usage()),
                }
            }
            other => return Err(at(format!("unknown directive {other:?}"))),
        };
        out.push(directive);
    }
    Ok(out)
}

/// `MODE[,MODE]: REASON` of `#@ not-in`.
fn not_in(spec: &str) -> Result<Directive, String> {
    let usage = || {
        format!(
            "usage: #@ not-in MODE[,MODE]: REASON (MODE: {})",
            MODE_NAMES.join(", ")
        )
    };
    let (modes, reason) = spec.split_once(':').ok_or_else(usage)?;
    let modes: Vec<String> = modes.split(',').map(|m| m.trim().to_string()).collect();
    let reason = reason.trim().to_string();
    if reason.is_empty() || modes.iter().any(|m| !MODE_NAMES.contains(&m.as_str())) {
        return Err(usage());
    }
    Ok(Directive::NotIn { modes, reason })
}

/// Shell-like word splitting; see the module documentation.
pub(crate) fn split_words(s: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(e @ ('"' | '\\')) => cur.push(e),
                            Some(e) => {
                                cur.push('\\');
                                cur.push(e);
                            }
                            None => return Err("unterminated double quote".into()),
                        },
                        Some(c) => cur.push(c),
                        None => return Err("unterminated double quote".into()),
                    }
                }
            }
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => cur.push(c),
                        None => return Err("unterminated single quote".into()),
                    }
                }
            }
            '\\' => {
                in_word = true;
                match chars.next() {
                    Some(e) => cur.push(e),
                    None => return Err("trailing backslash".into()),
                }
            }
            c => {
                in_word = true;
                cur.push(c);
            }
        }
    }
    if in_word {
        words.push(cur);
    }
    Ok(words)
}

/// Replaces `${name}` by the macro's value; unknown macros are an error.
pub(crate) fn expand(arg: &str, macros: &[(String, String)]) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = arg;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after
            .find('}')
            .ok_or_else(|| format!("unterminated macro in {arg:?}"))?;
        let name = &after[..end];
        let value = macros
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v)
            .ok_or_else(|| format!("unknown macro ${{{name}}} in {arg:?}"))?;
        out.push_str(value);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

pub(crate) fn valid_name(name: &str) -> bool {
    !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}
