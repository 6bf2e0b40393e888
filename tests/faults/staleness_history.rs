//! The staleness trials' history (every read and write, timed) and its
//! checker, with the checker's own test on a made-up history.
use super::*;

/// A read may return a value overwritten at most this long before it
/// began: the invalidation delay bound, with room for a busy 2-core
/// machine (the tracking thread waits its turn among 400 others: seen
/// up to 290 ms with a load average of 34). `FAULTS_STALENESS_MS`
/// overrides it (default 300).
pub(crate) fn staleness_bound() -> Duration {
    Duration::from_millis(env_u64("FAULTS_STALENESS_MS", 300))
}

/// How late past its key's expiry a read may still return the value:
/// the near cache serves an entry until the expiry its fill's `PTTL`
/// gives, at most 1 ms (the unit of `PTTL` and of `SET ... PX`) past
/// Redis's own, itself up to 1 ms past the time set (a key expires once
/// the clock's millisecond is past it). `FAULTS_EXPIRY_MS` overrides it
/// (default 5).
pub(crate) fn expiry_bound() -> Duration {
    Duration::from_millis(env_u64("FAULTS_EXPIRY_MS", 5))
}

/// One write of `version` to key `key`; times in µs since the load began.
#[derive(Clone, Copy)]
pub(crate) struct Write {
    pub(crate) key: usize,
    pub(crate) version: u64,
    pub(crate) start: u64,
    /// When the writer gave up or got the reply.
    pub(crate) end: u64,
    /// Redis said OK: the value is there from `end` on at the latest.
    pub(crate) acked: bool,
    /// The TTL it set (µs; `SET ... PX`): the value is gone `ttl` after
    /// Redis ran the write, between `start + ttl` and `end + ttl`.
    pub(crate) ttl: Option<u64>,
}

impl Write {
    /// The latest the value can have expired.
    fn expired_by(&self) -> Option<u64> {
        self.ttl.map(|ttl| self.end + ttl)
    }
}

/// Something that empties keys: every key (`FLUSHALL`, a restart), or
/// those of a slot another node took over; keys never written before the
/// load began are empty from its start.
#[derive(Clone, Copy)]
pub(crate) struct Reset {
    pub(crate) start: u64,
    pub(crate) end: u64,
    /// The keys it empties, one bit each ([`ALL_KEYS`]: every key).
    pub(crate) keys: u64,
}

/// [`Reset::keys`] of a reset of every key.
pub(crate) const ALL_KEYS: u64 = u64::MAX;

impl Reset {
    pub(crate) fn covers(&self, key: usize) -> bool {
        self.keys & (1 << key) != 0
    }
}

/// The [`Reset::keys`] of `keys`.
pub(crate) fn key_set(keys: &[usize]) -> u64 {
    keys.iter().fold(0, |set, key| set | 1 << key)
}

#[derive(Clone, Copy)]
pub(crate) struct Read {
    pub(crate) key: usize,
    pub(crate) start: u64,
    pub(crate) end: u64,
    /// `None`: nil.
    pub(crate) value: Option<u64>,
    /// Read with `execute(false)`: a replica may have served it.
    pub(crate) any_server: bool,
}

/// What the clients logged.
#[derive(Default)]
pub(crate) struct History {
    pub(crate) writes: Vec<Write>,
    pub(crate) resets: Vec<Reset>,
    pub(crate) reads: Vec<Read>,
    /// Reads that got no reply (`x-r` not `r1`), other statuses, I/O errors.
    pub(crate) unanswered: usize,
    pub(crate) bad_status: usize,
}

impl History {
    /// Every event, one a line, in time order: `W key version start end
    /// acked ttl` (`-`: none), `F start end keys` (a reset, keys a bit mask), `R key start end value`.
    pub(crate) fn dump(&self) -> String {
        let mut lines: Vec<(u64, String)> = Vec::new();
        for w in &self.writes {
            let ttl = w.ttl.map_or("-".to_string(), |ttl| ttl.to_string());
            let line = format!(
                "W {} {} {} {} {} {ttl}",
                w.key, w.version, w.start, w.end, w.acked
            );
            lines.push((w.start, line));
        }
        for r in &self.resets {
            lines.push((r.start, format!("F {} {} {:x}", r.start, r.end, r.keys)));
        }
        for r in &self.reads {
            let value = r.value.map_or("nil".to_string(), |v| v.to_string());
            let line = format!("R {} {} {} {value}", r.key, r.start, r.end);
            lines.push((r.start, line));
        }
        lines.sort_by_key(|l| l.0);
        lines.into_iter().map(|l| l.1 + "\n").collect()
    }
}

/// What a replica held: one read of every key there (`MGET`), which
/// ended `at` (µs of the load's clock); by key, the version held.
pub(crate) struct ReplicaPoll {
    pub(crate) at: u64,
    pub(crate) versions: Vec<Option<u64>>,
}

