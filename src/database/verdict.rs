//! What happens after one attempt of a command: the one retry decision
//! of execution, a pure function of what the attempt gave and where the
//! command stands, with no I/O. The executors (`execute.rs`, `cluster.rs`,
//! `pinned.rs`) only carry it out. Model: redis-rs,
//! `cluster_async/request.rs`, `choose_response`.
//!
//! Its rules, one row each in the table of the tests below:
//! - A connection the task keeps is never retried: a failure closes it.
//! - A script's (`EVAL*`, `FCALL*`) error reply is final, but for a
//!   redirection (`MOVED`, `ASK`) and `NOSCRIPT` (`send.rs`): its own
//!   `redis.error_reply('TRYAGAIN ...')` cannot be told from the
//!   server's by its text, and may come after its writes. The C VMOD
//!   runs such a script once.
//! - A failed attempt is retried only for a failure of its own exchange
//!   (connection, I/O, its timeout): not for a reply that broke the
//!   protocol, which the server sent after it ran the command.
//! - Standalone: a failed attempt (connection, I/O, timeout) goes to the
//!   next candidate while retries are left. `TRYAGAIN`, `CLUSTERDOWN` and
//!   `LOADING` replies to other commands say they were not run: the next
//!   candidate too. `READONLY` and `MASTERDOWN` say
//!   roles changed (a failover): every role is asked again, and a
//!   `READONLY` to a master command (not a script's) is sent to the
//!   master found next, the replica passed over. A `ROLE` that says
//!   replica when a master is needed passes the candidate over without
//!   using a retry.
//! - Cluster: a failed attempt is routed again while retries are left,
//!   the slot map read again first (once per command); a refused `MULTI`
//!   is not retried. `MOVED` and `ASK` are followed up to the hop limit,
//!   the map read again when it does not agree. `TRYAGAIN`, `CLUSTERDOWN`
//!   and `LOADING` go to the same node (the slot did not move). In a
//!   transaction, the connection of a redirected or retried command holds
//!   a failed `MULTI`: it is closed.
//! - Anything else is the command's reply.
use crate::cluster::{redirection, Redirection};
use crate::config::Location;
use crate::error::{Error, Retry, ServerError};
use crate::protocol::Reply;
use crate::stats::Counter;

/// What one attempt gave.
pub(super) enum Answer<'a> {
    /// A reply (error replies included).
    Reply(&'a Reply),
    /// Standalone: `ROLE` just said the server is a replica, and a master
    /// is needed.
    NotAMaster,
    /// No reply: connection, I/O or timeout (or a refused `MULTI`).
    Failed(&'a Error),
}

/// Where the command stands when its attempt ends.
pub(super) struct Attempt<'a> {
    pub(super) mode: Mode<'a>,
    /// The server the attempt went to.
    pub(super) server: &'a Location,
    /// Retries used so far.
    pub(super) failed: u32,
    /// Retries allowed.
    pub(super) retries: u32,
    /// The command runs a script or function: its own error replies may
    /// come after it ran (`redis.error_reply('TRYAGAIN ...')`).
    pub(super) runs_script: bool,
    /// `debug=true`: the verdict says why, for the debug line.
    pub(super) debug: bool,
}

pub(super) enum Mode<'a> {
    /// On the connection the task keeps (a transaction, a changed state).
    Pinned,
    Standalone {
        /// Only a master may take it.
        master_only: bool,
    },
    Cluster(Hops<'a>),
}

/// A cluster command's redirections so far.
pub(super) struct Hops<'a> {
    /// A `MULTI` went first on the attempt's connection.
    pub(super) multi: bool,
    /// Redirections followed so far, and the most it may follow.
    pub(super) hops: u32,
    pub(super) max_hops: u32,
    /// The slot map was read again for this command already.
    pub(super) refreshed: bool,
    /// Whether the slot map already says what a redirection says: a
    /// `MOVED` to the slot's master, an `ASK` to a node it names.
    pub(super) map_agrees: &'a dyn Fn(&Redirection) -> bool,
}

