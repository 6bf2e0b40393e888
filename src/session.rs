//! What a command does to the state of the connection it runs on, and the
//! transaction (`MULTI` / `WATCH`) a task has open on its connection.
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
    /// Transaction commands: see [`Transaction::after_reply`].
    Multi,
    Exec,
    Discard,
    Watch,
    Unwatch,
    /// Changes the connection for later commands (database, user,
    /// protocol, name...): it is closed when the task releases it.
    Changes,
    /// `RESET`: changes the connection and ends its transaction.
    Reset,
    /// Can never work with one reply per command: refused before sending,
    /// for the reason given.
    Refused(&'static str),
}

const PUBSUB: &str =
    "Pub/Sub needs a connection that waits for messages; each command here waits for one reply";

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
    // The server closes the connection after its reply.
    ("QUIT", "", Effect::Changes),
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
    (
        "SYNC",
        "",
        Effect::Refused("it turns the connection into a replication stream"),
    ),
    (
        "PSYNC",
        "",
        Effect::Refused("it turns the connection into a replication stream"),
    ),
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

/// Where a task's transaction stands on the connection it pinned. The
/// connection stays with the task while [`is_open`](Self::is_open).
#[derive(Debug, Default)]
pub(crate) struct Transaction {
    /// After `MULTI`: commands are queued until `EXEC` / `DISCARD`.
    multi: bool,
    /// After `WATCH`: keys watched until `EXEC`, `DISCARD` or `UNWATCH`.
    watch: bool,
    /// The pinned connection failed while the transaction was open.
    lost: bool,
}

impl Transaction {
    /// The task needs its pinned connection for the next command.
    pub(crate) fn is_open(&self) -> bool {
        self.multi || self.watch
    }

    /// Commands are being queued: an `EVAL` must go out as `EVAL`, since
    /// the `NOSCRIPT` of an `EVALSHA` would only come with `EXEC`.
    pub(crate) fn in_multi(&self) -> bool {
        self.multi
    }

    /// The pinned connection failed: what was queued or watched is gone.
    pub(crate) fn lose(&mut self) {
        *self = Transaction {
            lost: true,
            ..Transaction::default()
        };
    }

    /// Whether a command may be sent. After a [`lose`](Self::lose), the
    /// commands the task meant for its transaction would run outside it
    /// (and an `EXEC` after a lost `WATCH` would succeed unchecked), so
    /// every command fails until the task ends its transaction (`EXEC`,
    /// `DISCARD`, `UNWATCH`, `RESET`: these fail too, and clear it).
    pub(crate) fn admit(&mut self, effect: Effect) -> Result<(), Lost> {
        if !self.lost {
            return Ok(());
        }
        if matches!(
            effect,
            Effect::Exec | Effect::Discard | Effect::Unwatch | Effect::Reset
        ) {
            self.lost = false;
        }
        Err(Lost)
    }

    /// Follows the server's state after `reply` to a command of `effect`
    /// (as Redis 7 does it: an error reply changes nothing, except that
    /// `EXEC` ends a transaction whatever it returns).
    pub(crate) fn after_reply(&mut self, effect: Effect, reply: &Reply) {
        let refused = matches!(reply, Reply::Error(_));
        match effect {
            Effect::Multi if !refused => self.multi = true,
            // Refused inside MULTI; queued ones are not commands yet.
            Effect::Watch if !refused && !self.multi => self.watch = true,
            Effect::Exec | Effect::Discard if self.multi => {
                self.multi = false;
                self.watch = false;
            }
            // Inside MULTI, UNWATCH is only queued.
            Effect::Unwatch if !self.multi => self.watch = false,
            Effect::Reset => {
                self.multi = false;
                self.watch = false;
            }
            _ => {}
        }
    }
}

/// [`Transaction::admit`] refused a command.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Lost;

#[cfg(test)]
mod tests {
    use super::*;

    fn effect_of(args: &[&str]) -> Effect {
        let mut command = Command::new(args[0].as_bytes());
        for arg in &args[1..] {
            command.push(arg.as_bytes());
        }
        effect(&command)
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
    fn multi_opens_until_exec_or_discard() {
        for end in [Effect::Exec, Effect::Discard] {
            let mut t = Transaction::default();
            t.after_reply(Effect::Multi, &ok());
            assert!(t.is_open() && t.in_multi());
            t.after_reply(Effect::None, &Reply::Status("QUEUED".into()));
            // Queued: nothing ends yet.
            t.after_reply(Effect::Unwatch, &Reply::Status("QUEUED".into()));
            assert!(t.is_open());
            // EXECABORT is an error reply, and still ends the transaction.
            t.after_reply(end, &error());
            assert!(!t.is_open() && !t.in_multi(), "{end:?}");
        }
    }

    #[test]
    fn watch_opens_until_unwatch_exec_or_discard() {
        let mut t = Transaction::default();
        t.after_reply(Effect::Watch, &ok());
        assert!(t.is_open() && !t.in_multi());
        // EXEC without MULTI is refused and keeps the watch.
        t.after_reply(Effect::Exec, &error());
        assert!(t.is_open());
        t.after_reply(Effect::Unwatch, &ok());
        assert!(!t.is_open());

        t.after_reply(Effect::Watch, &ok());
        t.after_reply(Effect::Multi, &ok());
        t.after_reply(Effect::Exec, &Reply::Nil);
        assert!(!t.is_open(), "EXEC unwatches");

        t.after_reply(Effect::Watch, &ok());
        t.after_reply(Effect::Reset, &Reply::Status("RESET".into()));
        assert!(!t.is_open());
    }

    #[test]
    fn refused_commands_open_nothing() {
        let mut t = Transaction::default();
        t.after_reply(Effect::Multi, &error());
        t.after_reply(Effect::Watch, &error());
        assert!(!t.is_open());
        // WATCH inside MULTI is an error; the DISCARD then ends it all.
        t.after_reply(Effect::Multi, &ok());
        t.after_reply(Effect::Watch, &error());
        t.after_reply(Effect::Discard, &ok());
        assert!(!t.is_open());
    }

    #[test]
    fn a_lost_transaction_refuses_commands_until_it_is_ended() {
        let mut t = Transaction::default();
        t.after_reply(Effect::Multi, &ok());
        t.lose();
        assert!(!t.is_open());
        assert_eq!(t.admit(Effect::None), Err(Lost));
        assert_eq!(t.admit(Effect::Multi), Err(Lost));
        assert_eq!(t.admit(Effect::Exec), Err(Lost), "EXEC fails too");
        assert_eq!(t.admit(Effect::None), Ok(()), "and ended it");
        for end in [Effect::Discard, Effect::Unwatch, Effect::Reset] {
            t.lose();
            assert_eq!(t.admit(end), Err(Lost));
            assert_eq!(t.admit(Effect::None), Ok(()));
        }
    }
}
