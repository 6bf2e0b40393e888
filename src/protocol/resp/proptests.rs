//! Property tests: hostile bytes, and every RESP2/RESP3 reply a test-only
//! encoder can write, through [`scan`] and [`build`].
//!
//! Runtime: about 3.5 s of CPU in a debug build (`cargo test --lib
//! resp::proptests`); case counts are fixed below so the suite stays
//! bounded. Found the `rest[1..0]` panic on a header line starting with
//! "\r\n" (fixed in [`line`]).
use super::*;
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::Index;

/// Wire bytes and the reply [`build`] must make of them.
type Wire = (Vec<u8>, Reply);

/// `Reply` equality where doubles compare by bits (NaN equals NaN).
fn same(a: &Reply, b: &Reply) -> bool {
    match (a, b) {
        (Reply::Double(x), Reply::Double(y)) => {
            x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan())
        }
        (Reply::Array(x), Reply::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same(a, b))
        }
        _ => a == b,
    }
}

fn header(kind: u8, n: impl std::fmt::Display) -> Vec<u8> {
    let mut out = vec![kind];
    out.extend_from_slice(format!("{n}\r\n").as_bytes());
    out
}

fn payload(kind: u8, bytes: &[u8]) -> Vec<u8> {
    let mut out = header(kind, bytes.len());
    out.extend_from_slice(bytes);
    out.extend_from_slice(b"\r\n");
    out
}

/// Text of a `+` / `-` line: anything but CR and LF.
fn line_text() -> impl Strategy<Value = String> {
    "[^\r\n]{0,24}"
}

fn leaf() -> impl Strategy<Value = Wire> {
    let bytes = || vec(any::<u8>(), 0..40);
    prop_oneof![
        prop_oneof![Just("$-1"), Just("*-1"), Just("_")]
            .prop_map(|w| (format!("{w}\r\n").into_bytes(), Reply::Nil)),
        line_text().prop_map(|s| (header(b'+', &s), Reply::Status(s))),
        line_text().prop_map(|s| (header(b'-', &s), Reply::Error(s))),
        bytes().prop_map(|b| (
            payload(b'!', &b),
            Reply::Error(String::from_utf8_lossy(&b).into_owned())
        )),
        any::<i64>().prop_map(|i| (header(b':', i), Reply::Integer(i))),
        any::<bool>().prop_map(|b| (header(b'#', if b { "t" } else { "f" }), Reply::Boolean(b))),
        (any::<f64>(), 0..3u8).prop_map(|(d, style)| {
            let text = match style {
                _ if d.is_nan() => "nan".to_owned(),
                _ if d.is_infinite() => if d > 0.0 { "inf" } else { "-inf" }.to_owned(),
                0 => format!("{d}"),
                1 => format!("{d:e}"),
                _ => super::super::reply::format_double(d),
            };
            (header(b',', text), Reply::Double(d))
        }),
        bytes().prop_map(|b| (payload(b'$', &b), Reply::String(b))),
        (prop_oneof![Just("txt:"), Just("mkd:")], bytes()).prop_map(|(fmt, b)| {
            let mut verbatim = fmt.as_bytes().to_vec();
            verbatim.extend_from_slice(&b);
            (payload(b'=', &verbatim), Reply::String(b))
        }),
        "-?[0-9]{1,40}".prop_map(|n| (header(b'(', &n), Reply::String(n.into_bytes()))),
    ]
}

/// Any reply, nested at most 6 levels (aggregates and attributes).
fn wire() -> impl Strategy<Value = Wire> {
    leaf().prop_recursive(6, 48, 5, |inner| {
        prop_oneof![
            3 => (
                prop_oneof![Just(b'*'), Just(b'~'), Just(b'>'), Just(b'%')],
                vec(inner.clone(), 0..6),
            )
                .prop_map(|(kind, mut items)| {
                    if kind == b'%' && items.len() % 2 == 1 {
                        items.pop();
                    }
                    let count = if kind == b'%' { items.len() / 2 } else { items.len() };
                    let mut out = header(kind, count);
                    let mut replies = Vec::new();
                    for (bytes, reply) in items {
                        out.extend_from_slice(&bytes);
                        replies.push(reply);
                    }
                    (out, Reply::Array(replies))
                }),
            // Attributes are skipped: the reply is the annotated one.
            1 => (vec((inner.clone(), inner.clone()), 0..3), inner).prop_map(
                |(attributes, (bytes, reply))| {
                    let mut out = header(b'|', attributes.len());
                    for ((key, _), (value, _)) in attributes {
                        out.extend_from_slice(&key);
                        out.extend_from_slice(&value);
                    }
                    out.extend_from_slice(&bytes);
                    (out, reply)
                }
            ),
        ]
    })
}

/// Bytes that look like RESP often enough to reach deep into the parser.
fn resp_soup() -> impl Strategy<Value = Vec<u8>> {
    let token = prop_oneof![
        prop::sample::select(vec![
            "*",
            "$",
            "%",
            "~",
            ">",
            "|",
            "=",
            "!",
            "(",
            ",",
            "#",
            ":",
            "+",
            "-",
            "_",
            "0",
            "1",
            "2",
            "3",
            "-1",
            "-2",
            "t",
            "f",
            "inf",
            "nan",
            "txt:",
            "\r\n",
            "\r",
            "\n",
            "\r\n\r\n",
            "99999999999999999999",
            "1048577",
            "16777217",
        ])
        .prop_map(|t| t.as_bytes().to_vec()),
        vec(any::<u8>(), 1..4),
    ];
    vec(token, 0..48).prop_map(|tokens| tokens.concat())
}

