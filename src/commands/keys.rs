//! Which arguments of a command are keys, by the server's key
//! specifications (as Redis's `getKeysUsingKeySpecs` reads them), and the
//! cluster slot they route to: the slot of all of them, or a `CROSSSLOT`
//! error when they differ, as Redis words it.
use smallvec::SmallVec;

use super::builtin::KeyRule;
use super::model::{Entry, Found};
use super::parse::{flag, BeginSearch, FindKeys, KeySpec};
use crate::cluster::key_slot;
use crate::protocol::Command;

/// Redis's own error, sent here without a round trip.
pub(crate) const CROSSSLOT: &str = "CROSSSLOT Keys in request don't hash to the same slot";

/// Keys in different slots.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CrossSlot;

/// Arguments kept on the stack for a typical command.
type Args<'c> = SmallVec<[&'c [u8]; 16]>;

/// The key positions of one specification in `args` (the name at 0),
/// each passed to `key`; nothing when the arguments do not fit it (the
/// server will say what is wrong). The numbers come from a server's
/// `COMMAND` reply: saturating arithmetic, so that none can overflow.
fn spec_keys(spec: &KeySpec, args: &[&[u8]], key: &mut dyn FnMut(usize)) {
    let argc = args.len() as i64;
    let first = match &spec.begin {
        BeginSearch::Index(index) => *index,
        BeginSearch::Keyword { keyword, startfrom } => {
            let (start, end, step) = if *startfrom >= 0 {
                (*startfrom, argc - 1, 1)
            } else {
                (argc.saturating_add(*startfrom), 1, -1)
            };
            let mut found = None;
            let mut i = start;
            while i >= 1 && i < argc && (step > 0 && i <= end || step < 0 && i >= end) {
                if args[i as usize].eq_ignore_ascii_case(keyword) {
                    found = Some(i + 1);
                    break;
                }
                i = i.saturating_add(step);
            }
            match found {
                Some(first) => first,
                None => return,
            }
        }
        BeginSearch::Unknown => return,
    };
    let (first, last, step) = match spec.find {
        FindKeys::Range {
            lastkey,
            keystep,
            limit,
        } => {
            let last = if lastkey >= 0 {
                first.saturating_add(lastkey)
            } else if limit <= 1 {
                argc.saturating_add(lastkey)
            } else {
                first.saturating_add((argc.saturating_sub(first) / limit).saturating_add(lastkey))
            };
            (first, last, keystep)
        }
        FindKeys::Keynum {
            keynumidx,
            firstkey,
            keystep,
        } => {
            let Some(count) = usize::try_from(first.saturating_add(keynumidx))
                .ok()
                .and_then(|at| args.get(at))
                .and_then(|arg| std::str::from_utf8(arg).ok())
                .and_then(|text| text.parse::<i64>().ok())
                .filter(|count| (0..=argc).contains(count))
            else {
                return;
            };
            let first = first.saturating_add(firstkey);
            let last = first
                .saturating_add(count.saturating_mul(keystep.max(1)))
                .saturating_sub(1);
            (first, last, keystep)
        }
        FindKeys::Unknown => return,
    };
    if first < 1 || step < 1 || last >= argc || last < first {
        return;
    }
    let mut i = first;
    while i <= last {
        key(i as usize);
        i = i.saturating_add(step);
    }
}

/// `SORT key ... [STORE dst]`: `BY` and `GET` take a pattern, `LIMIT`
/// two numbers (Redis's `sortGetKeys`; the last `STORE` wins).
fn sort_store(args: &[&[u8]]) -> Option<usize> {
    let mut store = None;
    let mut i = 2;
    while i < args.len() {
        let arg = args[i];
        if arg.eq_ignore_ascii_case(b"LIMIT") {
            i += 2;
        } else if arg.eq_ignore_ascii_case(b"GET") || arg.eq_ignore_ascii_case(b"BY") {
            i += 1;
        } else if arg.eq_ignore_ascii_case(b"STORE") && i + 1 < args.len() {
            store = Some(i + 1);
            i += 1;
        }
        i += 1;
    }
    store
}

