//! The reply of a Redis command, as VCL reads it.
//!
//! Every reader (`get_reply`, `array_reply_is_*`, `get_map_reply_value`...)
//! works on this one type, so RESP2 and RESP3 are folded once, at receive
//! time, into the eight types VCL knows, and the readers only borrow.

use std::borrow::Cow;

/// A Redis reply as VCL sees it (RESP2 and RESP3 folded into the 8 VCL types).
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// RESP2 null bulk string / null array, RESP3 null.
    Nil,
    /// Error reply: the full line after `-`, e.g. `ERR unknown command`.
    Error(String),
    /// Simple string (`+OK`).
    Status(String),
    /// Integer.
    Integer(i64),
    /// RESP3 boolean.
    Boolean(bool),
    /// RESP3 double.
    Double(f64),
    /// Bulk string, RESP3 verbatim string (text only) or big number (decimal).
    String(Vec<u8>),
    /// Array, RESP3 set, push, or map flattened as `k1, v1, k2, v2, ...`.
    Array(Vec<Reply>),
}

/// The type of a [`Reply`], for the `reply_is_*` tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyKind {
    Error,
    Nil,
    Status,
    Integer,
    Boolean,
    Double,
    String,
    Array,
}

impl Reply {
    /// The VCL type of this reply.
    pub fn kind(&self) -> ReplyKind {
        match self {
            Self::Nil => ReplyKind::Nil,
            Self::Error(_) => ReplyKind::Error,
            Self::Status(_) => ReplyKind::Status,
            Self::Integer(_) => ReplyKind::Integer,
            Self::Boolean(_) => ReplyKind::Boolean,
            Self::Double(_) => ReplyKind::Double,
            Self::String(_) => ReplyKind::String,
            Self::Array(_) => ReplyKind::Array,
        }
    }

    /// Any scalar as text, as `.get_reply()` returns it; `None` for nil and
    /// arrays. Borrowed for the textual kinds; integers and doubles allocate
    /// their decimal form, booleans are `"1"` / `"0"`. See [`format_double`].
    pub fn text(&self) -> Option<Cow<'_, [u8]>> {
        match self {
            Self::Nil | Self::Array(_) => None,
            Self::Error(s) | Self::Status(s) => Some(Cow::Borrowed(s.as_bytes())),
            Self::String(b) => Some(Cow::Borrowed(b)),
            Self::Integer(i) => Some(Cow::Owned(i.to_string().into_bytes())),
            Self::Boolean(b) => Some(Cow::Borrowed(if *b { b"1" } else { b"0" })),
            Self::Double(d) => Some(Cow::Owned(format_double(*d).into_bytes())),
        }
    }

    /// The text of an error, status or string reply when `self` is of
    /// `kind` (`get_error_reply`, `get_status_reply`, `get_string_reply`);
    /// `None` otherwise, and always for the non-textual kinds.
    pub fn text_of_kind(&self, kind: ReplyKind) -> Option<&[u8]> {
        match (self, kind) {
            (Self::Error(s), ReplyKind::Error) | (Self::Status(s), ReplyKind::Status) => {
                Some(s.as_bytes())
            }
            (Self::String(b), ReplyKind::String) => Some(b),
            _ => None,
        }
    }

    /// The value of an integer reply, else 0.
    pub fn integer(&self) -> i64 {
        match self {
            Self::Integer(i) => *i,
            _ => 0,
        }
    }

    /// The value of a boolean reply, else false.
    pub fn boolean(&self) -> bool {
        matches!(self, Self::Boolean(true))
    }

    /// The value of a double reply, else 0.0.
    pub fn double(&self) -> f64 {
        match self {
            Self::Double(d) => *d,
            _ => 0.0,
        }
    }

    /// The element count of an array reply (maps count keys and values), else 0.
    pub fn array_len(&self) -> i64 {
        match self {
            Self::Array(a) => i64::try_from(a.len()).unwrap_or(i64::MAX),
            _ => 0,
        }
    }

    /// Element `index` of an array reply, then down `path`: dot-separated
    /// non-negative decimal indexes (`"0.1"` reads `[index][0][1]`), empty
    /// for none. `None` when not an array, negative, out of range, or the
    /// path is malformed (empty segment, non-digit, overflow).
    pub fn element(&self, index: i64, path: &str) -> Option<&Reply> {
        let mut cur = self.child(usize::try_from(index).ok()?)?;
        if !path.is_empty() {
            for segment in path.split('.') {
                cur = cur.child(parse_index(segment)?)?;
            }
        }
        Some(cur)
    }

    /// The value under `key` in a map reply: an array of even length read as
    /// key, value pairs (flattened RESP3 map, or RESP2 `HGETALL`). Keys
    /// compare by their [`text`](Self::text); the first match wins.
    pub fn map_value(&self, key: &[u8]) -> Option<&Reply> {
        match self {
            Self::Array(items) if items.len() % 2 == 0 => items
                .chunks_exact(2)
                .find(|pair| pair[0].text_is(key))
                .map(|pair| &pair[1]),
            _ => None,
        }
    }

    fn child(&self, index: usize) -> Option<&Reply> {
        match self {
            Self::Array(a) => a.get(index),
            _ => None,
        }
    }

    /// `text() == key`, without allocating for the usual string keys.
    fn text_is(&self, key: &[u8]) -> bool {
        match self {
            Self::Error(s) | Self::Status(s) => s.as_bytes() == key,
            Self::String(b) => b == key,
            _ => self.text().is_some_and(|t| *t == *key),
        }
    }
}

