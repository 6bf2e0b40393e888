//! The decisions about one command, all read from the model: what it does
//! to its connection ([`Effect`]), whether it may share a multiplexed
//! connection, whether it may wait for ever, and whether it must go to a
//! master. Keys and slots are in `keys.rs`.
use super::builtin::{Blocking, Effect};
use super::model::Found;
use crate::protocol::Command;

/// Why a command is refused when nothing bounds its wait.
pub(crate) const WAITS_FOREVER: &str = "it may block for ever (a blocking command with no timeout \
     of its own, or one whose timeout is not known), and this database has no command_timeout: \
     give the command a timeout, or set command_timeout or .timeout()";

/// A blocking timeout argument that means "for ever": 0 (as a number:
/// `0`, `0.0`...). Anything else the server either honours or refuses.
/// Whether a blocking command's timeout argument lets it wait for ever:
/// Redis takes 0 as "no timeout", and rounds a timeout in seconds up to
/// whole milliseconds (`ceill`), so a negative one above -1 ms becomes 0
/// too. Anything that is not a positive finite number is taken as for
/// ever (the server refuses the rest as not a number or negative).
fn unbounded(arg: Option<&[u8]>) -> bool {
    let Some(arg) = arg else {
        // No timeout argument at all: Redis refuses the arity.
        return false;
    };
    !std::str::from_utf8(arg)
        .ok()
        .and_then(|text| text.parse::<f64>().ok())
        .is_some_and(|timeout| timeout.is_finite() && timeout > 0.0)
}

impl Found<'_> {
    /// Not in the model: no entry, or a container whose subcommand is
    /// missing or unknown.
    pub(crate) fn unknown(&self) -> bool {
        self.entry.is_none() || self.container_only
    }

    /// What the command does to its connection: [`Effect::Unknown`] for
    /// a command not in the model; a container without a known
    /// subcommand has its own rule (every unknown `CLIENT` subcommand
    /// changes the connection).
    pub(crate) fn effect(&self) -> Effect {
        self.entry.map_or(Effect::Unknown, |entry| entry.effect)
    }

    /// Whether `command` may go on a multiplexed connection ([ext]
    /// `pipelining=true`): see `model::may_share`.
    pub(crate) fn shares(&self, command: &Command) -> bool {
        let Some(entry) = self.entry.filter(|_| !self.container_only) else {
            return false;
        };
        entry.shares
            && match entry.blocking {
                Blocking::WithKeyword(keyword) => !command
                    .args()
                    .any(|arg| arg.eq_ignore_ascii_case(keyword.as_bytes())),
                _ => true,
            }
    }

    /// Whether `command` may never reply when nothing bounds its wait: a
    /// blocking command whose own timeout is 0, or whose timeout the model
    /// cannot find (a module's blocking command). Refused then, with
    /// [`WAITS_FOREVER`], as no worker may wait past a deadline and
    /// there is none. (`REPLCONF`, which never replies, is refused anyway.)
    pub(crate) fn waits_forever(&self, command: &Command) -> bool {
        let Some(entry) = self.entry.filter(|_| !self.container_only) else {
            return false;
        };
        match entry.blocking {
            Blocking::No => false,
            Blocking::Yes { timeout_at: None } => true,
            Blocking::Yes {
                timeout_at: Some(at),
            } => {
                let index = if at < 0 {
                    command.arg_count().checked_sub(at.unsigned_abs())
                } else {
                    Some(at.unsigned_abs())
                };
                // Index 0 is the name: too few arguments, which Redis refuses.
                unbounded(
                    index
                        .filter(|&index| index > 0)
                        .and_then(|index| command.arg(index)),
                )
            }
            Blocking::WithKeyword(keyword) => {
                // Options come before `STREAMS` (what follows are keys and
                // ids), and Redis takes the last `BLOCK` given.
                let mut last = None;
                let mut args = command.args();
                while let Some(arg) = args.next() {
                    if arg.eq_ignore_ascii_case(b"STREAMS") {
                        break;
                    }
                    if arg.eq_ignore_ascii_case(keyword.as_bytes()) {
                        last = Some(args.next());
                    }
                }
                last.is_some_and(unbounded)
            }
        }
    }

    /// Sent to a master whatever the `master` argument (`EVAL`,
    /// `EVALSHA`, `FCALL`).
    pub(crate) fn master_only(&self) -> bool {
        self.entry.is_some_and(|entry| entry.master)
    }

    /// Runs a script or function (`EVAL*`, `FCALL*`): its error replies
    /// may be the script's own.
    pub(crate) fn runs_script(&self) -> bool {
        self.entry.is_some_and(|entry| entry.script)
    }
}
