//! [ext] The near cache on the path of one command (`src/near_cache/`
//! keeps the entries): looked up before any server is chosen, filled
//! from the reply on the connection that read it, and told what our own
//! writes changed.
//!
//! **A fill asks where it read.** The `PTTL` of the keys (and the `HPTTL`
//! of the fields of a hash read, where fields expire on their own) goes
//! on the lease the read came on, before it is released: the same
//! server, not whichever another routing would pick (a lagging replica
//! that has not the key yet would say it has no TTL). Only a task that
//! owns no state on the server fills (see [`Database::near_lookup`]), so
//! that lease carries nothing of the user's: a private or pooled
//! connection carries one request at a time and its reply is read before
//! the next is sent; a multiplexed one matches replies to requests in the
//! order they were written, and a reply that came on another connection
//! than the read's (its identity) is not kept.
use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::execution::Execution;
use super::lease::Lease;
use super::{Database, Note};
use crate::config::Role;
use crate::error::{Result, Retry, ServerError};
use crate::near_cache::{hash_read, Fill, Filled, HashRead, Lookup, NearCache, Pledge, Unpledged};
use crate::protocol::{Command, Reply};
use crate::server::Server;
use crate::stats::Counter;

/// What a near-cache fill learnt of the reply it waits for, on the read's
/// lease, before the lease went back ([`Database::near_served`]).
pub(super) struct Served {
    /// The promise of the server that gave it, as it held when it came.
    pledge: Pledge,
    master: bool,
    /// Cluster: the slot of the command's keys.
    slot: Option<u16>,
    /// When the first of its keys (or fields) expires (`None`: never);
    /// unknown: no `Served`, nothing kept.
    expires: Option<Instant>,
}

/// A command's reply, and [ext] where it was read when a near-cache fill
/// waits for it (`None`: no fill, or none may keep it).
pub(super) type Replied = (Reply, Option<Served>);

impl Database {
    /// The near cache for this command: never for a task that owns state
    /// on the server (`MULTI`, `WATCH`... see `Session::owns_state`), nor
    /// once the cache is off (`NearCache::works`).
    /// `Break`: a hit, the reply; else the fill (with its cache) that
    /// waits for the reply, if this read may fill.
    pub(super) fn near_lookup(
        &self,
        x: &mut Execution,
    ) -> ControlFlow<Reply, Option<(&Arc<NearCache>, Fill)>> {
        let Some(cache) = self
            .near_cache
            .as_ref()
            .filter(|cache| !x.task.session.owns_state() && cache.works())
        else {
            return ControlFlow::Continue(None);
        };
        let Some(keys) = x.found.cached_keys(x.command) else {
            return ControlFlow::Continue(None);
        };
        match cache.lookup(&keys, x.command.body(), x.master) {
            Lookup::Hit(reply) => ControlFlow::Break(reply),
            Lookup::Miss(None) => ControlFlow::Continue(None),
            Lookup::Miss(Some(fill)) => ControlFlow::Continue(Some((cache, fill))),
            Lookup::TooLarge(too_large) => {
                x.note(Note::Warning(&too_large.said(&x.command.logged_name())));
                ControlFlow::Continue(None)
            }
        }
    }

    /// The command is over: its fill completes (kept if the reply may
    /// be, read where `Served` says), or what it may have written is
    /// forgotten. `in_multi`: the task was in a transaction when it began.
    pub(super) fn near_after(
        &self,
        x: &mut Execution,
        fill: Option<(&Arc<NearCache>, Fill)>,
        replied: Result<Replied>,
        in_multi: bool,
    ) -> Result<Reply> {
        let (reply, served) = match replied {
            Ok((reply, served)) => (Ok(reply), served),
            Err(err) => (Err(err), None),
        };
        if let Some((cache, fill)) = fill {
            let filled = match (&reply, served) {
                (Ok(reply), Some(served)) if !matches!(reply, Reply::Error(_)) => Some(Filled {
                    reply,
                    from_master: served.master,
                    expires: served.expires,
                    pledge: served.pledge,
                    slot: served.slot,
                }),
                _ => None,
            };
            if let Some(too_large) = cache.complete(fill, filled) {
                x.note(Note::Warning(&too_large.said(&x.command.logged_name())));
            }
        } else if let Some(cache) = &self.near_cache {
            let name = x.command.name();
            let ended = (name.eq_ignore_ascii_case(b"EXEC")
                || name.eq_ignore_ascii_case(b"DISCARD"))
                && in_multi;
            let task = &mut *x.task;
            let (queued, ended) = match (in_multi, ended) {
                (_, true) => (None, Some(&mut task.queued_writes)),
                (true, false) => (Some(&mut task.queued_writes), None),
                (false, false) => (None, None),
            };
            cache.forget_written(x.found.written_keys(x.command), queued, ended);
        }
        reply
    }

