//! The hit path of a near cache, for `benches/micro.rs` alone: the store
//! is crate-private, so the bench reaches it through this, not an API.
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{Filled, Lookup, NearCache, Promise};
use crate::protocol::{Command, Reply};
use crate::stats::Stats;

/// A near cache holding the replies of some reads, from a tracked master.
pub struct NearCacheBench {
    cache: NearCache,
    /// Each read's key and command (as sent: its body).
    reads: Vec<(Vec<u8>, Command)>,
}

impl NearCacheBench {
    /// A cache of `budget` bytes, filled with `reply` for each of `reads`
    /// (a command's name and arguments; its key is the first argument).
    pub fn filled(budget: usize, reads: &[Vec<Vec<u8>>], reply: &[u8]) -> NearCacheBench {
        let promise = Arc::new(Promise::default());
        promise.made(Some("bench".into()), false);
        // Proven for the next hour: the bench is not about heartbeats.
        promise.proven(Instant::now() + Duration::from_secs(3600));
        let cache = NearCache::new(budget, None, Arc::new(Stats::default()));
        let reply = Reply::String(reply.to_vec());
        let reads: Vec<(Vec<u8>, Command)> = reads
            .iter()
            .map(|args| {
                let mut command = Command::new(&args[0]);
                for arg in &args[1..] {
                    command.push(arg);
                }
                (args[1].clone(), command)
            })
            .collect();
        for (key, command) in &reads {
            // The doorkeeper's miss, then the one that fills.
            for _ in 0..2 {
                if let Lookup::Miss(Some(fill)) = cache.lookup(&[key], command.body(), false) {
                    let pledge = promise
                        .pledge(Some("bench"), None, Instant::now())
                        .expect("a promise that holds");
                    let filled = Filled {
                        reply: &reply,
                        from_master: true,
                        expires: None,
                        pledge,
                        slot: None,
                    };
                    cache.complete(fill, Some(filled));
                }
            }
        }
        NearCacheBench { cache, reads }
    }

    /// Looks up the `i`-th read (modulo their number): true on a hit.
    pub fn hit(&self, i: usize) -> bool {
        let (key, command) = &self.reads[i % self.reads.len()];
        matches!(
            self.cache.lookup(&[key], command.body(), false),
            Lookup::Hit(_)
        )
    }
}
