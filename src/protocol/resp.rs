//! RESP2 / RESP3 reply parsing, straight into [`Reply`].
//!
//! Iterative (an explicit stack, never recursion): a Varnish worker has a
//! small stack (`thread_pool_stack`, 80k by default) and a Lua script can
//! nest replies as deep as it likes. Bounded: a reply larger than
//! [`MAX_REPLY_BYTES`], with more than [`MAX_ELEMENTS`] elements or nested
//! deeper than [`MAX_DEPTH`] is refused (the connection is then dropped),
//! so a broken or hostile server cannot exhaust memory.
//!
//! Parsing is two passes over the buffered bytes: [`scan`] finds where the
//! reply ends (cheap, no allocation; [`scan_from`] resumes where it stopped
//! as more bytes arrive), then [`build`] turns exactly those bytes into a
//! [`Reply`].
use super::Reply;

/// Largest reply accepted, in bytes on the wire. Anything bigger could not
/// be copied into a Varnish workspace anyway.
pub const MAX_REPLY_BYTES: usize = 16 << 20;
/// Most elements (of all nested aggregates) in one reply.
pub const MAX_ELEMENTS: usize = 1 << 20;
/// Deepest nesting of aggregates in one reply.
pub const MAX_DEPTH: usize = 64;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtocolError {
    #[error("protocol error: {0}")]
    Malformed(&'static str),
    #[error("protocol error: unknown reply type byte 0x{0:02x}")]
    UnknownType(u8),
    #[error("reply larger than {MAX_REPLY_BYTES} bytes")]
    TooLarge,
    #[error("reply with more than {MAX_ELEMENTS} elements")]
    TooManyElements,
    #[error("reply nested deeper than {MAX_DEPTH} levels")]
    TooDeep,
}

type Result<T> = std::result::Result<T, ProtocolError>;

/// One header line: its type byte, its text, and where the next item starts.
struct Line<'a> {
    kind: u8,
    text: &'a [u8],
    next: usize,
}

/// The header line at `pos`, or None when it is not complete yet.
fn line(buf: &[u8], pos: usize) -> Result<Option<Line<'_>>> {
    let Some(rest) = buf.get(pos..) else {
        return Ok(None);
    };
    let Some(&kind) = rest.first() else {
        return Ok(None);
    };
    // The CRLF ends the text after the type byte: searching from the type
    // byte itself would take a leading "\r\n" for an empty line whose text
    // ends before it starts (`rest[1..0]`, a panic).
    match rest[1..].windows(2).position(|w| w == b"\r\n") {
        Some(end) => Ok(Some(Line {
            kind,
            text: &rest[1..1 + end],
            next: pos + 1 + end + 2,
        })),
        None if rest.len() > 64 * 1024 => Err(ProtocolError::Malformed("header line too long")),
        None => Ok(None),
    }
}

fn parse_int(text: &[u8]) -> Result<i64> {
    std::str::from_utf8(text)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or(ProtocolError::Malformed("invalid integer"))
}

/// A length header: None for the null forms (`$-1`, `*-1`).
fn parse_len(text: &[u8]) -> Result<Option<usize>> {
    match parse_int(text)? {
        -1 => Ok(None),
        n if n < 0 => Err(ProtocolError::Malformed("negative length")),
        n => usize::try_from(n)
            .map(Some)
            .map_err(|_| ProtocolError::TooLarge),
    }
}

/// What a header line announces.
enum Item {
    /// A complete scalar (header only).
    Scalar(Reply),
    /// A bulk payload of `len` bytes after the header.
    Bulk { kind: u8, len: usize },
    /// An aggregate of `count` children (maps: 2 per entry).
    Aggregate { kind: u8, count: usize },
    /// `|` attributes: `count` children to skip, then the real reply.
    Attribute { count: usize },
}

