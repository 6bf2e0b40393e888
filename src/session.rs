//! What a task has left on the connection it keeps (pinned): an open
//! `MULTI` / `WATCH`, a `SELECT`... A connection serves many tasks one
//! after another (a worker thread's requests in private mode, every worker
//! in shared mode), so state that a command leaves on it must never reach
//! the next task: a `MULTI` would queue the next task's commands, a
//! `SELECT` would make it read another database. What each command does
//! ([`Effect`]) is decided by the command model (`src/commands/`).
use crate::commands::Effect;
use crate::protocol::Reply;

/// What a task has left on the connection it keeps (pinned): an open
/// transaction, or a changed state. The connection stays with the task
/// while [`owns_state`](Self::owns_state).
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
    /// The server holds state of this task's: an open `MULTI`, a
    /// `WATCH`, a changed connection. Its next command needs the
    /// connection it kept, and none may be answered from the near cache
    /// or fill it (a kept value where Redis says `QUEUED`, a fill's
    /// `PTTL` queued into the transaction, a kept value older than the
    /// `WATCH`, whose change `EXEC` would not catch). In
    /// Cluster a `MULTI` is held back until a command picks the node
    /// (`held_reply` in `database/cluster.rs`): owned, while no
    /// connection is kept yet.
    pub(crate) fn owns_state(&self) -> bool {
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
            Effect::Unknown if !refused => self.changed = true,
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
            assert!(s.owns_state() && s.in_multi());
            s.after_reply(Effect::None, &Reply::Status("QUEUED".into()));
            // Queued: nothing ends yet.
            s.after_reply(Effect::Unwatch, &Reply::Status("QUEUED".into()));
            assert!(s.owns_state());
            // EXECABORT is an error reply, and still ends the transaction.
            s.after_reply(end, &error());
            assert!(!s.owns_state() && !s.in_multi(), "{end:?}");
        }
    }

    #[test]
    fn watch_keeps_the_connection_until_unwatch_exec_or_discard() {
        let mut s = Session::default();
        s.after_reply(Effect::Watch, &ok());
        assert!(s.owns_state() && !s.in_multi());
        // EXEC without MULTI is refused and keeps the watch.
        s.after_reply(Effect::Exec, &error());
        assert!(s.owns_state());
        s.after_reply(Effect::Unwatch, &ok());
        assert!(!s.owns_state());

        s.after_reply(Effect::Watch, &ok());
        s.after_reply(Effect::Multi, &ok());
        s.after_reply(Effect::Exec, &Reply::Nil);
        assert!(!s.owns_state(), "EXEC unwatches");
    }

    #[test]
    fn refused_transaction_commands_open_nothing() {
        let mut s = Session::default();
        s.after_reply(Effect::Multi, &error());
        s.after_reply(Effect::Watch, &error());
        assert!(!s.owns_state());
        // WATCH inside MULTI is an error; the DISCARD then ends it all.
        s.after_reply(Effect::Multi, &ok());
        s.after_reply(Effect::Watch, &error());
        s.after_reply(Effect::Discard, &ok());
        assert!(!s.owns_state());
    }

    #[test]
    fn an_unknown_command_keeps_the_connection_unless_refused() {
        let mut s = Session::default();
        s.after_reply(Effect::Unknown, &error());
        assert!(!s.owns_state(), "refused: nothing ran");
        s.after_reply(Effect::Unknown, &ok());
        assert!(s.owns_state());
    }

    #[test]
    fn a_changed_connection_is_kept_to_the_end_but_quit_ends_everything() {
        let mut s = Session::default();
        s.after_reply(Effect::Changes, &ok());
        s.after_reply(Effect::Multi, &ok());
        s.after_reply(Effect::Exec, &Reply::Array(vec![]));
        assert!(s.owns_state() && !s.in_multi());
        s.after_reply(Effect::Quit, &ok());
        assert!(!s.owns_state());
        // RESET ends the transaction, and leaves a changed connection.
        s.after_reply(Effect::Watch, &ok());
        s.after_reply(Effect::Multi, &ok());
        s.after_reply(Effect::Reset, &Reply::Status("RESET".into()));
        assert!(s.owns_state() && !s.in_multi());
        s.after_reply(Effect::Multi, &ok());
        s.after_reply(Effect::Discard, &ok());
        assert!(s.owns_state(), "the watch went with RESET");
    }

    #[test]
    fn a_lost_transaction_refuses_commands_until_it_is_ended() {
        let mut s = Session::default();
        s.after_reply(Effect::Multi, &ok());
        s.lose();
        assert!(!s.owns_state());
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
