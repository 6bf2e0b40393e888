//! What a command does to the state of the connection it runs on, and
//! what a task has left on the connection it keeps (an open `MULTI` /
//! `WATCH`, a `SELECT`...).
//!
//! A connection serves many tasks one after another (a worker thread's
//! requests in private mode, every worker in shared mode), so state that a
//! command leaves on it must never reach the next task: a `MULTI` would
//! queue the next task's commands, a `SELECT` would make it read another
//! database, a `SUBSCRIBE` would make every later reply a message. The
//! decision is made by command name (and `CLIENT` subcommand), case-
//! insensitively, from [`TABLE`]: the one place to look when Redis adds a
//! command.
use crate::command::Command;
use crate::reply::Reply;

/// What a command does to its connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Effect {
    /// Nothing that outlives its reply: most commands.
    None,
    /// Transaction commands: see [`Session::after_reply`].
    Multi,
    Exec,
    Discard,
    Watch,
    Unwatch,
    /// Changes the connection for later commands (database, user,
    /// protocol, name...): the task keeps it to its end, then it is closed.
    Changes,
    /// `RESET`: ends the transaction, and changes the connection as above.
    Reset,
    /// `QUIT`: the server closes the connection after its reply.
    Quit,
    /// Can never work with one reply per command: refused before sending,
    /// for the reason given.
    Refused(&'static str),
}

const PUBSUB: &str =
    "Pub/Sub needs a connection that waits for messages; each command here waits for one reply";
const REPLICATION: &str = "it turns the connection into a replication stream";

/// Every command that does more than send one reply to one request:
/// (name, `CLIENT` subcommand or "", effect). Anything else is
/// [`Effect::None`].
const TABLE: &[(&str, &str, Effect)] = &[
    ("MULTI", "", Effect::Multi),
    ("EXEC", "", Effect::Exec),
    ("DISCARD", "", Effect::Discard),
    ("WATCH", "", Effect::Watch),
    ("UNWATCH", "", Effect::Unwatch),
    ("RESET", "", Effect::Reset),
    ("SELECT", "", Effect::Changes),
    ("AUTH", "", Effect::Changes),
    ("HELLO", "", Effect::Changes),
    ("QUIT", "", Effect::Quit),
    ("READONLY", "", Effect::Changes),
    ("READWRITE", "", Effect::Changes),
    ("CLIENT", "SETNAME", Effect::Changes),
    ("CLIENT", "SETINFO", Effect::Changes),
    ("CLIENT", "TRACKING", Effect::Changes),
    ("CLIENT", "CACHING", Effect::Changes),
    ("CLIENT", "NO-EVICT", Effect::Changes),
    ("CLIENT", "NO-TOUCH", Effect::Changes),
    // OFF and SKIP leave the worker waiting for a reply that never comes;
    // ON is what every connection here already does.
    (
        "CLIENT",
        "REPLY",
        Effect::Refused("replies cannot be turned off: each command waits for its reply"),
    ),
    ("SUBSCRIBE", "", Effect::Refused(PUBSUB)),
    ("PSUBSCRIBE", "", Effect::Refused(PUBSUB)),
    ("SSUBSCRIBE", "", Effect::Refused(PUBSUB)),
    // With RESP3 their reply is a push, which is not a reply to a command:
    // the worker would wait for ever.
    ("UNSUBSCRIBE", "", Effect::Refused(PUBSUB)),
    ("PUNSUBSCRIBE", "", Effect::Refused(PUBSUB)),
    ("SUNSUBSCRIBE", "", Effect::Refused(PUBSUB)),
    (
        "MONITOR",
        "",
        Effect::Refused(
            "it streams every command the server runs; each command here waits for one reply",
        ),
    ),
    ("SYNC", "", Effect::Refused(REPLICATION)),
    ("PSYNC", "", Effect::Refused(REPLICATION)),
];

/// What `command` does to its connection.
pub(crate) fn effect(command: &Command) -> Effect {
    let name = command.name();
    let sub = command.first_arg().unwrap_or_default();
    TABLE
        .iter()
        .find(|(n, s, _)| {
            name.eq_ignore_ascii_case(n.as_bytes())
                && (s.is_empty() || sub.eq_ignore_ascii_case(s.as_bytes()))
        })
        .map_or(Effect::None, |(_, _, effect)| *effect)
}

