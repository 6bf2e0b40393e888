//! The command model: every command a server knows (from its `COMMAND`
//! reply, or the built-in fallback), each with the built-in rules
//! (`builtin.rs`) folded in and its decisions worked out once, when the
//! model is built. Looking a command up is a binary search on its
//! upper-case name (compared in place: no copy), then on its subcommand
//! for a container (`CLIENT`, `CONFIG`...).
use std::cmp::Ordering;

use super::builtin::{self, Blocking, Effect, KeyRule, Rule};
use super::parse::{flag, Described, KeySpec};
use crate::protocol::Command;

/// One command or subcommand.
#[derive(Debug, PartialEq)]
pub(crate) struct Entry {
    /// Upper case; a subcommand's own part (`SETNAME`).
    pub(crate) name: Box<[u8]>,
    /// In the server's table (else only a built-in rule names it).
    pub(crate) known: bool,
    pub(crate) flags: u16,
    pub(crate) key_specs: Box<[KeySpec]>,
    /// Sorted by name.
    pub(crate) subcommands: Box<[Entry]>,
    pub(crate) effect: Effect,
    pub(crate) blocking: Blocking,
    pub(crate) keys: KeyRule,
    pub(crate) master: bool,
    /// Runs a script (see [`super::builtin::Rule::script`]).
    pub(crate) script: bool,
    /// May go on a multiplexed connection (for [`Blocking::WithKeyword`]:
    /// when the keyword is absent). See `decide.rs`.
    pub(crate) shares: bool,
    /// Its reply may be kept in an [ext] near cache: see [`may_cache`].
    pub(crate) cacheable: bool,
}

/// The commands of one server's table.
#[derive(Debug, PartialEq)]
pub(crate) struct Model {
    /// What the model was read from (`redis 7.0.15`, `fallback`...).
    pub(crate) source: String,
    /// Sorted by name.
    commands: Box<[Entry]>,
}

/// What a lookup found.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Found<'m> {
    /// The command, or its subcommand; `None`: unknown to the model.
    pub(crate) entry: Option<&'m Entry>,
    /// `entry` is a container whose subcommand is missing or unknown.
    pub(crate) container_only: bool,
}

/// `stored` (upper case) against `given` (any case), as upper case.
fn compare(stored: &[u8], given: &[u8]) -> Ordering {
    let common = stored.len().min(given.len());
    for (s, g) in stored[..common].iter().zip(&given[..common]) {
        match s.cmp(&g.to_ascii_uppercase()) {
            Ordering::Equal => {}
            other => return other,
        }
    }
    stored.len().cmp(&given.len())
}

fn search<'m>(entries: &'m [Entry], name: &[u8]) -> Option<&'m Entry> {
    entries
        .binary_search_by(|entry| compare(&entry.name, name))
        .ok()
        .map(|at| &entries[at])
}

impl Model {
    /// The model of a server's `described` commands, with the built-in
    /// rules (a rule for a command the server does not list still
    /// applies: `REPLCONF` is refused whatever the table says).
    pub(crate) fn build(source: String, described: Vec<Described>) -> Model {
        let mut commands: Vec<Entry> = described
            .into_iter()
            .map(|d| entry(d, builtin::rule, None))
            .collect();
        for (name, _) in builtin::RULES {
            let (top, sub) = match name.split_once('|') {
                Some((top, sub)) => (top, Some(sub)),
                None => (*name, None),
            };
            let at = match commands.iter().position(|e| &*e.name == top.as_bytes()) {
                Some(at) => at,
                None => {
                    commands.push(unknown(top.as_bytes(), None));
                    commands.len() - 1
                }
            };
            if let Some(sub) = sub {
                let parent = &mut commands[at];
                if !parent
                    .subcommands
                    .iter()
                    .any(|e| &*e.name == sub.as_bytes())
                {
                    let parent_rule = builtin::rule(top.as_bytes());
                    let mut subs = std::mem::take(&mut parent.subcommands).into_vec();
                    let mut added = unknown(sub.as_bytes(), Some(top.as_bytes()));
                    if added.effect == Effect::None {
                        added.effect = parent_rule.map_or(Effect::None, |r| r.effect);
                    }
                    subs.push(added);
                    subs.sort_by(|a, b| a.name.cmp(&b.name));
                    parent.subcommands = subs.into();
                }
            }
        }
        commands.sort_by(|a, b| a.name.cmp(&b.name));
        commands.dedup_by(|a, b| a.name == b.name);
        Model {
            source,
            commands: commands.into(),
        }
    }

