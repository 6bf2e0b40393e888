//! The fence written after each batch, `PING <token>`: its reply, in its
//! place, vouches that the replies before it are theirs.
use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// The argument of one fence, `PING <token>`: 128 bits of a keyed hash
/// (SipHash, keyed from the OS's random source once per process) of a
/// stream drawn per multiplexer and a counter. A VCL can read earlier
/// tokens (`SLOWLOG GET`, `CLIENT LIST`), not the key: the token of the
/// fence after its own command is not known when that command is written,
/// so no command (`ECHO`) can give it back in the fence's place.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) struct FenceToken(pub(super) [u8; FENCE_TOKEN_LEN]);

const FENCE_PREFIX: &[u8; 17] = b"vmod-redis-fence-";
const FENCE_TOKEN_LEN: usize = FENCE_PREFIX.len() + 32;
/// `PING` and the length of its argument, the token: packed as `Command`
/// would.
const FENCE_REQUEST_HEAD: &[u8] = b"*2\r\n$4\r\nPING\r\n$49\r\n";
/// The reply to the fence: the token as a bulk string (RESP2 and 3).
const FENCE_REPLY_HEAD: &[u8] = b"$49\r\n";

/// Streams of fence tokens, one per multiplexer: never the same twice.
static FENCE_STREAMS: AtomicU64 = AtomicU64::new(1);

/// A multiplexer's fences: which stream of tokens (0: none drawn yet),
/// and how many were made.
#[derive(Default)]
pub(super) struct Fences {
    stream: u64,
    made: u64,
}

impl Fences {
    /// The token of the next fence written.
    pub(super) fn next(&mut self) -> FenceToken {
        if self.stream == 0 {
            self.stream = FENCE_STREAMS.fetch_add(1, Ordering::Relaxed);
        }
        self.made += 1;
        FenceToken::new(self.stream, self.made)
    }
}

impl FenceToken {
    /// The `stream`'s `n`th token.
    fn new(stream: u64, n: u64) -> FenceToken {
        static KEY: OnceLock<RandomState> = OnceLock::new();
        let key = KEY.get_or_init(RandomState::new);
        let mut token = [0; FENCE_TOKEN_LEN];
        token[..FENCE_PREFIX.len()].copy_from_slice(FENCE_PREFIX);
        let digits = token[FENCE_PREFIX.len()..].chunks_exact_mut(16);
        for (half, digits) in (0u8..).zip(digits) {
            let mut word = key.hash_one((stream, n, half));
            for digit in digits.iter_mut().rev() {
                *digit = b"0123456789abcdef"[(word & 0xf) as usize];
                word >>= 4;
            }
        }
        FenceToken(token)
    }

    /// Appends the fence request, `PING <token>`.
    pub(super) fn pack_into(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(FENCE_REQUEST_HEAD);
        out.extend_from_slice(&self.0);
        out.extend_from_slice(b"\r\n");
    }

    /// Whether `reply` (a whole RESP value) is this fence's own reply.
    pub(super) fn answered_by(&self, reply: &[u8]) -> bool {
        reply.len() == FENCE_REPLY_HEAD.len() + FENCE_TOKEN_LEN + 2
            && reply.starts_with(FENCE_REPLY_HEAD)
            && reply[FENCE_REPLY_HEAD.len()..].starts_with(&self.0)
            && reply.ends_with(b"\r\n")
    }

    /// What `reply` (a whole RESP value), read in this fence's place, says.
    pub(super) fn judge(&self, reply: &[u8]) -> FenceReply {
        if self.answered_by(reply) {
            FenceReply::Itself
        } else if reply.first() == Some(&b'-') {
            FenceReply::Refused
        } else {
            FenceReply::Other
        }
    }
}

/// What came back in a fence's place.
pub(super) enum FenceReply {
    Itself,
    /// An error reply: the server refused the `PING` (an ACL without it).
    Refused,
    /// Another reply: the stream is out of step.
    Other,
}