    /// A fill waits for `reply`, which came on `lease` from `server`: the
    /// server's pledge, and (if it holds) the expiry of what was read,
    /// asked on the same lease. `None`: not to be kept.
    pub(super) fn near_served(
        &self,
        x: &mut Execution,
        reply: &Reply,
        lease: &mut Lease<'_>,
        server: &Arc<Server>,
    ) -> Option<Served> {
        if matches!(reply, Reply::Error(_)) {
            return None;
        }
        let slot = match self.cluster {
            Some(_) => x.found.slot(x.command).ok().flatten(),
            None => None,
        };
        let identity = lease.identity();
        let pledge = server
            .promise
            .pledge(identity.as_deref(), slot, Instant::now());
        if let Err(Unpledged::AnotherServer { read, tracked }) = &pledge {
            if server.promise.first_mismatch() {
                if let Some(cache) = &self.near_cache {
                    cache.count_refused();
                }
                x.note(Note::Warning(&format!(
                    "near cache: a connection to {} reached another server (run_id {read}) \
                     than its tracking connection (run_id {tracked}): a balancer behind \
                     one location? Its replies are not kept; list each server instead",
                    server.location()
                )));
            }
        }
        let Ok(mut pledge) = pledge else {
            return None;
        };
        // A cluster replica's reply: its slot's master must vouch too (it
        // alone tells a migration of the slot), as it holds now.
        if let Some(slot) = slot {
            let topology = self.topology();
            let master = topology
                .slots
                .as_ref()
                .and_then(|slots| slots.shard_of(slot))
                .and_then(|shard| topology.servers.get(shard.master));
            match master {
                Some(master) if Arc::ptr_eq(master, server) => {}
                Some(master) => match master.promise.oversight(slot, Instant::now()) {
                    Some(overseer) => pledge = pledge.overseen_by(overseer),
                    None => return None,
                },
                None => return None,
            }
        }
        let fields = pledge.field_expiry();
        let expiry = self.expiry_on(x, lease, server, fields)?;
        // Gone (-2) when asked: perhaps there at the read and expired
        // since, and a replica or a paused master sends no invalidation
        // for that. A second read, after the TTLs were asked, is of what
        // is there now: the reply is kept only if it is the same.
        if expiry.gone && self.read_again(x, lease, server).as_ref() != Some(reply) {
            // An invalidation by time: the key changed since the read.
            self.stats.inc(Counter::NearCacheInvalidations);
            return None;
        }
        // Still the server that read: a multiplexed lease may have gone
        // to a new connection meanwhile.
        if lease.identity() != identity {
            return None;
        }
        Some(Served {
            pledge,
            master: server.role() == Role::Master,
            slot,
            expires: expiry.first,
        })
    }

    /// What the TTLs of the command's keys say (their `PTTL`s), and on a
    /// server whose hash fields expire on their own (`fields`) those of
    /// the fields a hash read names (`HPTTL`; a read of a whole hash is
    /// not kept there), asked on `lease` one by one, each bounded as a
    /// request of the command, counted as commands. `None`: unknown, so
    /// not kept.
    fn expiry_on(
        &self,
        x: &mut Execution,
        lease: &mut Lease<'_>,
        server: &Server,
        fields: bool,
    ) -> Option<Expiry> {
        let keys: Vec<Vec<u8>> = x
            .found
            .cached_keys(x.command)?
            .into_iter()
            .map(<[u8]>::to_vec)
            .collect();
        let mut expiry = Expiry::default();
        for key in &keys {
            let mut pttl = Command::new(b"PTTL");
            pttl.push(key);
            expiry = expiry.and(self.ttl_on(x, lease, server, &mut pttl)?);
        }
        if !fields {
            return Some(expiry);
        }
        let mut hpttl = Command::new(b"HPTTL");
        match hash_read(x.command) {
            HashRead::Not => return Some(expiry),
            HashRead::Whole => return None,
            HashRead::Fields(fields) => {
                hpttl.push(keys.first()?);
                hpttl.push(b"FIELDS");
                hpttl.push(fields.len().to_string().as_bytes());
                for field in fields {
                    hpttl.push(field);
                }
            }
        }
        Some(expiry.and(self.ttl_on(x, lease, server, &mut hpttl)?))
    }

    /// What `ttl` says (`PTTL key`, or `HPTTL key FIELDS ...`: all of its
    /// fields); see [`Database::expiry_on`].
    fn ttl_on(
        &self,
        x: &mut Execution,
        lease: &mut Lease<'_>,
        server: &Server,
        ttl: &mut Command,
    ) -> Option<Expiry> {
        let asked = Instant::now();
        match self.ask(x, lease, server, ttl.packed())? {
            // Never answered for this user (no `+pttl`, or renamed away):
            // without it no entry can be kept, so the cache goes off
            // rather than paying a refused request per miss, and says why.
            Reply::Error(text) if ServerError::of(&text).retry() == Retry::Refused => {
                let cache = self.near_cache.as_ref()?;
                if cache.refused() {
                    x.note(Note::Warning(&format!(
                        "near cache off: a fill's {name} was refused ({}); \
                         nothing is cached for this database until the VCL is reloaded \
                         with a user allowed {name}",
                        crate::connection::loggable_error(&text),
                        name = ttl.logged_name(),
                    )));
                }
                None
            }
            reply => expiry_of(asked, &reply),
        }
    }