    /// The model used before a server's own is read.
    pub(crate) fn fallback() -> Model {
        Model::build("built-in (Redis 7.0.15)".into(), builtin::fallback())
    }

    /// The entry of `command`: one binary search on its name, one more on
    /// its first argument for a container. No allocation.
    pub(crate) fn find(&self, command: &Command) -> Found<'_> {
        let Some(top) = search(&self.commands, command.name()) else {
            return Found {
                entry: None,
                container_only: false,
            };
        };
        if top.subcommands.is_empty() {
            return Found {
                entry: Some(top),
                container_only: false,
            };
        }
        match command
            .first_arg()
            .and_then(|sub| search(&top.subcommands, sub))
        {
            Some(sub) => Found {
                entry: Some(sub),
                container_only: false,
            },
            None => Found {
                entry: Some(top),
                container_only: true,
            },
        }
    }

    /// Every command and subcommand (`PARENT|SUB`), for tests and sweeps.
    #[cfg(test)]
    pub(crate) fn names(&self) -> Vec<String> {
        let mut names = Vec::new();
        for top in self.commands.iter() {
            let name = String::from_utf8_lossy(&top.name).into_owned();
            for sub in top.subcommands.iter() {
                names.push(format!("{name}|{}", String::from_utf8_lossy(&sub.name)));
            }
            names.push(name);
        }
        names
    }
}

/// An entry for a name only a built-in rule knows.
fn unknown(name: &[u8], parent: Option<&[u8]>) -> Entry {
    let full = match parent {
        Some(parent) => [parent, b"|", name].concat(),
        None => name.to_vec(),
    };
    let rule = builtin::rule(&full).unwrap_or(RULE_NONE);
    let mut entry = with_rule(
        &full,
        Described {
            name: name.into(),
            arity: 0,
            flags: 0,
            key_specs: Vec::new(),
            subcommands: Vec::new(),
        },
        rule,
        Vec::new(),
    );
    entry.known = false;
    entry.shares = false;
    entry
}

const RULE_NONE: Rule = Rule {
    effect: Effect::None,
    blocking: None,
    keys: KeyRule::Specs,
    master: false,
    script: false,
};

/// `described`, with its rule: its own, else its parent's.
fn entry(
    mut described: Described,
    rule_of: fn(&[u8]) -> Option<Rule>,
    parent: Option<(&[u8], Rule)>,
) -> Entry {
    let full = match parent {
        Some((parent, _)) => [parent, b"|", &described.name].concat(),
        None => described.name.to_vec(),
    };
    let rule = rule_of(&full)
        .or(parent.map(|(_, rule)| rule))
        .unwrap_or(RULE_NONE);
    let mut subcommands: Vec<Entry> = std::mem::take(&mut described.subcommands)
        .into_iter()
        .map(|sub| entry(sub, rule_of, Some((&full, rule))))
        .collect();
    subcommands.sort_by(|a, b| a.name.cmp(&b.name));
    subcommands.dedup_by(|a, b| a.name == b.name);
    with_rule(&full, described, rule, subcommands)
}

