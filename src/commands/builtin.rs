//! What no server flag says, built in, in one table ([`RULES`]): which
//! commands change or end the state of their connection, which are
//! refused, where a blocking command's own timeout is, whose keys the key
//! specifications miss, and which go to a master whatever VCL asks. Plus
//! the fallback model, for checks before any connection and for servers
//! that refuse `COMMAND`: a trimmed capture of Redis 7.0.15's `COMMAND`
//! reply (`fallback.resp`, made by `scripts/capture-commands ...
//! --fallback`), read by the same parser as a live reply.
//!
//! Checked against every command and subcommand of Redis 7.0.15's
//! `COMMAND LIST` (240 commands, with subcommands 378): the server flags
//! relied on are `blocking` (BLPOP, BRPOP, BRPOPLPUSH, BLMOVE, BLMPOP,
//! BZPOPMIN, BZPOPMAX, BZMPOP, XREAD, XREADGROUP), `admin` (CONFIG,
//! DEBUG, SHUTDOWN, CLIENT KILL...: never on a shared connection),
//! `pubsub` and `module`; everything about connection state is below, as
//! no flag carries it. `WAIT` (and `WAITAOF`, Redis 7.2+) block without
//! the `blocking` flag. `decide.rs` tests pin the decision of each.
use super::parse::{parse_command_reply, Described};

/// What a command does to its connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Effect {
    /// Nothing that outlives its reply: most commands.
    None,
    /// Transaction commands: see `Session::after_reply`.
    Multi,
    Exec,
    Discard,
    Watch,
    Unwatch,
    /// Changes the connection for later commands (database, user,
    /// protocol, name...): the task keeps it to its end, then it is closed.
    Changes,
    /// Not in any table: a renamed command (`COMMAND` lists the original
    /// name), or any command when the server would not describe its own.
    /// Unless refused (an error reply: nothing ran), it may have changed
    /// the connection, which is kept and closed as for [`Changes`].
    ///
    /// [`Changes`]: Effect::Changes
    Unknown,
    /// `RESET`: ends the transaction, and changes the connection as above.
    Reset,
    /// `QUIT`: the server closes the connection after its reply.
    Quit,
    /// Can never work with one reply per command: refused before sending,
    /// for the reason given.
    Refused(&'static str),
}

/// How a command may hold its connection waiting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Blocking {
    No,
    /// Always blocks, until its own timeout: the argument at `at`
    /// (negative: from the end); `None` when it is not known where it is
    /// (a module's blocking command, one of a newer server).
    Yes {
        timeout_at: Option<isize>,
    },
    /// Blocks only with this keyword, followed by its timeout in ms
    /// (`XREAD ... BLOCK ms`).
    WithKeyword(&'static str),
}

/// Keys the key specifications cannot give (flagged `incomplete` or
/// `unknown` by the server), found as the server's own code finds them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum KeyRule {
    Specs,
    /// `SORT key ... STORE dst`: the destination too.
    Sort,
    /// `MIGRATE host port key|"" db timeout ... KEYS k...`.
    Migrate,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Rule {
    pub(crate) effect: Effect,
    /// `None`: as the server's `blocking` flag says.
    pub(crate) blocking: Option<Blocking>,
    pub(crate) keys: KeyRule,
    /// Sent to a master whatever the `master` argument.
    pub(crate) master: bool,
    /// Runs a script or function, whose error replies are its own: one
    /// saying `LOADING` is not the server's, and is never retried.
    pub(crate) script: bool,
}

const NONE: Rule = Rule {
    effect: Effect::None,
    blocking: None,
    keys: KeyRule::Specs,
    master: false,
    script: false,
};

const fn effect(effect: Effect) -> Rule {
    Rule { effect, ..NONE }
}

const fn blocks(timeout_at: isize) -> Rule {
    Rule {
        blocking: Some(Blocking::Yes {
            timeout_at: Some(timeout_at),
        }),
        ..NONE
    }
}

const fn refused(reason: &'static str) -> Rule {
    effect(Effect::Refused(reason))
}

const PUBSUB: &str =
    "Pub/Sub needs a connection that waits for messages; each command here waits for one reply";
const REPLICATION: &str = "it turns the connection into a replication stream";