impl History {
    /// The history as readers of a lagging replica see it, given polls of
    /// the replica in time order: a write is acknowledged, for them, once
    /// the replica holds it or a later version of its key (replication
    /// keeps a key's order), when the first poll that saw it ended; never
    /// if none did. The checker then bounds how much staler than the
    /// replica a read is, not than the master: later by at most a poll's
    /// spacing and length, so looser by that much.
    /// The replica held nothing when the load began (the keys' version
    /// 0, written just before, reaches it later): a reset of every key
    /// then, which those writes followed.
    pub(crate) fn as_replica_held(&mut self, polls: &[ReplicaPoll]) {
        self.resets.push(Reset {
            start: 0,
            end: 0,
            keys: ALL_KEYS,
        });
        for w in self.writes.iter_mut().filter(|w| w.start == 0) {
            w.start = 1;
        }
        for w in self.writes.iter_mut().filter(|w| w.acked) {
            let seen = polls
                .iter()
                .find(|p| {
                    p.versions
                        .get(w.key)
                        .copied()
                        .flatten()
                        .is_some_and(|v| v >= w.version)
                })
                .map_or(u64::MAX, |p| p.at);
            w.end = w.end.max(seen);
        }
    }
}

/// Each read against the history.
pub(crate) struct Verdict {
    /// How long after its overwrite was acknowledged a read began that
    /// still returned the old value (µs), for every such read, with the
    /// read's start and key.
    pub(crate) windows: Vec<(u64, u64, usize)>,
    pub(crate) failures: Vec<String>,
    /// Reads of a value whose write was not acknowledged.
    pub(crate) unjudged: usize,
    /// Reads of an expiring value (a write with a TTL), and how late past
    /// the latest its key can have expired each read that returned it
    /// began (µs), for every such read.
    pub(crate) expiring_reads: usize,
    pub(crate) past_expiry: Vec<u64>,
}

impl Verdict {
    pub(crate) fn summary(&self) -> String {
        let mut w: Vec<u64> = self.windows.iter().map(|w| w.0).collect();
        w.sort_unstable();
        let mut worst = self.windows.clone();
        worst.sort_unstable_by_key(|w| std::cmp::Reverse(w.0));
        let worst: Vec<String> = worst
            .iter()
            .take(3)
            .map(|(w, start, key)| {
                format!(
                    "{:.1} ms (key {key}, read at {:.3} s)",
                    *w as f64 / 1000.0,
                    *start as f64 / 1e6
                )
            })
            .collect();
        let pct = |p: f64| {
            if w.is_empty() {
                return 0.0;
            }
            w[((w.len() as f64 * p).ceil() as usize).clamp(1, w.len()) - 1] as f64 / 1000.0
        };
        let mut summary = format!(
            "staleness windows (read began after the overwrite was acknowledged, old value returned): {} reads; p50 {:.2} ms, p99 {:.2} ms, worst {:.2} ms (bound {} ms); the worst: {}; {} reads of a value whose write was not acknowledged not judged",
            w.len(),
            pct(0.5),
            pct(0.99),
            w.last().map_or(0.0, |&x| x as f64 / 1000.0),
            staleness_bound().as_millis(),
            worst.join(", "),
            self.unjudged
        );
        if self.expiring_reads > 0 {
            summary.push_str(&format!(
                "; {} reads of an expiring value, {} of them begun past its expiry, the latest by {:.2} ms (bound {} ms)",
                self.expiring_reads,
                self.past_expiry.len(),
                self.past_expiry.iter().max().map_or(0.0, |&x| x as f64 / 1000.0),
                expiry_bound().as_millis()
            ));
        }
        summary
    }
}