/// What the executor does next.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Next {
    /// The reply is the command's: it is settled.
    Done,
    /// The attempt's error is the command's.
    GiveUp,
    /// Again, on the next server: the next candidate of the plan
    /// (standalone), the node routing picks for the retry (cluster).
    Reroute,
    /// Again, on the same node (cluster: the slot did not move).
    SameServer,
    /// Standalone: the server is a replica, passed over from now on; the
    /// next candidate.
    PassOver,
    /// Cluster: to the node the redirection names.
    Follow(Redirection),
    /// Cluster: one redirection too many; `last` is its reply.
    TooManyRedirections { last: String },
}

#[derive(Debug, PartialEq, Eq)]
pub(super) struct Verdict {
    pub(super) next: Next,
    /// Counters this attempt adds (a settled reply is counted by
    /// `settle`): as in the C VMOD, `total` counts each send that got a
    /// reply, `failed` each that got none.
    pub(super) counts: &'static [Counter],
    /// Roles changed (a failover): every `type=auto` server is asked its
    /// role again before its next command.
    pub(super) ask_roles: bool,
    /// Cluster: the slot map is read again before the next attempt.
    pub(super) refresh: bool,
    /// The attempt's connection is closed, not released.
    pub(super) retire: bool,
    /// Why, for `debug=true`.
    pub(super) note: Option<String>,
}

const FAILED: &[Counter] = &[Counter::CommandsFailed];
const FAILED_RETRIED: &[Counter] = &[Counter::CommandsFailed, Counter::CommandsRetried];
const REPLIED_RETRIED: &[Counter] = &[Counter::CommandsTotal, Counter::CommandsRetried];
const MOVED: &[Counter] = &[Counter::CommandsTotal, Counter::ClusterRepliesMoved];
const ASK: &[Counter] = &[Counter::CommandsTotal, Counter::ClusterRepliesAsk];

impl Verdict {
    fn to(next: Next, counts: &'static [Counter]) -> Verdict {
        Verdict {
            next,
            counts,
            ask_roles: false,
            refresh: false,
            retire: false,
            note: None,
        }
    }

    /// Whether the attempt used up a retry.
    pub(super) fn uses_retry(&self) -> bool {
        self.counts.contains(&Counter::CommandsRetried)
    }

    fn noted(mut self, at: &Attempt, why: impl FnOnce() -> String) -> Verdict {
        if at.debug {
            self.note = Some(why());
        }
        self
    }
}

/// The verdict: what happens after an attempt that gave `answer`, standing at `at`.
pub(super) fn decide(answer: &Answer, at: &Attempt) -> Verdict {
    match (&at.mode, answer) {
        (Mode::Pinned, Answer::Failed(_)) => Verdict {
            retire: true,
            ..Verdict::to(Next::GiveUp, FAILED)
        },
        (_, Answer::NotAMaster) => Verdict::to(Next::PassOver, &[]).noted(at, || {
            format!(
                "skipping {}: ROLE says it is a replica, a master is needed",
                at.server
            )
        }),
        (Mode::Pinned, Answer::Reply(_)) => Verdict::to(Next::Done, &[]),
        (Mode::Standalone { master_only }, Answer::Reply(reply)) => {
            standalone_reply(reply, *master_only, at)
        }
        (Mode::Cluster(hops), Answer::Reply(reply)) => cluster_reply(reply, hops, at),
        (Mode::Standalone { .. }, Answer::Failed(err)) => {
            failed(err, at, "; retrying on the next candidate")
        }
        (Mode::Cluster(hops), Answer::Failed(err)) => {
            let mut verdict = match err {
                Error::MultiRefused { .. } => return Verdict::to(Next::GiveUp, FAILED),
                err => failed(err, at, "; retrying"),
            };
            // The node may have left (a failover): where its slots went is
            // learnt before the next attempt, or for the next commands.
            verdict.refresh = !hops.refreshed;
            verdict
        }
    }
}

/// An attempt that got no reply: retried while retries are left, for a
/// failure of its own exchange (its timeout, an I/O error), not for a
/// reply that broke the protocol: the server answered, so it ran the
/// command (and on a pipelined connection, whose replies came out of
/// step, the fault may be another request's).
fn failed(err: &Error, at: &Attempt, retrying: &str) -> Verdict {
    if at.failed >= at.retries || matches!(err, Error::Unsettled { .. }) {
        return Verdict::to(Next::GiveUp, FAILED);
    }
    Verdict::to(Next::Reroute, FAILED_RETRIED).noted(at, || {
        format!("attempt {} failed ({err}){retrying}", at.failed + 1)
    })
}