/// A path segment: ASCII digits only (`str::parse` would take `+1`).
fn parse_index(segment: &str) -> Option<usize> {
    if segment.is_empty() || !segment.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    segment.parse().ok()
}

/// A double as Redis writes it: the shortest text that parses back to the
/// same value, integral values without a fraction (`3`, not `3.0`),
/// `inf` / `-inf` / `nan`, and an exponent only outside
/// `[1e-6, 1e21)` (`1e+21`, `1e-7`), as Redis' own `fpconv_dtoa` and
/// JavaScript do, so no huge runs of zeros reach a header.
pub fn format_double(d: f64) -> String {
    if d.is_nan() {
        return "nan".to_owned();
    }
    if d.is_infinite() {
        return if d > 0.0 { "inf" } else { "-inf" }.to_owned();
    }
    let magnitude = d.abs();
    if magnitude == 0.0 || (1e-6..1e21).contains(&magnitude) {
        return d.to_string();
    }
    let mut s = format!("{d:e}");
    if let Some(e) = s.find('e') {
        if !s[e + 1..].starts_with('-') {
            s.insert(e + 1, '+');
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Reply {
        Reply::String(s.as_bytes().to_vec())
    }

    fn parsed(resp: &[u8]) -> Reply {
        super::super::resp::build(resp).expect("valid RESP")
    }

    #[test]
    fn rebuilds_error_text() {
        let cases: [&str; 5] = [
            "ERR unknown command 'FOO', with args beginning with: ",
            "NOSCRIPT No matching script. Please use EVAL.",
            "WRONGTYPE Operation against a key holding the wrong kind of value",
            "MOVED 3999 127.0.0.1:6381",
            "ERR",
        ];
        for line in cases {
            let wire = format!("-{line}\r\n");
            assert_eq!(parsed(wire.as_bytes()), Reply::Error(line.into()), "{line}");
        }
        // RESP3 blob error.
        assert_eq!(
            parsed(b"!21\r\nSYNTAX invalid syntax\r\n"),
            Reply::Error("SYNTAX invalid syntax".into())
        );
        // Nested error inside an array.
        assert_eq!(
            parsed(b"*2\r\n:1\r\n-ERR boom\r\n"),
            Reply::Array(vec![Reply::Integer(1), Reply::Error("ERR boom".into())])
        );
    }

    #[test]
    fn kinds() {
        let cases = [
            (Reply::Nil, ReplyKind::Nil),
            (Reply::Error("E".into()), ReplyKind::Error),
            (Reply::Status("S".into()), ReplyKind::Status),
            (Reply::Integer(1), ReplyKind::Integer),
            (Reply::Boolean(true), ReplyKind::Boolean),
            (Reply::Double(1.0), ReplyKind::Double),
            (bulk("s"), ReplyKind::String),
            (Reply::Array(vec![]), ReplyKind::Array),
        ];
        for (reply, kind) in cases {
            assert_eq!(reply.kind(), kind);
        }
    }

    #[test]
    fn text_of_every_kind() {
        let text = |r: Reply| r.text().map(|t| t.into_owned());
        assert_eq!(text(Reply::Nil), None);
        assert_eq!(text(Reply::Array(vec![bulk("x")])), None);
        assert_eq!(text(Reply::Error("ERR x".into())), Some(b"ERR x".to_vec()));
        assert_eq!(text(Reply::Status("OK".into())), Some(b"OK".to_vec()));
        assert_eq!(text(bulk("a\0b")), Some(b"a\0b".to_vec()));
        assert_eq!(text(bulk("")), Some(Vec::new()));
        assert_eq!(
            text(Reply::Integer(i64::MIN)),
            Some(b"-9223372036854775808".to_vec())
        );
        assert_eq!(text(Reply::Boolean(true)), Some(b"1".to_vec()));
        assert_eq!(text(Reply::Boolean(false)), Some(b"0".to_vec()));
        assert_eq!(text(Reply::Double(3.125)), Some(b"3.125".to_vec()));
        assert!(matches!(bulk("x").text(), Some(Cow::Borrowed(_))));
        assert!(matches!(
            Reply::Boolean(true).text(),
            Some(Cow::Borrowed(_))
        ));
    }

    #[test]
    fn double_formatting() {
        let cases: [(f64, &str); 16] = [
            (3.125, "3.125"),
            (3.0, "3"),
            (-2.5, "-2.5"),
            (0.0, "0"),
            (-0.0, "-0"),
            (0.1 + 0.2, "0.30000000000000004"),
            (1e20, "100000000000000000000"),
            (1e21, "1e+21"),
            (1.5e300, "1.5e+300"),
            (f64::MAX, "1.7976931348623157e+308"),
            (1e-6, "0.000001"),
            (1e-7, "1e-7"),
            (f64::MIN_POSITIVE, "2.2250738585072014e-308"),
            (f64::INFINITY, "inf"),
            (f64::NEG_INFINITY, "-inf"),
            (f64::NAN, "nan"),
        ];
        for (d, want) in cases {
            let got = format_double(d);
            assert_eq!(got, want);
            if d.is_finite() {
                assert_eq!(got.parse::<f64>().unwrap().to_bits(), d.to_bits(), "{got}");
            }
        }
    }

    #[test]
    fn text_of_kind_matches_only_its_kind() {
        let err = Reply::Error("ERR x".into());
        let status = Reply::Status("OK".into());
        let string = bulk("v");
        assert_eq!(err.text_of_kind(ReplyKind::Error), Some(&b"ERR x"[..]));
        assert_eq!(err.text_of_kind(ReplyKind::Status), None);
        assert_eq!(status.text_of_kind(ReplyKind::Status), Some(&b"OK"[..]));
        assert_eq!(status.text_of_kind(ReplyKind::String), None);
        assert_eq!(string.text_of_kind(ReplyKind::String), Some(&b"v"[..]));
        assert_eq!(string.text_of_kind(ReplyKind::Error), None);
        assert_eq!(Reply::Integer(1).text_of_kind(ReplyKind::Integer), None);
        assert_eq!(Reply::Nil.text_of_kind(ReplyKind::Nil), None);
    }

    #[test]
    fn typed_getters_default_to_zero() {
        assert_eq!(Reply::Integer(-3).integer(), -3);
        assert_eq!(bulk("5").integer(), 0);
        assert!(Reply::Boolean(true).boolean());
        assert!(!Reply::Boolean(false).boolean());
        assert!(!Reply::Integer(1).boolean());
        assert_eq!(Reply::Double(2.5).double(), 2.5);
        assert_eq!(Reply::Integer(2).double(), 0.0);
        assert_eq!(Reply::Array(vec![Reply::Nil, Reply::Nil]).array_len(), 2);
        assert_eq!(Reply::Array(vec![]).array_len(), 0);
        assert_eq!(bulk("ab").array_len(), 0);
        assert_eq!(Reply::Nil.array_len(), 0);
    }

    fn nested() -> Reply {
        // [ "a", [ 1, [ "x", nil ] ], 7 ]
        Reply::Array(vec![
            bulk("a"),
            Reply::Array(vec![
                Reply::Integer(1),
                Reply::Array(vec![bulk("x"), Reply::Nil]),
            ]),
            Reply::Integer(7),
        ])
    }

    #[test]
    fn element_by_index() {
        let r = nested();
        assert_eq!(r.element(0, ""), Some(&bulk("a")));
        assert_eq!(r.element(2, ""), Some(&Reply::Integer(7)));
        assert_eq!(r.element(3, ""), None);
        assert_eq!(r.element(-1, ""), None);
        assert_eq!(r.element(i64::MIN, ""), None);
        assert_eq!(r.element(i64::MAX, ""), None);
        assert_eq!(bulk("abc").element(0, ""), None);
        assert_eq!(Reply::Nil.element(0, ""), None);
    }

    #[test]
    fn element_by_path() {
        let r = nested();
        assert_eq!(r.element(1, "0"), Some(&Reply::Integer(1)));
        assert_eq!(r.element(1, "1.0"), Some(&bulk("x")));
        assert_eq!(r.element(1, "1.1"), Some(&Reply::Nil));
        assert_eq!(r.element(1, "01.0"), Some(&bulk("x")));
        assert_eq!(r.element(1, "1.2"), None);
        assert_eq!(r.element(1, "2"), None);
        // Descending into a scalar.
        assert_eq!(r.element(0, "0"), None);
        assert_eq!(r.element(1, "0.0"), None);
        // Malformed paths.
        for bad in [
            ".",
            "1.",
            ".1",
            "1..0",
            "a",
            "-1",
            "+1",
            " 1",
            "1 ",
            "1,0",
            "1.x",
            "99999999999999999999999",
        ] {
            assert_eq!(r.element(1, bad), None, "{bad:?}");
        }
    }

    #[test]
    fn map_by_key() {
        let map = Reply::Array(vec![
            bulk("name"),
            bulk("varnish"),
            Reply::Status("proto".into()),
            Reply::Integer(3),
            Reply::Integer(42),
            bulk("answer"),
            bulk("name"),
            bulk("shadowed"),
            Reply::Nil,
            bulk("nil key"),
        ]);
        assert_eq!(map.map_value(b"name"), Some(&bulk("varnish")));
        assert_eq!(map.map_value(b"proto"), Some(&Reply::Integer(3)));
        assert_eq!(map.map_value(b"42"), Some(&bulk("answer")));
        assert_eq!(map.map_value(b"varnish"), None, "values are not keys");
        assert_eq!(map.map_value(b"missing"), None);
        assert_eq!(map.map_value(b""), None);
        let odd = Reply::Array(vec![bulk("k"), bulk("v"), bulk("extra")]);
        assert_eq!(odd.map_value(b"k"), None);
        assert_eq!(bulk("k").map_value(b"k"), None);
        assert_eq!(Reply::Array(vec![]).map_value(b"k"), None);
        // A RESP3 map straight from the wire.
        let wire = parsed(b"%2\r\n+server\r\n+redis\r\n$5\r\nproto\r\n:3\r\n");
        assert_eq!(
            wire.map_value(b"server"),
            Some(&Reply::Status("redis".into()))
        );
        assert_eq!(wire.map_value(b"proto"), Some(&Reply::Integer(3)));
    }
}

/// Property tests of the readers VCL reaches with its own (untrusted)
/// arguments: nested paths, map keys, the text of every scalar.
///
/// Runtime: about 2 s of CPU in a debug build (`cargo test --lib
/// reply::proptests`). Found no bug.
#[cfg(test)]
mod proptests {
    use super::*;
    use proptest::collection::vec;
    use proptest::prelude::*;

    fn reply() -> impl Strategy<Value = Reply> {
        let leaf = prop_oneof![
            Just(Reply::Nil),
            "[a-c0-9]{0,2}".prop_map(Reply::Error),
            "[a-c0-9]{0,2}".prop_map(Reply::Status),
            (-3i64..12).prop_map(Reply::Integer),
            any::<bool>().prop_map(Reply::Boolean),
            prop_oneof![Just(1.0), Just(2.5), Just(-0.0), any::<f64>()].prop_map(Reply::Double),
            "[a-c0-9]{0,2}".prop_map(|s| Reply::String(s.into_bytes())),
            vec(any::<u8>(), 0..4).prop_map(Reply::String),
        ];
        leaf.prop_recursive(5, 64, 6, |inner| vec(inner, 0..6).prop_map(Reply::Array))
    }

    /// The reference reading of a path: the indexes, or None when malformed.
    fn reference_path(path: &str) -> Option<Vec<usize>> {
        let mut indexes = Vec::new();
        if path.is_empty() {
            return Some(indexes);
        }
        let mut current: Option<usize> = None;
        for c in path.chars() {
            match c {
                '0'..='9' => {
                    let digit = c as usize - '0' as usize;
                    current = Some(current.unwrap_or(0).checked_mul(10)?.checked_add(digit)?);
                }
                '.' => indexes.push(current.take()?),
                _ => return None,
            }
        }
        indexes.push(current?);
        Some(indexes)
    }

    fn reference_element<'a>(reply: &'a Reply, index: i64, path: &str) -> Option<&'a Reply> {
        let mut cur = reply;
        let first = usize::try_from(index).ok()?;
        for i in std::iter::once(first).chain(reference_path(path)?) {
            cur = match cur {
                Reply::Array(items) => items.get(i)?,
                _ => return None,
            };
        }
        Some(cur)
    }

    /// Paths as VCL might write them: valid ones (leading zeros too), and
    /// near misses (signs, blanks, empty segments, non-ASCII digits, overflow).
    fn path() -> impl Strategy<Value = String> {
        prop_oneof![
            vec((0..7usize, 0..3usize), 0..5).prop_map(|segments| {
                segments
                    .iter()
                    .map(|&(i, zeros)| format!("{}{i}", "0".repeat(zeros)))
                    .collect::<Vec<_>>()
                    .join(".")
            }),
            vec(
                prop::sample::select(vec![
                    "0",
                    "1",
                    "2",
                    "3",
                    ".",
                    "..",
                    "+",
                    "-",
                    " ",
                    "x",
                    "\u{663}",
                    "\u{ff11}",
                    "\0",
                    "18446744073709551616",
                    "99999999999999999999999",
                ]),
                0..8
            )
            .prop_map(|parts| parts.concat()),
            any::<String>(),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

        /// `element(index, path)` is the reference indexing, for any path.
        #[test]
        fn element_follows_the_reference(
            reply in reply(),
            index in prop_oneof![-2i64..8, any::<i64>()],
            path in path(),
        ) {
            let got = reply.element(index, &path);
            let want = reference_element(&reply, index, &path);
            prop_assert!(
                match (got, want) {
                    (Some(g), Some(w)) => std::ptr::eq(g, w),
                    (None, None) => true,
                    _ => false,
                },
                "{:?} {:?}: got {:?}, want {:?}", index, path, got, want
            );
        }

        /// `map_value` is the first even-position key whose text matches.
        #[test]
        fn map_value_is_the_first_matching_key(
            reply in reply(),
            key in prop_oneof!["[a-c0-9]{0,2}".prop_map(String::into_bytes), vec(any::<u8>(), 0..3)],
        ) {
            let want = match &reply {
                Reply::Array(items) if items.len() % 2 == 0 => items
                    .chunks_exact(2)
                    .find(|pair| pair[0].text().is_some_and(|t| *t == *key))
                    .map(|pair| &pair[1]),
                _ => None,
            };
            let got = reply.map_value(&key);
            prop_assert!(
                match (got, want) {
                    (Some(g), Some(w)) => std::ptr::eq(g, w),
                    (None, None) => true,
                    _ => false,
                },
                "{:?}: got {:?}, want {:?}", key, got, want
            );
        }

        /// Integers read back exactly.
        #[test]
        fn integer_text_parses_back(i in any::<i64>()) {
            let text = Reply::Integer(i).text().unwrap().into_owned();
            prop_assert_eq!(std::str::from_utf8(&text).unwrap().parse::<i64>(), Ok(i));
        }

        /// Doubles read back bit for bit, with an exponent only outside
        /// [1e-6, 1e21), as Redis writes them.
        #[test]
        fn double_text_parses_back(d in any::<f64>()) {
            let text = Reply::Double(d).text().unwrap().into_owned();
            let text = String::from_utf8(text).unwrap();
            if d.is_nan() {
                prop_assert_eq!(text, "nan");
            } else if d.is_infinite() {
                prop_assert_eq!(text, if d > 0.0 { "inf" } else { "-inf" });
            } else {
                prop_assert_eq!(text.parse::<f64>().map(f64::to_bits), Ok(d.to_bits()), "{}", text);
                let plain = d == 0.0 || (1e-6..1e21).contains(&d.abs());
                prop_assert_eq!(!text.contains('e'), plain, "{}", text);
                prop_assert!(text.len() <= 25, "{}", text);
            }
        }

        /// `text_of_kind` is `text` for the three textual kinds, else None.
        #[test]
        fn text_of_kind_agrees_with_text(reply in reply()) {
            for kind in [
                ReplyKind::Error, ReplyKind::Nil, ReplyKind::Status, ReplyKind::Integer,
                ReplyKind::Boolean, ReplyKind::Double, ReplyKind::String, ReplyKind::Array,
            ] {
                let textual = matches!(kind, ReplyKind::Error | ReplyKind::Status | ReplyKind::String);
                let want = (textual && reply.kind() == kind).then(|| reply.text().unwrap());
                prop_assert_eq!(reply.text_of_kind(kind), want.as_deref());
            }
        }
    }
}