fn item(line: &Line) -> Result<Item> {
    let text = line.text;
    let owned = || String::from_utf8_lossy(text).into_owned();
    Ok(match line.kind {
        b'+' => Item::Scalar(Reply::Status(owned())),
        b'-' => Item::Scalar(Reply::Error(owned())),
        b':' => Item::Scalar(Reply::Integer(parse_int(text)?)),
        b'_' => Item::Scalar(Reply::Nil),
        b'#' => Item::Scalar(Reply::Boolean(match text {
            b"t" => true,
            b"f" => false,
            _ => return Err(ProtocolError::Malformed("invalid boolean")),
        })),
        b',' => Item::Scalar(Reply::Double(parse_double(text)?)),
        b'(' => {
            let digits = text.strip_prefix(b"-").unwrap_or(text);
            if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
                return Err(ProtocolError::Malformed("invalid big number"));
            }
            Item::Scalar(Reply::String(text.to_vec()))
        }
        b'$' | b'=' | b'!' => match parse_len(text)? {
            None if line.kind == b'$' => Item::Scalar(Reply::Nil),
            None => return Err(ProtocolError::Malformed("null verbatim or blob error")),
            Some(len) if len > MAX_REPLY_BYTES => return Err(ProtocolError::TooLarge),
            Some(len) => Item::Bulk {
                kind: line.kind,
                len,
            },
        },
        b'*' | b'~' | b'>' | b'%' | b'|' => match parse_len(text)? {
            None if line.kind == b'*' => Item::Scalar(Reply::Nil),
            None => return Err(ProtocolError::Malformed("null aggregate")),
            Some(count) => {
                let count = if matches!(line.kind, b'%' | b'|') {
                    count.checked_mul(2).ok_or(ProtocolError::TooManyElements)?
                } else {
                    count
                };
                if count > MAX_ELEMENTS {
                    return Err(ProtocolError::TooManyElements);
                }
                if line.kind == b'|' {
                    Item::Attribute { count }
                } else {
                    Item::Aggregate {
                        kind: line.kind,
                        count,
                    }
                }
            }
        },
        other => return Err(ProtocolError::UnknownType(other)),
    })
}

fn parse_double(text: &[u8]) -> Result<f64> {
    let text = std::str::from_utf8(text).map_err(|_| ProtocolError::Malformed("invalid double"))?;
    match text {
        "inf" | "+inf" => Ok(f64::INFINITY),
        "-inf" => Ok(f64::NEG_INFINITY),
        "nan" | "-nan" => Ok(f64::NAN),
        _ => text
            .parse()
            .map_err(|_| ProtocolError::Malformed("invalid double")),
    }
}

/// Where the bulk payload of `len` bytes at `pos` ends (after its CRLF), or
/// None when not all of it has arrived.
fn bulk_end(buf: &[u8], pos: usize, len: usize) -> Result<Option<usize>> {
    let end = pos + len;
    match buf.get(end..end + 2) {
        Some(b"\r\n") => Ok(Some(end + 2)),
        Some(_) => Err(ProtocolError::Malformed(
            "bulk payload not followed by CRLF",
        )),
        None => Ok(None),
    }
}

/// Where [`scan_from`] stopped in a reply that has not fully arrived: the
/// next call resumes there, so a large reply read in many pieces is
/// scanned once, not once per read (which took quadratic time).
#[derive(Debug, Default)]
pub struct ScanState {
    /// Where the first item not scanned yet starts.
    pos: usize,
    /// Children still expected by each open aggregate, innermost last.
    pending: Vec<usize>,
    /// Elements announced by the aggregates so far.
    elements: usize,
}

/// The length in bytes of the first complete reply in `buf`, None when
/// more bytes are needed.
pub fn scan(buf: &[u8]) -> Result<Option<usize>> {
    scan_from(buf, &mut ScanState::default())
}

/// [`scan`], resuming where the previous call with `state` stopped: `buf`
/// holds the bytes it was given then, and maybe more. `state` is reset
/// when a reply is complete; after an error it must not be used again.
pub fn scan_from(buf: &[u8], state: &mut ScanState) -> Result<Option<usize>> {
    let ScanState {
        pos,
        pending,
        elements,
    } = state;
    loop {
        let Some(header) = line(buf, *pos)? else {
            return Ok(None);
        };
        let mut next = header.next;
        let mut completed = true;
        match item(&header)? {
            Item::Scalar(_) => {}
            Item::Bulk { len, .. } => {
                // Refused at its header when it would end past the limit.
                if next + len + 2 > MAX_REPLY_BYTES {
                    return Err(ProtocolError::TooLarge);
                }
                match bulk_end(buf, next, len)? {
                    Some(end) => next = end,
                    // Resume at this header when more bytes are in.
                    None => return Ok(None),
                }
            }
            Item::Aggregate { count, .. } | Item::Attribute { count } => {
                *elements += count;
                if *elements > MAX_ELEMENTS {
                    return Err(ProtocolError::TooManyElements);
                }
                // An attribute is followed by the reply it annotates.
                let count = if header.kind == b'|' {
                    count + 1
                } else {
                    count
                };
                if count > 0 {
                    if pending.len() >= MAX_DEPTH {
                        return Err(ProtocolError::TooDeep);
                    }
                    pending.push(count);
                    completed = false;
                }
            }
        }
        if next > MAX_REPLY_BYTES {
            return Err(ProtocolError::TooLarge);
        }
        *pos = next;
        if completed {
            // Close every aggregate this item completed.
            loop {
                match pending.last_mut() {
                    None => {
                        let len = *pos;
                        *pos = 0;
                        *elements = 0;
                        return Ok(Some(len));
                    }
                    Some(left) => {
                        *left -= 1;
                        if *left > 0 {
                            break;
                        }
                        pending.pop();
                    }
                }
            }
        }
    }
}

