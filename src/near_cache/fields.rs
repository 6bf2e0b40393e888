//! Hash fields with TTLs of their own (`HEXPIRE`, Redis 7.4 and Valkey
//! 9.0): a field expires with no write, and its key's `PTTL` does not
//! say when. A hash read kept in the near cache must not outlive the
//! fields it read, on a server that has them.
use crate::protocol::Command;

/// What a hash read depends on, for its expiry.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum HashRead<'c> {
    /// Not a hash read: its keys' TTLs are enough.
    Not,
    /// It reads these fields only: their TTLs (`HPTTL`) bound it.
    Fields(Vec<&'c [u8]>),
    /// It reads every field (`HGETALL`, `HLEN`...): the TTLs of fields it
    /// cannot name would bound it, so it is not kept.
    Whole,
}

/// What `command` (its name and arguments) reads of a hash.
pub(crate) fn hash_read(command: &Command) -> HashRead<'_> {
    let name = command.name();
    let is = |other: &str| name.eq_ignore_ascii_case(other.as_bytes());
    if is("HGET") || is("HMGET") || is("HEXISTS") || is("HSTRLEN") {
        // The key, then the fields.
        HashRead::Fields(command.args().skip(1).collect())
    } else if ["HGETALL", "HKEYS", "HVALS", "HLEN", "HSCAN", "HRANDFIELD"]
        .iter()
        .any(|whole| is(whole))
    {
        HashRead::Whole
    } else {
        HashRead::Not
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn command(args: &[&str]) -> Command {
        let mut command = Command::new(args[0].as_bytes());
        for arg in &args[1..] {
            command.push(arg.as_bytes());
        }
        command
    }

    #[test]
    fn hash_reads_name_their_fields_or_read_them_all() {
        let fields = |args: &[&str]| match hash_read(&command(args)) {
            HashRead::Fields(fields) => fields
                .into_iter()
                .map(|f| String::from_utf8_lossy(f).into_owned())
                .collect::<Vec<_>>(),
            other => panic!("{other:?}"),
        };
        assert_eq!(fields(&["hget", "h", "f"]), ["f"]);
        assert_eq!(fields(&["HMGET", "h", "a", "b"]), ["a", "b"]);
        assert_eq!(fields(&["HSTRLEN", "h", "f"]), ["f"]);
        assert_eq!(hash_read(&command(&["HGETALL", "h"])), HashRead::Whole);
        assert_eq!(hash_read(&command(&["hlen", "h"])), HashRead::Whole);
        assert_eq!(hash_read(&command(&["GET", "h"])), HashRead::Not);
    }
}
