//! Reading a server's `COMMAND` (or `COMMAND INFO`) reply into entries:
//! name, arity, flags, key specifications and subcommands. The reply has
//! the same shape in RESP2 and RESP3 once read into a [`Reply`] (RESP3
//! maps and sets arrive as flat arrays). Redis 6 and older give no key
//! specifications: their first / last / step triple becomes one.
use crate::protocol::Reply;

/// The server flags a decision reads (see `decide.rs`); the others are
/// ignored.
pub(crate) mod flag {
    pub(crate) const READONLY: u16 = 1 << 0;
    pub(crate) const WRITE: u16 = 1 << 1;
    pub(crate) const ADMIN: u16 = 1 << 2;
    pub(crate) const PUBSUB: u16 = 1 << 3;
    pub(crate) const BLOCKING: u16 = 1 << 4;
    pub(crate) const MODULE: u16 = 1 << 5;
    pub(crate) const MOVABLEKEYS: u16 = 1 << 6;
    /// Not a flag but a tip (Redis 7+): `nondeterministic_output`, a reply
    /// that may differ with no write in between (`TTL`, `SRANDMEMBER`).
    pub(crate) const NONDETERMINISTIC: u16 = 1 << 7;

    pub(crate) fn from_name(name: &[u8]) -> u16 {
        match name.to_ascii_lowercase().as_slice() {
            b"readonly" => READONLY,
            b"write" => WRITE,
            b"admin" => ADMIN,
            b"pubsub" => PUBSUB,
            b"blocking" => BLOCKING,
            b"module" => MODULE,
            b"movablekeys" => MOVABLEKEYS,
            _ => 0,
        }
    }
}

/// Where the search for a key specification's keys starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum BeginSearch {
    /// At this argument (0: the name).
    Index(i64),
    /// After `keyword` (upper case), searched from `startfrom` (negative:
    /// from the end, backwards).
    Keyword { keyword: Box<[u8]>, startfrom: i64 },
    /// The server cannot say (e.g. `SORT ... STORE`): see `builtin.rs`.
    Unknown,
}

/// How many keys follow the start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum FindKeys {
    /// `lastkey` relative to the start (negative: from the end), every
    /// `keystep`; with `limit` > 1, only 1/limit of what is left.
    Range {
        lastkey: i64,
        keystep: i64,
        limit: i64,
    },
    /// The key count is at `keynumidx` after the start, the first key at
    /// `firstkey` after the start, then every `keystep`.
    Keynum {
        keynumidx: i64,
        firstkey: i64,
        keystep: i64,
    },
    Unknown,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct KeySpec {
    pub(crate) begin: BeginSearch,
    pub(crate) find: FindKeys,
    /// The server marks it `incomplete`: it may miss keys.
    pub(crate) incomplete: bool,
}

/// One command (or subcommand) as the server describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Described {
    /// Upper case; for a subcommand, the part after `|` (`SETNAME`).
    pub(crate) name: Box<[u8]>,
    pub(crate) arity: i64,
    pub(crate) flags: u16,
    pub(crate) key_specs: Vec<KeySpec>,
    pub(crate) subcommands: Vec<Described>,
}

/// The whole reply of `COMMAND`: every command the server knows.
pub(crate) fn parse_command_reply(reply: &Reply) -> Result<Vec<Described>, String> {
    let Reply::Array(commands) = reply else {
        return Err(format!("COMMAND replied {:?}, not an array", reply.kind()));
    };
    commands.iter().map(described).collect()
}

fn text(reply: &Reply) -> Option<&[u8]> {
    match reply {
        Reply::String(bytes) => Some(bytes),
        Reply::Status(text) => Some(text.as_bytes()),
        _ => None,
    }
}

fn integer(reply: Option<&Reply>) -> Option<i64> {
    match reply? {
        Reply::Integer(n) => Some(*n),
        other => std::str::from_utf8(text(other)?).ok()?.parse().ok(),
    }
}

fn array(reply: Option<&Reply>) -> &[Reply] {
    match reply {
        Some(Reply::Array(items)) => items,
        _ => &[],
    }
}

/// The value of `key` in a map (RESP3) or its flat RESP2 form.
fn field<'a>(map: &'a [Reply], key: &str) -> Option<&'a Reply> {
    map.chunks_exact(2)
        .find(|pair| text(&pair[0]).is_some_and(|k| k.eq_ignore_ascii_case(key.as_bytes())))
        .map(|pair| &pair[1])
}