/// An aggregate being built: its kind, children expected, children so far.
struct Open {
    kind: u8,
    count: usize,
    items: Vec<Reply>,
}

/// Builds the reply in `buf`, which must hold exactly one complete reply
/// (as [`scan`] measured it). RESP3 maps are flattened (key, value, ...),
/// sets and pushes become arrays, verbatim strings lose their `txt:`
/// prefix, blob errors become errors, attributes are dropped.
pub fn build(buf: &[u8]) -> Result<Reply> {
    let mut stack: Vec<Open> = Vec::new();
    let mut pos = 0;
    loop {
        let header = line(buf, pos)?.ok_or(ProtocolError::Malformed("truncated reply"))?;
        pos = header.next;
        let mut value = match item(&header)? {
            Item::Scalar(reply) => Some(reply),
            Item::Bulk { kind, len } => {
                let end =
                    bulk_end(buf, pos, len)?.ok_or(ProtocolError::Malformed("truncated reply"))?;
                let payload = &buf[pos..pos + len];
                pos = end;
                Some(match kind {
                    b'!' => Reply::Error(String::from_utf8_lossy(payload).into_owned()),
                    // Verbatim: "txt:" / "mkd:" then the text.
                    b'=' => Reply::String(payload.get(4..).unwrap_or_default().to_vec()),
                    _ => Reply::String(payload.to_vec()),
                })
            }
            Item::Aggregate { count: 0, .. } => Some(Reply::Array(Vec::new())),
            Item::Aggregate { kind, count } => {
                stack.push(Open {
                    kind,
                    count,
                    items: Vec::with_capacity(count.min(1024)),
                });
                None
            }
            Item::Attribute { count } => {
                stack.push(Open {
                    kind: b'|',
                    count: count + 1,
                    items: Vec::new(),
                });
                None
            }
        };
        // Hand the finished value to its parent, closing full parents.
        while let Some(done) = value.take() {
            let Some(parent) = stack.last_mut() else {
                return Ok(done);
            };
            parent.items.push(done);
            if parent.items.len() == parent.count {
                let open = stack.pop().expect("parent exists");
                value = Some(match open.kind {
                    // The annotated reply is the last child.
                    b'|' => open.items.into_iter().last().unwrap_or(Reply::Nil),
                    _ => Reply::Array(open.items),
                });
            }
        }
    }
}