/// A valid reply with a few bytes overwritten, inserted or removed.
fn mutated() -> impl Strategy<Value = Vec<u8>> {
    (wire(), vec((any::<Index>(), any::<u8>(), 0..3u8), 1..4)).prop_map(
        |((mut bytes, _), edits)| {
            for (at, byte, op) in edits {
                let i = at.index(bytes.len() + 1);
                match op {
                    0 if i < bytes.len() => bytes[i] = byte,
                    1 => bytes.insert(i, byte),
                    _ if i < bytes.len() => {
                        bytes.remove(i);
                    }
                    _ => {}
                }
            }
            bytes
        },
    )
}

fn hostile() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![vec(any::<u8>(), 0..256), resp_soup(), mutated()]
}

/// Aggregate and attribute headers that each open one more level.
fn opener() -> impl Strategy<Value = Vec<u8>> {
    (prop::sample::select(b"*~>%|".to_vec()), 0..4usize).prop_map(|(kind, extra)| {
        // `|0` still opens a level: the annotated reply follows it.
        let count = if kind == b'|' { extra } else { extra + 1 };
        header(kind, count)
    })
}

/// One level of nesting with a single slot for what follows: `|0`
/// (attributes: none), `%1` and its key, or a one-element aggregate.
fn level(kind: u8) -> Vec<u8> {
    match kind {
        b'|' => header(b'|', 0),
        b'%' => [header(b'%', 1), b"+k\r\n".to_vec()].concat(),
        _ => header(kind, 1),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    /// Any bytes: no panic, a length within the input, and what scan
    /// accepts, build accepts too.
    #[test]
    fn hostile_bytes_never_panic(buf in hostile()) {
        if let Ok(Some(len)) = scan(&buf) {
            prop_assert!(len > 0 && len <= buf.len(), "len {} of {}", len, buf.len());
            prop_assert_eq!(scan(&buf[..len]), Ok(Some(len)));
            prop_assert!(build(&buf[..len]).is_ok(), "{:?}", build(&buf[..len]));
        }
        // build is only ever given scanned bytes, but must not panic either.
        let _ = build(&buf);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 600, ..ProptestConfig::default() })]

    /// Whatever the encoding (RESP2 or RESP3, nested, with attributes),
    /// scan measures the whole reply and build gives it back.
    #[test]
    fn encoded_replies_round_trip((bytes, reply) in wire()) {
        prop_assert_eq!(scan(&bytes), Ok(Some(bytes.len())));
        let built = build(&bytes).unwrap();
        prop_assert!(same(&built, &reply), "{:?} != {:?}", built, reply);
        prop_assert_eq!(is_push(&bytes), bytes[0] == b'>');
    }

    /// A reply cut anywhere needs more bytes: never an error, never a
    /// shorter reply.
    #[test]
    fn strict_prefixes_are_incomplete(
        (bytes, _) in wire(),
        cuts in vec(any::<Index>(), 32),
    ) {
        let mut points: Vec<usize> = if bytes.len() <= 256 {
            (0..bytes.len()).collect()
        } else {
            cuts.iter().map(|c| c.index(bytes.len())).collect()
        };
        points.push(bytes.len() - 1);
        for cut in points {
            prop_assert_eq!(scan(&bytes[..cut]), Ok(None), "cut at {}", cut);
        }
    }

    /// Pipelined bytes after a reply are not part of it.
    #[test]
    fn trailing_bytes_are_not_read(
        (bytes, reply) in wire(),
        garbage in prop_oneof![vec(any::<u8>(), 0..64), resp_soup()],
    ) {
        let mut buf = bytes.clone();
        buf.extend_from_slice(&garbage);
        prop_assert_eq!(scan(&buf), Ok(Some(bytes.len())));
        prop_assert!(same(&build(&buf[..bytes.len()]).unwrap(), &reply));
    }

    /// Nesting up to MAX_DEPTH parses, one level more is refused
    /// (without recursion), whatever the aggregate types.
    #[test]
    fn nesting_is_bounded(
        openers in vec(opener(), MAX_DEPTH + 1..=4 * MAX_DEPTH),
        (tail, tail_reply) in leaf(),
    ) {
        let deep: Vec<u8> = openers.concat();
        prop_assert_eq!(scan(&deep), Err(ProtocolError::TooDeep));
        let mut deep = deep;
        deep.extend_from_slice(&tail);
        prop_assert_eq!(scan(&deep), Err(ProtocolError::TooDeep));

        // Exactly MAX_DEPTH levels around the leaf: accepted.
        let kinds: Vec<u8> = openers.iter().take(MAX_DEPTH).map(|o| o[0]).collect();
        let mut ok: Vec<u8> = kinds.iter().flat_map(|&k| level(k)).collect();
        ok.extend_from_slice(&tail);
        prop_assert_eq!(scan(&ok), Ok(Some(ok.len())));
        let mut want = tail_reply;
        for &kind in kinds.iter().rev() {
            want = match kind {
                b'|' => want,
                b'%' => Reply::Array(vec![Reply::Status("k".into()), want]),
                _ => Reply::Array(vec![want]),
            };
        }
        let built = build(&ok).unwrap();
        prop_assert!(same(&built, &want));
    }
}

#[test]
fn nesting_beyond_the_limit_on_a_small_stack() {
    // As on a Varnish worker: 64 KiB of stack, 100k levels requested.
    let handle = std::thread::Builder::new()
        .stack_size(64 * 1024)
        .spawn(|| {
            let kinds = b"*~>%|";
            let mut wire = Vec::new();
            for i in 0..100_000 {
                wire.extend_from_slice(&level(kinds[i % kinds.len()]));
            }
            wire.extend_from_slice(b":1\r\n");
            scan(&wire)
        })
        .unwrap();
    assert_eq!(handle.join().unwrap(), Err(ProtocolError::TooDeep));
}
