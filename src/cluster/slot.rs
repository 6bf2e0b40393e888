//! The hash slot of a key, as Redis Cluster defines it: CRC16 (XMODEM) of
//! the key, or of its `{hash tag}`, modulo 16384.

/// Slots of a Redis Cluster.
pub(crate) const SLOTS: usize = 16384;

/// A cluster hash slot (0..16384): "slot" elsewhere is the task's reply
/// slot of vcl.rs.
pub(crate) type HashSlot = u16;

/// CRC16-CCITT (XMODEM: polynomial 0x1021, initial value 0) by table, one
/// lookup per byte: the key of every cluster command goes through it.
const CRC16_TABLE: [u16; 256] = {
    let mut table = [0u16; 256];
    let mut i = 0;
    while i < 256 {
        let mut crc = (i as u16) << 8;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
            bit += 1;
        }
        table[i] = crc;
        i += 1;
    }
    table
};

fn crc16(data: &[u8]) -> u16 {
    data.iter().fold(0u16, |crc, &byte| {
        (crc << 8) ^ CRC16_TABLE[usize::from((crc >> 8) as u8 ^ byte)]
    })
}

/// The part of `key` that is hashed: what is between the first `{` and
/// the first `}` after it, when that is not empty; else the whole key.
fn hashed_part(key: &[u8]) -> &[u8] {
    let Some(open) = key.iter().position(|&b| b == b'{') else {
        return key;
    };
    let rest = &key[open + 1..];
    match rest.iter().position(|&b| b == b'}') {
        Some(len) if len > 0 => &rest[..len],
        _ => key,
    }
}

/// The slot `key` belongs to.
pub(crate) fn key_slot(key: &[u8]) -> HashSlot {
    // SLOTS is a power of two: the mask is the modulo.
    crc16(hashed_part(key)) & (SLOTS as u16 - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc16_is_xmodem() {
        // The check value of CRC-16/XMODEM, also in the Redis Cluster spec.
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(crc16(b""), 0);
    }

    #[test]
    fn slots_as_redis_computes_them() {
        // `CLUSTER KEYSLOT` on Redis 7.0.
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"bar"), 5061);
        assert_eq!(key_slot(b"hello"), 866);
        assert_eq!(key_slot(b""), 0);
    }

    #[test]
    fn hash_tags_as_the_spec_defines_them() {
        let following = key_slot(b"{user1000}.following");
        assert_eq!(following, key_slot(b"{user1000}.followers"));
        assert_eq!(following, key_slot(b"user1000"));
        // Only the first `{` counts; `{}` is no tag (the whole key is hashed).
        assert_eq!(key_slot(b"foo{}{bar}"), crc16(b"foo{}{bar}") & 0x3FFF);
        assert_eq!(key_slot(b"foo{{bar}}zap"), key_slot(b"{bar"));
        assert_eq!(key_slot(b"foo{bar}{zap}"), key_slot(b"bar"));
        // No closing brace: the whole key.
        assert_eq!(key_slot(b"{user1000"), crc16(b"{user1000") & 0x3FFF);
    }
}