fn standalone_reply(reply: &Reply, master_only: bool, at: &Attempt) -> Verdict {
    let Reply::Error(text) = reply else {
        return Verdict::to(Next::Done, &[]);
    };
    let kind = ServerError::of(text);
    let retry_left = at.failed < at.retries;
    match kind.retry() {
        Retry::RolesChanged => {
            // A demoted master refused the write (its `FAILOVER` swap,
            // say): not run, so sent to the master found next, within the
            // retry count as `LOADING` (without retries, the error is the
            // reply, as in the C VMOD). Not a script's: its own
            // `redis.error_reply('READONLY ...')` may come after writes.
            let not_run = kind == ServerError::ReadOnly && !at.runs_script;
            let mut verdict = if master_only && retry_left && not_run {
                Verdict::to(Next::PassOver, REPLIED_RETRIED).noted(at, || {
                    format!(
                        "{} replied READONLY; sending to the master found next",
                        at.server
                    )
                })
            } else {
                Verdict::to(Next::Done, &[])
            };
            verdict.ask_roles = true;
            verdict
        }
        Retry::Again if retry_left && !may_have_run(at) => {
            Verdict::to(Next::Reroute, REPLIED_RETRIED).noted(at, || {
                format!(
                    "{} replied {text}; retrying on the next candidate",
                    at.server
                )
            })
        }
        _ => Verdict::to(Next::Done, &[]),
    }
}

fn cluster_reply(reply: &Reply, hops: &Hops, at: &Attempt) -> Verdict {
    let Reply::Error(text) = reply else {
        return Verdict::to(Next::Done, &[]);
    };
    let kind = ServerError::of(text);
    let retry_left = at.failed < at.retries;
    match kind.retry() {
        Retry::Redirect => match redirection(text, at.server.host()) {
            Some(redirection) => follow(redirection, text, hops),
            None => Verdict::to(Next::Done, &[]),
        },
        Retry::Again if retry_left => {
            let verdict = if may_have_run(at) {
                Verdict::to(Next::Done, &[])
            } else {
                Verdict::to(Next::SameServer, REPLIED_RETRIED)
                    .noted(at, || format!("{} replied {text}; retrying", at.server))
            };
            // Its connection holds the MULTI, and a transaction the server
            // marked failed: closed, the next attempt sends MULTI again.
            Verdict {
                retire: hops.multi,
                ..verdict
            }
        }
        _ => Verdict::to(Next::Done, &[]),
    }
}

/// A `MOVED` or `ASK`: followed within the hop limit.
fn follow(redirection: Redirection, text: &str, hops: &Hops) -> Verdict {
    let counts = match redirection {
        Redirection::Moved { .. } => MOVED,
        Redirection::Ask { .. } => ASK,
    };
    if hops.hops >= hops.max_hops {
        // Not in `commands.failed`, as in the C VMOD: every send got a
        // reply.
        let last = text.to_string();
        return Verdict {
            retire: hops.multi,
            ..Verdict::to(Next::TooManyRedirections { last }, counts)
        };
    }
    // A MOVED to where the map already puts the slot (the command was
    // routed by another argument than its key, or a write went to a
    // replica) says nothing new. An ASK to a node the map does not name:
    // a node joined since it was read (else the target stays learnt,
    // bounded, until a discovery drops it).
    let refresh = !hops.refreshed && !(hops.map_agrees)(&redirection);
    Verdict {
        refresh,
        retire: hops.multi,
        ..Verdict::to(Next::Follow(redirection), counts)
    }
}

/// An error reply to a script or function may be the script's own
/// (`redis.error_reply('TRYAGAIN ...')`), sent after it ran: retrying it
/// would run the script again. The server's own `TRYAGAIN`,
/// `CLUSTERDOWN` or `LOADING` comes before anything runs, but its text
/// is the same.
fn may_have_run(at: &Attempt) -> bool {
    at.runs_script
}

#[cfg(test)]
mod tests;