/// A value `v` of a key is overwritten when the first acknowledged write
/// of a later version is, or a reset of the key that began after `v`'s
/// write ended (one that began before may have come first); nil is
/// overwritten by the first acknowledged write that began after the last
/// reset of the key that began before the read ended. A read is stale by how long before its
/// start that was. A value written with a TTL is emptied by its expiry,
/// a reset of its key (unless the next version was there before it could
/// expire), and no read that begins more than [`expiry_bound`] past the
/// latest it can have expired returns it.
pub(crate) fn check_history(h: &History) -> Verdict {
    let mut by_key: Vec<Vec<Write>> = vec![Vec::new(); KEYS];
    for w in &h.writes {
        by_key[w.key].push(*w);
    }
    for writes in &mut by_key {
        writes.sort_by_key(|w| w.version);
    }
    let mut resets = h.resets.clone();
    resets.extend(by_key.iter().flat_map(|writes| expiries(writes)));
    let mut verdict = Verdict {
        windows: Vec::new(),
        failures: Vec::new(),
        unjudged: 0,
        expiring_reads: 0,
        past_expiry: Vec::new(),
    };
    for read in &h.reads {
        let writes = &by_key[read.key];
        let overwritten = match read.value {
            Some(v) => {
                let Some(write) = writes.iter().find(|w| w.version == v) else {
                    verdict.failures.push(format!(
                        "key {} read {v} at {:.3} s: never written",
                        read.key,
                        read.start as f64 / 1e6
                    ));
                    continue;
                };
                if !write.acked {
                    // A write that timed out may still reach Redis, even
                    // after later ones: when its value is overwritten is
                    // not known.
                    verdict.unjudged += 1;
                    continue;
                }
                if let Some(expired) = write.expired_by() {
                    verdict.expiring_reads += 1;
                    if read.start > expired {
                        let late = read.start - expired;
                        verdict.past_expiry.push(late);
                        if late > expiry_bound().as_micros() as u64 {
                            verdict.failures.push(format!(
                                "key {} read {v} at {:.3} s (answered at {:.3} s){}, {:.1} ms past its expiry",
                                read.key,
                                read.start as f64 / 1e6,
                                read.end as f64 / 1e6,
                                any_server(read),
                                late as f64 / 1000.0
                            ));
                        }
                    }
                }
                let by_write = writes
                    .iter()
                    .filter(|w| w.version > v && w.acked)
                    .map(|w| w.end)
                    .min();
                let by_reset = resets
                    .iter()
                    .filter(|r| r.covers(read.key) && r.start > write.end)
                    .map(|r| r.end)
                    .min();
                by_write.into_iter().chain(by_reset).min()
            }
            None => {
                let Some(reset) = resets
                    .iter()
                    .filter(|r| r.covers(read.key) && r.start < read.end)
                    .max_by_key(|r| r.end)
                else {
                    verdict.failures.push(format!(
                        "key {} read nil at {:.3} s: never emptied",
                        read.key,
                        read.start as f64 / 1e6
                    ));
                    continue;
                };
                writes
                    .iter()
                    .filter(|w| w.acked && w.start > reset.end)
                    .map(|w| w.end)
                    .min()
            }
        };
        let Some(at) = overwritten.filter(|&at| at < read.start) else {
            continue;
        };
        let window = read.start - at;
        verdict.windows.push((window, read.start, read.key));
        if window > staleness_bound().as_micros() as u64 {
            verdict.failures.push(format!(
                "key {} read {} at {:.3} s (answered at {:.3} s){}, overwritten {:.1} ms before",
                read.key,
                read.value.map_or("nil".to_string(), |v| v.to_string()),
                read.start as f64 / 1e6,
                read.end as f64 / 1e6,
                any_server(read),
                window as f64 / 1000.0
            ));
        }
    }
    verdict
}

/// How a failure line says a read may have been served by a replica.
fn any_server(read: &Read) -> &'static str {
    if read.any_server {
        " with execute(false)"
    } else {
        ""
    }
}

/// The expiries of one key's writes (in version order), as resets of the
/// key: each may have come between `start + ttl` and `end + ttl`, unless
/// the next version was written before.
fn expiries(writes: &[Write]) -> Vec<Reset> {
    writes
        .iter()
        .enumerate()
        .filter_map(|(at, w)| {
            let ttl = w.ttl?;
            let overwritten = writes[at + 1..]
                .iter()
                .any(|next| next.acked && next.end < w.start + ttl);
            (!overwritten).then(|| Reset {
                start: w.start + ttl,
                end: w.end + ttl,
                keys: key_set(&[w.key]),
            })
        })
        .collect()
}