/// True for an out-of-band RESP3 push (`>`), which is not the reply to a
/// command and is skipped.
pub fn is_push(buf: &[u8]) -> bool {
    buf.first() == Some(&b'>')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(wire: &[u8]) -> Result<Reply> {
        let len = scan(wire)?.expect("complete");
        assert_eq!(len, wire.len(), "scan measures the whole reply");
        build(&wire[..len])
    }

    fn s(text: &str) -> Reply {
        Reply::String(text.as_bytes().to_vec())
    }

    #[test]
    fn resp2_scalars() {
        assert_eq!(parse(b"+OK\r\n"), Ok(Reply::Status("OK".into())));
        assert_eq!(
            parse(b"-ERR bad thing\r\n"),
            Ok(Reply::Error("ERR bad thing".into()))
        );
        assert_eq!(parse(b":-42\r\n"), Ok(Reply::Integer(-42)));
        assert_eq!(parse(b"$5\r\nhello\r\n"), Ok(s("hello")));
        assert_eq!(parse(b"$0\r\n\r\n"), Ok(s("")));
        assert_eq!(parse(b"$-1\r\n"), Ok(Reply::Nil));
        assert_eq!(parse(b"*-1\r\n"), Ok(Reply::Nil));
        assert_eq!(
            parse(b"$4\r\na\r\nb\r\n"),
            Ok(Reply::String(b"a\r\nb".to_vec()))
        );
    }

    #[test]
    fn resp2_arrays_nested() {
        assert_eq!(parse(b"*0\r\n"), Ok(Reply::Array(vec![])));
        assert_eq!(
            parse(b"*3\r\n:1\r\n*2\r\n$1\r\na\r\n*0\r\n$-1\r\n"),
            Ok(Reply::Array(vec![
                Reply::Integer(1),
                Reply::Array(vec![s("a"), Reply::Array(vec![])]),
                Reply::Nil,
            ]))
        );
    }

    #[test]
    fn resp3_types() {
        assert_eq!(parse(b"_\r\n"), Ok(Reply::Nil));
        assert_eq!(parse(b"#t\r\n"), Ok(Reply::Boolean(true)));
        assert_eq!(parse(b"#f\r\n"), Ok(Reply::Boolean(false)));
        assert_eq!(parse(b",2.5\r\n"), Ok(Reply::Double(2.5)));
        assert_eq!(parse(b",-inf\r\n"), Ok(Reply::Double(f64::NEG_INFINITY)));
        assert!(matches!(parse(b",nan\r\n"), Ok(Reply::Double(d)) if d.is_nan()));
        assert_eq!(
            parse(b"(-12345678901234567890\r\n"),
            Ok(s("-12345678901234567890"))
        );
        assert_eq!(parse(b"=9\r\ntxt:hello\r\n"), Ok(s("hello")));
        assert_eq!(parse(b"!5\r\nOOPS!\r\n"), Ok(Reply::Error("OOPS!".into())));
        assert_eq!(
            parse(b"%2\r\n+a\r\n:1\r\n+b\r\n#t\r\n"),
            Ok(Reply::Array(vec![
                Reply::Status("a".into()),
                Reply::Integer(1),
                Reply::Status("b".into()),
                Reply::Boolean(true),
            ]))
        );
        assert_eq!(
            parse(b"~2\r\n:1\r\n:2\r\n"),
            Ok(Reply::Array(vec![Reply::Integer(1), Reply::Integer(2)]))
        );
        assert_eq!(parse(b"%0\r\n"), Ok(Reply::Array(vec![])));
    }

    #[test]
    fn attributes_are_dropped() {
        assert_eq!(
            parse(b"|1\r\n+key\r\n+val\r\n:7\r\n"),
            Ok(Reply::Integer(7))
        );
        assert_eq!(
            parse(b"*2\r\n|1\r\n+k\r\n+v\r\n:1\r\n:2\r\n"),
            Ok(Reply::Array(vec![Reply::Integer(1), Reply::Integer(2)]))
        );
    }

    #[test]
    fn incomplete_replies_need_more_bytes() {
        let wire = b"*2\r\n$5\r\nhello\r\n:12\r\n";
        for cut in 0..wire.len() {
            assert_eq!(scan(&wire[..cut]), Ok(None), "cut at {cut}");
        }
        assert_eq!(scan(wire), Ok(Some(wire.len())));
        // Bytes after the reply (pipelined) are not part of it.
        assert_eq!(scan(b"+OK\r\n+NEXT\r\n"), Ok(Some(5)));
    }

    #[test]
    fn malformed_replies_are_errors() {
        assert_eq!(scan(b"?x\r\n"), Err(ProtocolError::UnknownType(b'?')));
        assert!(scan(b":12a\r\n").is_err());
        assert!(scan(b"$3\r\nabcd\r\n").is_err());
        assert!(scan(b"$-2\r\n").is_err());
        assert!(scan(b"#x\r\n").is_err());
        assert!(scan(b",abc\r\n").is_err());
        assert!(scan(b"(12a\r\n").is_err());
        assert!(scan(&[b'+'; 70 * 1024]).is_err());
        // A line starting with its own CRLF (found by the proptests: used to
        // panic on `rest[1..0]`): the type byte is '\r', an unknown type.
        assert_eq!(scan(b"\r\n"), Ok(None));
        assert_eq!(scan(b"\r\n:1\r\n"), Err(ProtocolError::UnknownType(b'\r')));
        assert_eq!(scan(b"*1\r\n\r\n"), Ok(None));
        assert!(build(b"*1\r\n\r\n").is_err());
    }

    #[test]
    fn limits_are_enforced() {
        assert_eq!(
            scan(format!("${}\r\n", MAX_REPLY_BYTES + 1).as_bytes()),
            Err(ProtocolError::TooLarge)
        );
        assert_eq!(
            scan(format!("*{}\r\n", MAX_ELEMENTS + 1).as_bytes()),
            Err(ProtocolError::TooManyElements)
        );
        let deep = "*1\r\n".repeat(MAX_DEPTH + 1);
        assert_eq!(scan(deep.as_bytes()), Err(ProtocolError::TooDeep));
    }

    #[test]
    fn deep_nesting_within_the_limit_needs_no_stack() {
        // Runs on a small thread stack, as a Varnish worker would.
        let handle = std::thread::Builder::new()
            .stack_size(64 * 1024)
            .spawn(|| {
                let mut wire = "*1\r\n".repeat(MAX_DEPTH);
                wire.push_str(":1\r\n");
                let reply = parse(wire.as_bytes()).unwrap();
                let mut depth = 0;
                let mut current = &reply;
                while let Reply::Array(items) = current {
                    depth += 1;
                    current = &items[0];
                }
                // Dropping the nested reply must not overflow either.
                drop(reply);
                depth
            })
            .unwrap();
        assert_eq!(handle.join().unwrap(), MAX_DEPTH);
    }

    #[test]
    fn push_detection() {
        assert!(is_push(b">2\r\n+invalidate\r\n*0\r\n"));
        assert!(!is_push(b"*1\r\n:1\r\n"));
    }
}

#[cfg(test)]
mod proptests;