/// Commands that block their connection until something happens
/// (`BLPOP`, `WAIT`...). Every `B*` list and sorted-set command is one.
const BLOCKING: &[&str] = &[
    "BLPOP",
    "BRPOP",
    "BRPOPLPUSH",
    "BLMOVE",
    "BLMPOP",
    "BZPOPMIN",
    "BZPOPMAX",
    "BZMPOP",
    "WAIT",
    "WAITAOF",
];

/// Whether `command` may go on a connection that other workers' commands
/// share at once ([ext] `pipelining=true`): it leaves nothing on the
/// connection, and it does not hold the connection (and every command
/// queued behind it) waiting, as `BLPOP` or `XREAD BLOCK` do.
pub(crate) fn may_share_connection(command: &Command) -> bool {
    let name = command.name();
    let blocks = BLOCKING
        .iter()
        .any(|b| name.eq_ignore_ascii_case(b.as_bytes()))
        || ((name.eq_ignore_ascii_case(b"XREAD") || name.eq_ignore_ascii_case(b"XREADGROUP"))
            && command.args().any(|arg| arg.eq_ignore_ascii_case(b"BLOCK")));
    !blocks && effect(command) == Effect::None
}

/// What a task has left on the connection it keeps (pinned): an open
/// transaction, or a changed state. The connection stays with the task
/// while [`keeps_connection`](Self::keeps_connection).
#[derive(Debug, Default)]
pub(crate) struct Session {
    /// After `MULTI`: commands are queued until `EXEC` / `DISCARD`.
    multi: bool,
    /// After `WATCH`: keys watched until `EXEC`, `DISCARD` or `UNWATCH`.
    watch: bool,
    /// After `SELECT`, `AUTH`, `CLIENT SETNAME`...: the task's later
    /// commands expect that state, other tasks must not get it.
    changed: bool,
    /// The kept connection failed.
    lost: Option<Lost>,
}

/// What a task lost with the connection it kept; its later commands are
/// not sent (see [`Session::admit`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Lost {
    #[error(
        "the connection of this task's MULTI / WATCH failed, so its transaction is lost \
         (until EXEC, DISCARD, UNWATCH or RESET, which are not sent either)"
    )]
    Transaction,
    #[error(
        "the connection whose state this task changed (SELECT, AUTH, HELLO, CLIENT...) \
         failed; commands would run without that state (until RESET, which is not sent either)"
    )]
    State,
}

impl Session {
    /// The task needs its pinned connection for its next command.
    pub(crate) fn keeps_connection(&self) -> bool {
        self.multi || self.watch || self.changed
    }

    /// Commands are being queued: an `EVAL` must go out as `EVAL`, since
    /// the `NOSCRIPT` of an `EVALSHA` would only come with `EXEC`.
    pub(crate) fn in_multi(&self) -> bool {
        self.multi
    }

    /// The kept connection failed: what was queued, watched or set on it
    /// is gone.
    pub(crate) fn lose(&mut self) {
        let lost = if self.changed {
            Lost::State
        } else {
            Lost::Transaction
        };
        *self = Session {
            lost: Some(lost),
            ..Session::default()
        };
    }

    /// Whether a command may be sent. After a [`lose`](Self::lose), the
    /// commands the task meant for its transaction (or its changed
    /// connection) would run without it, and an `EXEC` after a lost
    /// `WATCH` would succeed unchecked: every command fails until the task
    /// ends what it lost (`EXEC`, `DISCARD`, `UNWATCH` a transaction,
    /// `RESET` anything: these fail too, and clear it).
    pub(crate) fn admit(&mut self, effect: Effect) -> Result<(), Lost> {
        let Some(lost) = self.lost else {
            return Ok(());
        };
        let ends = match lost {
            Lost::Transaction => matches!(
                effect,
                Effect::Exec | Effect::Discard | Effect::Unwatch | Effect::Reset
            ),
            Lost::State => effect == Effect::Reset,
        };
        if ends {
            self.lost = None;
        }
        Err(lost)
    }