fn described(reply: &Reply) -> Result<Described, String> {
    let Reply::Array(fields) = reply else {
        return Err("a command that is not an array".into());
    };
    let full_name = fields
        .first()
        .and_then(text)
        .ok_or("a command without a name")?;
    // `client|setname`: the subcommand's own name.
    let name = match full_name.iter().position(|&b| b == b'|') {
        Some(bar) => &full_name[bar + 1..],
        None => full_name,
    };
    let arity = integer(fields.get(1)).ok_or("a command without an arity")?;
    let tips = array(fields.get(7))
        .iter()
        .filter_map(text)
        .any(|tip| tip.eq_ignore_ascii_case(b"nondeterministic_output"));
    let flags = array(fields.get(2))
        .iter()
        .filter_map(text)
        .fold(0, |flags, name| flags | flag::from_name(name))
        | if tips { flag::NONDETERMINISTIC } else { 0 };
    let key_specs = match fields.get(8) {
        Some(specs) => array(Some(specs)).iter().map(key_spec).collect(),
        None => legacy_key_spec(fields).into_iter().collect(),
    };
    let subcommands = array(fields.get(9))
        .iter()
        .map(described)
        .collect::<Result<_, _>>()?;
    Ok(Described {
        name: name.to_ascii_uppercase().into(),
        arity,
        flags,
        key_specs,
        subcommands,
    })
}

/// Redis < 7: keys from `first` to `last` (negative: from the end) every
/// `step`.
fn legacy_key_spec(fields: &[Reply]) -> Option<KeySpec> {
    let first = integer(fields.get(3))?;
    let last = integer(fields.get(4))?;
    let step = integer(fields.get(5))?;
    (first > 0 && step > 0).then(|| KeySpec {
        begin: BeginSearch::Index(first),
        find: FindKeys::Range {
            lastkey: if last < 0 { last } else { last - first },
            keystep: step,
            limit: 0,
        },
        incomplete: false,
    })
}