/// The built-in knowledge, by upper-case name (`PARENT|SUB` for a
/// subcommand). A subcommand not listed takes its parent's rule: so every
/// `CLIENT` subcommand changes the connection unless listed here as
/// harmless, including those of servers newer than this table
/// (`CLIENT CAPA`, `CLIENT SETINFO`...).
pub(crate) const RULES: &[(&str, Rule)] = &[
    ("MULTI", effect(Effect::Multi)),
    ("EXEC", effect(Effect::Exec)),
    ("DISCARD", effect(Effect::Discard)),
    ("WATCH", effect(Effect::Watch)),
    ("UNWATCH", effect(Effect::Unwatch)),
    ("RESET", effect(Effect::Reset)),
    ("QUIT", effect(Effect::Quit)),
    ("SELECT", effect(Effect::Changes)),
    ("AUTH", effect(Effect::Changes)),
    ("HELLO", effect(Effect::Changes)),
    ("READONLY", effect(Effect::Changes)),
    ("READWRITE", effect(Effect::Changes)),
    // SETNAME, SETINFO, TRACKING, CACHING, NO-EVICT, NO-TOUCH, CAPA...
    ("CLIENT", effect(Effect::Changes)),
    ("CLIENT|GETNAME", NONE),
    ("CLIENT|GETREDIR", NONE),
    ("CLIENT|HELP", NONE),
    ("CLIENT|ID", NONE),
    ("CLIENT|INFO", NONE),
    ("CLIENT|LIST", NONE),
    ("CLIENT|TRACKINGINFO", NONE),
    // Server-wide, or other clients': nothing left on this connection.
    // (A KILL of this very connection closes it after the reply: found
    // closed before its next use, as any connection the server drops.)
    ("CLIENT|KILL", NONE),
    ("CLIENT|PAUSE", NONE),
    ("CLIENT|UNPAUSE", NONE),
    ("CLIENT|UNBLOCK", NONE),
    // OFF and SKIP leave the worker waiting for a reply that never comes;
    // ON is what every connection here already does.
    (
        "CLIENT|REPLY",
        refused("replies cannot be turned off: each command waits for its reply"),
    ),
    ("SUBSCRIBE", refused(PUBSUB)),
    ("PSUBSCRIBE", refused(PUBSUB)),
    ("SSUBSCRIBE", refused(PUBSUB)),
    // With RESP3 their reply is a push, which is not a reply to a command:
    // the worker would wait for ever.
    ("UNSUBSCRIBE", refused(PUBSUB)),
    ("PUNSUBSCRIBE", refused(PUBSUB)),
    ("SUNSUBSCRIBE", refused(PUBSUB)),
    (
        "MONITOR",
        refused("it streams every command the server runs; each command here waits for one reply"),
    ),
    ("SYNC", refused(REPLICATION)),
    ("PSYNC", refused(REPLICATION)),
    // A server never replies to it from a normal client.
    ("REPLCONF", refused(REPLICATION)),
    (
        "SCRIPT|DEBUG",
        refused("script debugging is an interactive session on its connection"),
    ),
    (
        "ASKING",
        refused("ASKING applies to the next command on its connection, which is not known here; cluster redirections are followed by the module"),
    ),
    ("BLPOP", blocks(-1)),
    ("BRPOP", blocks(-1)),
    ("BRPOPLPUSH", blocks(-1)),
    ("BLMOVE", blocks(-1)),
    ("BZPOPMIN", blocks(-1)),
    ("BZPOPMAX", blocks(-1)),
    ("BLMPOP", blocks(1)),
    ("BZMPOP", blocks(1)),
    // Not flagged `blocking` by the server, and block as long.
    ("WAIT", blocks(-1)),
    ("WAITAOF", blocks(-1)),
    (
        "XREAD",
        Rule {
            blocking: Some(Blocking::WithKeyword("BLOCK")),
            ..NONE
        },
    ),
    (
        "XREADGROUP",
        Rule {
            blocking: Some(Blocking::WithKeyword("BLOCK")),
            ..NONE
        },
    ),
    (
        "SORT",
        Rule {
            keys: KeyRule::Sort,
            ..NONE
        },
    ),
    (
        "MIGRATE",
        Rule {
            keys: KeyRule::Migrate,
            ..NONE
        },
    ),
    // Scripts and functions may write: a replica would redirect every one
    // (the C VMOD forces master=true for EVAL / EVALSHA; FCALL is no
    // different). Their `_RO` forms follow the `master` argument.
    (
        "EVAL",
        Rule {
            master: true,
            script: true,
            ..NONE
        },
    ),
    (
        "EVALSHA",
        Rule {
            master: true,
            script: true,
            ..NONE
        },
    ),
    (
        "FCALL",
        Rule {
            master: true,
            script: true,
            ..NONE
        },
    ),
    (
        "EVAL_RO",
        Rule {
            script: true,
            ..NONE
        },
    ),
    (
        "EVALSHA_RO",
        Rule {
            script: true,
            ..NONE
        },
    ),
    (
        "FCALL_RO",
        Rule {
            script: true,
            ..NONE
        },
    ),
];

/// The rule of `name` (`PARENT|SUB` for a subcommand), if listed.
pub(crate) fn rule(name: &[u8]) -> Option<Rule> {
    RULES
        .iter()
        .find(|(n, _)| n.as_bytes().eq_ignore_ascii_case(name))
        .map(|(_, rule)| *rule)
}

/// The fallback's commands, read from the committed capture.
pub(crate) fn fallback() -> Vec<Described> {
    const FALLBACK: &[u8] = include_bytes!("fallback.resp");
    let reply = crate::protocol::resp::build(FALLBACK).expect("fallback.resp is valid RESP");
    parse_command_reply(&reply).expect("fallback.resp is a COMMAND reply")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fallback_reads_as_redis_70_minus_what_is_not_read() {
        let mut fallback = fallback();
        let mut full = super::super::parse::tests::read(super::super::parse::tests::REDIS_70_RESP2);
        // Sorted at every level: a server lists subcommands in its own
        // (hash table) order, which differs from one run to the next.
        fn sorted(mut list: Vec<Described>) -> Vec<Described> {
            for d in &mut list {
                d.subcommands = sorted(std::mem::take(&mut d.subcommands));
            }
            list.sort_by(|a, b| a.name.cmp(&b.name));
            list
        }
        fallback = sorted(fallback);
        full = sorted(full);
        assert_eq!(fallback, full);
    }

    #[test]
    fn rules_are_upper_case_and_listed_once() {
        for (i, (name, _)) in RULES.iter().enumerate() {
            assert_eq!(name.to_ascii_uppercase(), *name);
            assert!(
                RULES[..i].iter().all(|(other, _)| other != name),
                "{name} twice"
            );
        }
    }
}