/// The entry of `described` (`full`: its name, `PARENT|SUB` for a
/// subcommand) under `rule`, its decisions worked out.
fn with_rule(full: &[u8], described: Described, rule: Rule, subcommands: Vec<Entry>) -> Entry {
    let blocking = rule
        .blocking
        .unwrap_or(if described.flags & flag::BLOCKING != 0 {
            Blocking::Yes { timeout_at: None }
        } else {
            Blocking::No
        });
    let mut entry = Entry {
        name: described.name,
        known: true,
        flags: described.flags,
        key_specs: described.key_specs.into(),
        subcommands: subcommands.into(),
        effect: rule.effect,
        blocking,
        keys: rule.keys,
        master: rule.master,
        script: rule.script,
        shares: false,
        cacheable: false,
    };
    entry.shares = may_share(full, &entry);
    entry.cacheable = may_cache(full, &entry);
    entry
}

/// Commands that read and are not `nondeterministic_output`, yet whose
/// reply changes with no write (time, access statistics), or that have
/// an effect of their own (`TOUCH`). Applied whatever the server's tips
/// say: Redis 6 gives none.
const NEVER_CACHED: &[&str] = &[
    "TTL",
    "PTTL",
    "EXPIRETIME",
    "PEXPIRETIME",
    "TOUCH",
    "OBJECT",
    "MEMORY",
    "SRANDMEMBER",
    "HRANDFIELD",
    "ZRANDMEMBER",
    "RANDOMKEY",
    "DUMP",
    "HTTL",
    "HPTTL",
    "HEXPIRETIME",
    "HPEXPIRETIME",
    // Consumer-group state that XREADGROUP, XACK and XCLAIM change with
    // no invalidation of the stream's key.
    "XINFO",
    "XPENDING",
];

/// Whether the reply of `entry` (named `full`) may be served again from a
/// near cache until Redis says one of its keys changed: a `readonly`
/// command known to the server, with keys its key specifications all
/// find (so the invalidations name them), deterministic, not blocking,
/// not a script, not Pub/Sub, not `admin`, not a module's, no effect on
/// the connection, and not a container. Decided per command in
/// `decide.rs` (exactly one key).
fn may_cache(full: &[u8], entry: &Entry) -> bool {
    let top = match full.iter().position(|&b| b == b'|') {
        Some(bar) => &full[..bar],
        None => full,
    };
    let refused = flag::WRITE
        | flag::ADMIN
        | flag::PUBSUB
        | flag::BLOCKING
        | flag::MODULE
        | flag::MOVABLEKEYS
        | flag::NONDETERMINISTIC;
    entry.known
        && entry.flags & flag::READONLY != 0
        && entry.flags & refused == 0
        && entry.effect == Effect::None
        && entry.blocking == Blocking::No
        && entry.keys == KeyRule::Specs
        && !entry.script
        && !entry.master
        && entry.subcommands.is_empty()
        && !entry.key_specs.is_empty()
        && entry.key_specs.iter().all(|spec| !spec.incomplete)
        && !NEVER_CACHED
            .iter()
            .any(|name| top.eq_ignore_ascii_case(name.as_bytes()))
}

/// Whether `entry` (named `full`, `PARENT|SUB` for a subcommand) may go
/// on a connection other workers' commands share at once: only when the
/// model knows it replies exactly once and leaves nothing on the
/// connection. Known to the server, no effect, not blocking (an `XREAD`
/// without `BLOCK` is checked per command), not `admin` (`DEBUG SLEEP`,
/// `SHUTDOWN`, `CLIENT PAUSE`...), not a module's (the model cannot tell
/// how it replies), not Pub/Sub but for `PUBLISH`, `SPUBLISH` and the
/// `PUBSUB` introspection subcommands, and not a container without its
/// subcommand. Unknown or doubtful: an ordinary connection.
fn may_share(full: &[u8], entry: &Entry) -> bool {
    let pubsub_ok = entry.flags & flag::PUBSUB == 0
        || full.eq_ignore_ascii_case(b"PUBLISH")
        || full.eq_ignore_ascii_case(b"SPUBLISH")
        || full.starts_with(b"PUBSUB|");
    entry.known
        && entry.effect == Effect::None
        && entry.flags & (flag::ADMIN | flag::MODULE) == 0
        && pubsub_ok
        && matches!(entry.blocking, Blocking::No | Blocking::WithKeyword(_))
        && entry.subcommands.is_empty()
}