/// `MIGRATE host port key db timeout [COPY] [REPLACE] [AUTH pw | AUTH2
/// user pw] [KEYS k...]` (Redis's `migrateGetKeys`): the keys after
/// `KEYS`, else the one at 3.
fn migrate_keys(args: &[&[u8]], key: &mut dyn FnMut(usize)) {
    let mut i = 6;
    while i < args.len() {
        let arg = args[i];
        if arg.eq_ignore_ascii_case(b"AUTH") {
            i += 1;
        } else if arg.eq_ignore_ascii_case(b"AUTH2") {
            i += 2;
        } else if arg.eq_ignore_ascii_case(b"KEYS") {
            (i + 1..args.len()).for_each(key);
            return;
        }
        i += 1;
    }
    if args.len() > 3 {
        key(3);
    }
}

/// Every key position of `args` for `entry`, in the server's order.
fn entry_keys(entry: &Entry, args: &[&[u8]], key: &mut dyn FnMut(usize)) {
    if entry.keys == KeyRule::Migrate {
        return migrate_keys(args, key);
    }
    for spec in entry.key_specs.iter() {
        spec_keys(spec, args, key);
    }
    if entry.keys == KeyRule::Sort {
        if let Some(at) = sort_store(args) {
            key(at);
        }
    }
}

impl Found<'_> {
    /// The keys of `command`, in order (a key may come twice).
    #[cfg(test)]
    pub(crate) fn keys<'c>(&self, command: &'c Command) -> Vec<&'c [u8]> {
        let mut keys = Vec::new();
        self.each_key(command, &mut |key| keys.push(key));
        keys
    }

    fn each_key<'c>(&self, command: &'c Command, each: &mut dyn FnMut(&'c [u8])) {
        let Some(entry) = self.entry else {
            // Unknown to the model: the C VMOD's rule, the first argument.
            if let Some(key) = command.first_arg() {
                each(key);
            }
            return;
        };
        if self.container_only {
            return;
        }
        let args: Args<'c> = std::iter::once(command.name())
            .chain(command.args())
            .collect();
        entry_keys(entry, &args, &mut |at| each(args[at]));
    }

    /// The keys of `command`, each once, in order, when its reply may be
    /// kept in a near cache ([`super::model::Entry::cacheable`]; `None`
    /// without keys).
    pub(crate) fn cached_keys<'c>(&self, command: &'c Command) -> Option<Vec<&'c [u8]>> {
        if !self.entry?.cacheable || self.container_only {
            return None;
        }
        let mut keys: Vec<&'c [u8]> = Vec::new();
        self.each_key(command, &mut |key| {
            if !keys.contains(&key) {
                keys.push(key);
            }
        });
        (!keys.is_empty()).then_some(keys)
    }

    /// What `command` may change, for a near cache to forget (see
    /// `near_cache`): `None` for a command that writes nothing (a read,
    /// `PING`, `MULTI`...); else its keys, found as for routing (a command
    /// not in the model: its first argument, the C VMOD's rule), and none
    /// for a write without keys (`FLUSHALL`, `SWAPDB`: everything).
    pub(crate) fn written_keys<'c>(&self, command: &'c Command) -> Option<Vec<&'c [u8]>> {
        let writes = match self.entry.filter(|_| !self.container_only) {
            Some(entry) => entry.flags & flag::WRITE != 0 || entry.script,
            None => true,
        };
        if !writes {
            return None;
        }
        let mut keys = Vec::new();
        self.each_key(command, &mut |key| keys.push(key));
        Some(keys)
    }

    /// The cluster slot of `command`: the one of all its keys (`None`
    /// without keys: any node), or [`CrossSlot`].
    pub(crate) fn slot(&self, command: &Command) -> Result<Option<u16>, CrossSlot> {
        let mut slot = None;
        let mut cross = false;
        self.each_key(command, &mut |key| {
            let this = key_slot(key);
            match slot {
                None => slot = Some(this),
                Some(other) if other != this => cross = true,
                Some(_) => {}
            }
        });
        if cross {
            Err(CrossSlot)
        } else {
            Ok(slot)
        }
    }
}