fn key_spec(reply: &Reply) -> KeySpec {
    let map = array(Some(reply));
    let incomplete = array(field(map, "flags"))
        .iter()
        .filter_map(text)
        .any(|flag| flag.eq_ignore_ascii_case(b"incomplete"));
    let begin = array(field(map, "begin_search"));
    let begin_spec = array(field(begin, "spec"));
    let begin = match field(begin, "type").and_then(text) {
        Some(t) if t.eq_ignore_ascii_case(b"index") => {
            integer(field(begin_spec, "index")).map_or(BeginSearch::Unknown, BeginSearch::Index)
        }
        Some(t) if t.eq_ignore_ascii_case(b"keyword") => {
            match (
                field(begin_spec, "keyword").and_then(text),
                integer(field(begin_spec, "startfrom")),
            ) {
                (Some(keyword), Some(startfrom)) => BeginSearch::Keyword {
                    keyword: keyword.to_ascii_uppercase().into(),
                    startfrom,
                },
                _ => BeginSearch::Unknown,
            }
        }
        _ => BeginSearch::Unknown,
    };
    let find = array(field(map, "find_keys"));
    let find_spec = array(field(find, "spec"));
    let number = |key| integer(field(find_spec, key));
    let find = match field(find, "type").and_then(text) {
        Some(t) if t.eq_ignore_ascii_case(b"range") => {
            match (number("lastkey"), number("keystep"), number("limit")) {
                (Some(lastkey), Some(keystep), Some(limit)) => FindKeys::Range {
                    lastkey,
                    keystep,
                    limit,
                },
                _ => FindKeys::Unknown,
            }
        }
        Some(t) if t.eq_ignore_ascii_case(b"keynum") => {
            match (number("keynumidx"), number("firstkey"), number("keystep")) {
                (Some(keynumidx), Some(firstkey), Some(keystep)) => FindKeys::Keynum {
                    keynumidx,
                    firstkey,
                    keystep,
                },
                _ => FindKeys::Unknown,
            }
        }
        _ => FindKeys::Unknown,
    };
    KeySpec {
        begin,
        find,
        incomplete,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::protocol::resp;

    pub(crate) const REDIS_70_RESP2: &[u8] = include_bytes!("captures/redis-7.0-resp2.resp");
    pub(crate) const REDIS_70_RESP3: &[u8] = include_bytes!("captures/redis-7.0-resp3.resp");

    pub(crate) fn read(raw: &[u8]) -> Vec<Described> {
        // Within the bounded reader's limits, as a connection reads it.
        assert_eq!(resp::scan(raw), Ok(Some(raw.len())));
        parse_command_reply(&resp::build(raw).unwrap()).unwrap()
    }

    fn find<'a>(table: &'a [Described], name: &str) -> &'a Described {
        table
            .iter()
            .find(|c| &*c.name == name.as_bytes())
            .unwrap_or_else(|| panic!("{name}"))
    }

    #[test]
    fn redis_70_in_both_protocols_reads_the_same() {
        let two = read(REDIS_70_RESP2);
        let three = read(REDIS_70_RESP3);
        assert_eq!(two.len(), 240);
        assert_eq!(two, three);
    }

    #[test]
    fn names_arity_flags_and_subcommands() {
        let table = read(REDIS_70_RESP3);
        let get = find(&table, "GET");
        assert_eq!(get.arity, 2);
        assert_eq!(get.flags & flag::READONLY, flag::READONLY);
        let blpop = find(&table, "BLPOP");
        assert_eq!(blpop.flags & flag::BLOCKING, flag::BLOCKING);
        let client = find(&table, "CLIENT");
        let setname = find(&client.subcommands, "SETNAME");
        assert_eq!(setname.arity, 3);
        assert!(find(&client.subcommands, "REPLY").subcommands.is_empty());
        assert_eq!(
            find(&find(&table, "CONFIG").subcommands, "SET").flags & flag::ADMIN,
            flag::ADMIN
        );
    }

    #[test]
    fn key_specifications_of_each_kind() {
        let table = read(REDIS_70_RESP2);
        assert_eq!(
            find(&table, "MSET").key_specs,
            [KeySpec {
                begin: BeginSearch::Index(1),
                find: FindKeys::Range {
                    lastkey: -1,
                    keystep: 2,
                    limit: 0
                },
                incomplete: false
            }]
        );
        assert_eq!(
            find(&table, "EVAL").key_specs[0].find,
            FindKeys::Keynum {
                keynumidx: 0,
                firstkey: 1,
                keystep: 1
            }
        );
        assert_eq!(
            find(&table, "XREAD").key_specs[0].begin,
            BeginSearch::Keyword {
                keyword: b"STREAMS"[..].into(),
                startfrom: 1
            }
        );
        let migrate = find(&table, "MIGRATE");
        assert!(migrate.key_specs[1].incomplete);
        assert_eq!(
            find(&table, "SORT").key_specs[1].begin,
            BeginSearch::Unknown
        );
    }

    #[test]
    fn a_redis_6_entry_gets_its_keys_from_first_last_step() {
        let entry = Reply::Array(vec![
            Reply::String(b"mset".to_vec()),
            Reply::Integer(-3),
            Reply::Array(vec![Reply::Status("write".into())]),
            Reply::Integer(1),
            Reply::Integer(-1),
            Reply::Integer(2),
            Reply::Array(vec![]),
        ]);
        let table = parse_command_reply(&Reply::Array(vec![entry])).unwrap();
        assert_eq!(
            table[0].key_specs[0].find,
            FindKeys::Range {
                lastkey: -1,
                keystep: 2,
                limit: 0
            }
        );
    }

    #[test]
    fn malformed_replies_are_errors_not_panics() {
        for reply in [
            Reply::Error("NOPERM".into()),
            Reply::Array(vec![Reply::Integer(1)]),
            Reply::Array(vec![Reply::Array(vec![])]),
            Reply::Array(vec![Reply::Array(vec![Reply::String(b"x".to_vec())])]),
        ] {
            assert!(parse_command_reply(&reply).is_err(), "{reply:?}");
        }
        // Odd key specifications are kept as unknown, not refused.
        let odd = Reply::Array(vec![Reply::Array(vec![
            Reply::String(b"x".to_vec()),
            Reply::Integer(2),
            Reply::Array(vec![]),
            Reply::Integer(0),
            Reply::Integer(0),
            Reply::Integer(0),
            Reply::Array(vec![]),
            Reply::Array(vec![]),
            Reply::Array(vec![Reply::Nil, Reply::Array(vec![Reply::Integer(3)])]),
        ])]);
        let table = parse_command_reply(&odd).unwrap();
        assert_eq!(table[0].key_specs.len(), 2);
        assert_eq!(table[0].key_specs[0].begin, BeginSearch::Unknown);
    }
}