/// The checker on a made-up history: it must flag exactly the planted
/// stale reads (else a green trial would prove nothing).
pub(crate) fn checker_self_test() -> Res<()> {
    let ms = 1000;
    let bound = staleness_bound().as_micros() as u64;
    // Past the bound, and within it.
    let (over, within) = (bound + 50 * ms, bound / 2);
    let write = |key, version, start, end| Write {
        key,
        version,
        start,
        end,
        acked: true,
        ttl: None,
    };
    let read = |key, start, value| Read {
        key,
        start,
        end: start + ms,
        value,
        any_server: false,
    };
    let history = History {
        writes: vec![
            write(0, 0, 0, 0),
            write(0, 1, ms, 2 * ms),
            write(1, 0, 0, 0),
            write(2, 0, 0, 0),
            // Began before the reset ended: may have come before it.
            write(2, 1, 5 * ms, 5 * ms + 500),
            write(2, 2, 7 * ms, 8 * ms),
            Write {
                acked: false,
                ..write(3, 1, 9 * ms, 10 * ms)
            },
            write(3, 2, 11 * ms, 12 * ms),
            write(4, 0, 0, 0),
            write(5, 1, 15 * ms, 16 * ms),
        ],
        resets: vec![
            Reset {
                start: 5 * ms,
                end: 6 * ms,
                keys: ALL_KEYS,
            },
            // Key 4's slot taken over; key 5 absent from the start.
            Reset {
                start: 13 * ms,
                end: 14 * ms,
                keys: key_set(&[4]),
            },
            Reset {
                start: 0,
                end: 0,
                keys: key_set(&[5]),
            },
        ],
        reads: vec![
            // Stale: past the bound after version 1 was acknowledged.
            read(0, 2 * ms + over, Some(0)),
            // Began before the acknowledgement: either value is right.
            read(0, ms + 500, Some(0)),
            read(0, 4 * ms, Some(1)),
            // Stale: key 1 was emptied before that.
            read(1, 6 * ms + over, Some(0)),
            read(1, 7 * ms, None),
            // Nil before any reset: never emptied.
            read(2, ms, None),
            // Within the bound of version 2 (acknowledged at 8 ms).
            read(2, 8 * ms + within, None),
            read(2, 8 * ms + within, Some(1)),
            // Stale: nil past the bound after version 2.
            read(2, 8 * ms + over, None),
            // Never written.
            read(3, ms, Some(7)),
            // Not acknowledged: may have come after version 2.
            read(3, 12 * ms + over, Some(1)),
            // Stale: key 4 emptied; key 3 was not.
            read(4, 14 * ms + over, Some(0)),
            read(4, 14 * ms + over, None),
            read(3, 14 * ms + over, Some(2)),
            // Absent from the start, then stale once version 1 is there.
            read(5, ms, None),
            read(5, 16 * ms + over, None),
        ],
        unanswered: 0,
        bad_status: 0,
    };
    let verdict = check_history(&history);
    if verdict.failures.len() != 7 || verdict.unjudged != 1 {
        return Err(format!(
            "the staleness checker flags {} reads of a made-up history, not 7, and leaves {} unjudged, not 1: {:?}",
            verdict.failures.len(),
            verdict.unjudged,
            verdict.failures
        ));
    }
    // Judged against a replica that got version 1 `over` late: a read of
    // version 0 then is not stale, one `over` later is.
    let mut lagging = History {
        writes: vec![write(0, 0, 0, 0), write(0, 1, ms, 2 * ms)],
        reads: vec![
            read(0, 2 * ms + over, Some(0)),
            read(0, 2 * ms + 2 * over + ms, Some(0)),
        ],
        ..History::default()
    };
    let polls = [
        ReplicaPoll {
            at: 0,
            versions: vec![Some(0)],
        },
        ReplicaPoll {
            at: 2 * ms + over,
            versions: vec![Some(1)],
        },
    ];
    let before = check_history(&lagging).failures.len();
    lagging.as_replica_held(&polls);
    let after = check_history(&lagging).failures.len();
    if (before, after) != (2, 1) {
        return Err(format!(
            "the staleness checker flags {before} and {after} reads of a lagging replica's made-up history, before and after as_replica_held, not 2 and 1"
        ));
    }
    // Expiring values: key 0's version 1 expires by 101 ms; key 1's
    // version 1 was overwritten before it could expire.
    let expiry = expiry_bound().as_micros() as u64;
    let expiring = |key, version, start, end, ttl| Write {
        ttl: Some(ttl),
        ..write(key, version, start, end)
    };
    let expiring = History {
        writes: vec![
            expiring(0, 1, 0, ms, 100 * ms),
            write(0, 2, 200 * ms, 201 * ms),
            expiring(1, 1, 0, ms, 100 * ms),
            expiring(1, 2, 50 * ms, 51 * ms, 1000 * ms),
        ],
        reads: vec![
            read(0, 50 * ms, Some(1)),
            // Past its expiry, within the bound.
            read(0, 101 * ms + expiry / 2, Some(1)),
            // Past the bound: flagged.
            read(0, 101 * ms + expiry + ms, Some(1)),
            // Nil once expired; stale once version 2 is there.
            read(0, 120 * ms, None),
            read(0, 201 * ms + over, None),
            read(1, 150 * ms, Some(2)),
            // Version 2 never expired by then: never emptied.
            read(1, 150 * ms, None),
        ],
        ..History::default()
    };
    let verdict = check_history(&expiring);
    if verdict.failures.len() != 3 || verdict.expiring_reads != 4 || verdict.past_expiry.len() != 2
    {
        return Err(format!(
            "the staleness checker flags {} reads of a made-up history of expiring values, not 3, and counts {} reads of them, {} past their expiry, not 4 and 2: {:?}",
            verdict.failures.len(),
            verdict.expiring_reads,
            verdict.past_expiry.len(),
            verdict.failures
        ));
    }
    Ok(())
}