    /// The command read again on `lease`, for a fill that found a key
    /// gone ([`Database::near_served`]).
    fn read_again(
        &self,
        x: &mut Execution,
        lease: &mut Lease<'_>,
        server: &Server,
    ) -> Option<Reply> {
        let packed = x.command.packed().to_vec();
        self.ask(x, lease, server, &packed)
    }

    /// One request of a fill on `lease`, bounded as a request of the
    /// command and counted as a command. `None`: no reply.
    fn ask(
        &self,
        x: &mut Execution,
        lease: &mut Lease<'_>,
        server: &Server,
        packed: &[u8],
    ) -> Option<Reply> {
        let timeout = x.request_timeout();
        if timeout.is_some_and(|timeout| timeout.is_zero()) {
            return None;
        }
        match self.request(lease, server, packed, timeout) {
            Ok(reply) => {
                self.stats.inc(Counter::CommandsTotal);
                if matches!(reply, Reply::Error(_)) {
                    self.stats.inc(Counter::CommandsError);
                }
                Some(reply)
            }
            Err(_) => {
                self.stats.inc(Counter::CommandsFailed);
                None
            }
        }
    }
}

/// What the TTLs of a fill's keys (and fields) say, together.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Expiry {
    /// When the first of them ends (`None`: none has a TTL).
    first: Option<Instant>,
    /// One was gone when asked (-2: no such key, or field).
    gone: bool,
}

impl Expiry {
    fn and(self, other: Expiry) -> Expiry {
        Expiry {
            first: earliest(self.first, other.first),
            gone: self.gone || other.gone,
        }
    }
}

/// What a `PTTL` reply (an integer), or an `HPTTL` one (an integer per
/// field), asked at `asked`, says: milliseconds left, -1 for no TTL, -2
/// for gone. `None`: not such a reply.
fn expiry_of(asked: Instant, reply: &Reply) -> Option<Expiry> {
    let one = |reply: &Reply| match reply {
        Reply::Integer(ms) if *ms >= 0 => Some(Expiry {
            // Past what an Instant holds: never, as good as.
            first: asked.checked_add(Duration::from_millis(ms.unsigned_abs())),
            gone: false,
        }),
        Reply::Integer(-1) => Some(Expiry::default()),
        Reply::Integer(-2) => Some(Expiry {
            first: None,
            gone: true,
        }),
        _ => None,
    };
    match reply {
        Reply::Array(ttls) => ttls.iter().try_fold(Expiry::default(), |expiry, reply| {
            Some(expiry.and(one(reply)?))
        }),
        reply => one(reply),
    }
}

/// The sooner of two expiries (`None`: never).
fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 40: a `PTTL` of -2 after a read is a key gone since, perhaps
    /// expired with no invalidation to come, not a key without a TTL; in
    /// an `HPTTL` it is a field gone (or the hash).
    #[test]
    fn a_ttl_of_minus_two_is_gone_and_minus_one_is_none() {
        let asked = Instant::now();
        let at = |ms| Some(asked + Duration::from_millis(ms));
        let of = |reply: Reply| expiry_of(asked, &reply);
        let gone = Expiry {
            first: None,
            gone: true,
        };
        assert_eq!(of(Reply::Integer(-2)), Some(gone));
        assert_eq!(of(Reply::Integer(-1)), Some(Expiry::default()));
        assert_eq!(
            of(Reply::Integer(250)),
            Some(Expiry {
                first: at(250),
                gone: false
            })
        );
        // HPTTL: one reply per field, the first TTL and any field gone.
        let fields = |ttls: &[i64]| Reply::Array(ttls.iter().map(|&t| Reply::Integer(t)).collect());
        assert_eq!(
            of(fields(&[400, -1, 100])),
            Some(Expiry {
                first: at(100),
                gone: false
            })
        );
        assert_eq!(
            of(fields(&[400, -2])),
            Some(Expiry {
                first: at(400),
                gone: true
            })
        );
        assert_eq!(of(fields(&[-2, -2])), Some(gone));
        // Not a TTL: unknown, nothing kept.
        for reply in [
            Reply::Integer(-3),
            Reply::Nil,
            Reply::Status("OK".into()),
            fields(&[100, -3]),
            Reply::Array(vec![fields(&[100])]),
        ] {
            assert_eq!(of(reply.clone()), None, "{reply:?}");
        }
    }
}