    /// Follows the server's state after `reply` to a command of `effect`
    /// (as Redis 7 does it: an error reply opens nothing, and `EXEC` ends a
    /// transaction whatever it returns).
    pub(crate) fn after_reply(&mut self, effect: Effect, reply: &Reply) {
        let refused = matches!(reply, Reply::Error(_));
        match effect {
            Effect::Multi if !refused => self.multi = true,
            // Refused inside MULTI.
            Effect::Watch if !refused && !self.multi => self.watch = true,
            Effect::Exec | Effect::Discard if self.multi => {
                self.multi = false;
                self.watch = false;
            }
            // Inside MULTI, UNWATCH is only queued.
            Effect::Unwatch if !self.multi => self.watch = false,
            // Kept whatever the reply: a refused SELECT changed nothing,
            // but keeping the connection to the task's end costs little.
            Effect::Changes => self.changed = true,
            Effect::Reset => {
                *self = Session {
                    changed: true,
                    ..Session::default()
                }
            }
            // The connection is gone with whatever was on it.
            Effect::Quit => *self = Session::default(),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmd(args: &[&str]) -> Command {
        let mut command = Command::new(args[0].as_bytes());
        for arg in &args[1..] {
            command.push(arg.as_bytes());
        }
        command
    }

    fn effect_of(args: &[&str]) -> Effect {
        effect(&cmd(args))
    }

    #[test]
    fn only_commands_that_leave_and_hold_nothing_share_a_connection() {
        let shares = |args: &[&str]| may_share_connection(&cmd(args));
        assert!(shares(&["GET", "k"]));
        assert!(shares(&["EVAL", "return 1", "0"]));
        assert!(shares(&["XREAD", "COUNT", "1", "STREAMS", "s", "0"]));
        assert!(!shares(&["xread", "block", "0", "STREAMS", "s", "$"]));
        assert!(!shares(&[
            "XREADGROUP",
            "GROUP",
            "g",
            "c",
            "BLOCK",
            "10",
            "STREAMS",
            "s",
            ">"
        ]));
        for blocking in ["BLPOP", "brpop", "BLMOVE", "BZPOPMIN", "WAIT"] {
            assert!(!shares(&[blocking, "k", "0"]), "{blocking}");
        }
        for stateful in [
            &["MULTI"][..],
            &["SELECT", "1"],
            &["CLIENT", "SETNAME", "x"],
            &["QUIT"],
        ] {
            assert!(!shares(stateful), "{stateful:?}");
        }
    }

    #[test]
    fn plain_commands_have_no_effect() {
        for args in [
            &["GET", "k"][..],
            &["SET", "k", "v"],
            &["EVAL", "return 1", "0"],
            &["CLIENT", "GETNAME"],
            &["CLIENT", "ID"],
            &["CLIENT"],
            &["PUBLISH", "ch", "m"],
            &["MULTIPLY"],
            &["SELECTED"],
            &[""],
        ] {
            assert_eq!(effect_of(args), Effect::None, "{args:?}");
        }
    }

    #[test]
    fn names_and_subcommands_match_in_any_case() {
        assert_eq!(effect_of(&["multi"]), Effect::Multi);
        assert_eq!(effect_of(&["ExEc"]), Effect::Exec);
        assert_eq!(effect_of(&["select", "5"]), Effect::Changes);
        assert_eq!(effect_of(&["client", "setname", "x"]), Effect::Changes);
        assert_eq!(effect_of(&["Client", "TrAcKiNg", "on"]), Effect::Changes);
        assert_eq!(effect_of(&["reset"]), Effect::Reset);
        assert!(matches!(
            effect_of(&["client", "reply", "off"]),
            Effect::Refused(_)
        ));
        assert!(matches!(
            effect_of(&["CLIENT", "REPLY", "SKIP"]),
            Effect::Refused(_)
        ));
        for name in [
            "subscribe",
            "PSUBSCRIBE",
            "ssubscribe",
            "Unsubscribe",
            "MONITOR",
        ] {
            assert!(
                matches!(effect_of(&[name, "ch"]), Effect::Refused(_)),
                "{name}"
            );
        }
    }

    #[test]
    fn every_table_entry_is_found_by_its_name() {
        for (name, sub, want) in TABLE {
            let mut args = vec![*name];
            if !sub.is_empty() {
                args.push(sub);
            }
            assert_eq!(effect_of(&args), *want, "{args:?}");
        }
    }

    fn ok() -> Reply {
        Reply::Status("OK".into())
    }

    fn error() -> Reply {
        Reply::Error("ERR nope".into())
    }

    #[test]
    fn multi_keeps_the_connection_until_exec_or_discard() {
        for end in [Effect::Exec, Effect::Discard] {
            let mut s = Session::default();
            s.after_reply(Effect::Multi, &ok());
            assert!(s.keeps_connection() && s.in_multi());
            s.after_reply(Effect::None, &Reply::Status("QUEUED".into()));
            // Queued: nothing ends yet.
            s.after_reply(Effect::Unwatch, &Reply::Status("QUEUED".into()));
            assert!(s.keeps_connection());
            // EXECABORT is an error reply, and still ends the transaction.
            s.after_reply(end, &error());
            assert!(!s.keeps_connection() && !s.in_multi(), "{end:?}");
        }
    }

    #[test]
    fn watch_keeps_the_connection_until_unwatch_exec_or_discard() {
        let mut s = Session::default();
        s.after_reply(Effect::Watch, &ok());
        assert!(s.keeps_connection() && !s.in_multi());
        // EXEC without MULTI is refused and keeps the watch.
        s.after_reply(Effect::Exec, &error());
        assert!(s.keeps_connection());
        s.after_reply(Effect::Unwatch, &ok());
        assert!(!s.keeps_connection());

        s.after_reply(Effect::Watch, &ok());
        s.after_reply(Effect::Multi, &ok());
        s.after_reply(Effect::Exec, &Reply::Nil);
        assert!(!s.keeps_connection(), "EXEC unwatches");
    }

    #[test]
    fn refused_transaction_commands_open_nothing() {
        let mut s = Session::default();
        s.after_reply(Effect::Multi, &error());
        s.after_reply(Effect::Watch, &error());
        assert!(!s.keeps_connection());
        // WATCH inside MULTI is an error; the DISCARD then ends it all.
        s.after_reply(Effect::Multi, &ok());
        s.after_reply(Effect::Watch, &error());
        s.after_reply(Effect::Discard, &ok());
        assert!(!s.keeps_connection());
    }

    #[test]
    fn a_changed_connection_is_kept_to_the_end_but_quit_ends_everything() {
        let mut s = Session::default();
        s.after_reply(Effect::Changes, &ok());
        s.after_reply(Effect::Multi, &ok());
        s.after_reply(Effect::Exec, &Reply::Array(vec![]));
        assert!(s.keeps_connection() && !s.in_multi());
        s.after_reply(Effect::Quit, &ok());
        assert!(!s.keeps_connection());
        // RESET ends the transaction, and leaves a changed connection.
        s.after_reply(Effect::Watch, &ok());
        s.after_reply(Effect::Multi, &ok());
        s.after_reply(Effect::Reset, &Reply::Status("RESET".into()));
        assert!(s.keeps_connection() && !s.in_multi());
        s.after_reply(Effect::Multi, &ok());
        s.after_reply(Effect::Discard, &ok());
        assert!(s.keeps_connection(), "the watch went with RESET");
    }

    #[test]
    fn a_lost_transaction_refuses_commands_until_it_is_ended() {
        let mut s = Session::default();
        s.after_reply(Effect::Multi, &ok());
        s.lose();
        assert!(!s.keeps_connection());
        assert_eq!(s.admit(Effect::None), Err(Lost::Transaction));
        assert_eq!(s.admit(Effect::Multi), Err(Lost::Transaction));
        assert_eq!(
            s.admit(Effect::Exec),
            Err(Lost::Transaction),
            "EXEC fails too"
        );
        assert_eq!(s.admit(Effect::None), Ok(()), "and ended it");
        for end in [Effect::Discard, Effect::Unwatch, Effect::Reset] {
            s.after_reply(Effect::Watch, &ok());
            s.lose();
            assert_eq!(s.admit(end), Err(Lost::Transaction));
            assert_eq!(s.admit(Effect::None), Ok(()));
        }
    }

    #[test]
    fn a_lost_changed_connection_refuses_commands_until_reset() {
        let mut s = Session::default();
        s.after_reply(Effect::Changes, &ok());
        s.after_reply(Effect::Multi, &ok());
        s.lose();
        for effect in [Effect::None, Effect::Exec, Effect::Discard, Effect::Reset] {
            assert_eq!(s.admit(effect), Err(Lost::State), "{effect:?}");
        }
        assert_eq!(s.admit(Effect::None), Ok(()));
    }
}
