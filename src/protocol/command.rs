//! A command built by `.command()` / `.push()`, kept packed for the wire.
//!
//! One is built per request, so each argument is RESP-encoded into a single
//! growing buffer as it is pushed, and the `*N\r\n` header is written into
//! room reserved at the front: sending needs no further copy or allocation.

use std::fmt;
use std::time::Duration;

/// Room for the `*N\r\n` header: `*`, the 20 digits of `u64::MAX`, CRLF.
const HEADER_ROOM: usize = 1 + 20 + 2;

/// Arguments are rarely large: one allocation covers a typical command.
const INITIAL_CAPACITY: usize = 256;

/// The largest request sent, as packed: the same bound as a reply
/// ([`super::resp::MAX_REPLY_BYTES`]), so VCL cannot make a
/// worker buffer more than it could ever read back.
pub const MAX_COMMAND_BYTES: usize = super::resp::MAX_REPLY_BYTES;

/// How much of a command name goes into a log line.
pub const LOGGED_NAME_BYTES: usize = 64;

/// A Redis command, its arguments RESP-encoded as they are pushed.
#[derive(Clone)]
pub struct Command {
    /// `HEADER_ROOM` bytes of header room, then `$len\r\narg\r\n` per argument.
    buf: Vec<u8>,
    /// Arguments, the name included.
    argc: usize,
    /// Byte range of the name (argument 0) in `buf`.
    name: (usize, usize),
    /// Byte range of argument 1 (the script of an `EVAL`) in `buf`.
    script: (usize, usize),
    /// The `.timeout()` override: `None` keeps the database default,
    /// `Some(Duration::ZERO)` means no timeout.
    pub timeout: Option<Duration>,
    /// The `.retries()` override: `None` keeps the database default.
    pub retries: Option<u32>,
    /// Set once an argument would have taken the request past
    /// [`MAX_COMMAND_BYTES`]: the size it would have had. Later arguments
    /// are only counted, and the command fails instead of being sent.
    oversize: Option<usize>,
}

impl Command {
    /// A command whose first argument is `name`.
    pub fn new(name: &[u8]) -> Self {
        let mut buf = Vec::with_capacity(INITIAL_CAPACITY.max(HEADER_ROOM + name.len() + 32));
        buf.resize(HEADER_ROOM, 0);
        let mut command = Self {
            buf,
            argc: 0,
            name: (0, 0),
            script: (0, 0),
            timeout: None,
            retries: None,
            oversize: None,
        };
        command.push(name);
        command
    }

    /// The name and arguments as packed (`$len\r\narg\r\n` each), without
    /// the count: one spelling per command, the key of a near-cache entry.
    pub(crate) fn body(&self) -> &[u8] {
        &self.buf[HEADER_ROOM..]
    }

    /// Appends one binary-safe argument as `$len\r\narg\r\n`, unless
    /// the request would grow past [`MAX_COMMAND_BYTES`].
    pub fn push(&mut self, arg: &[u8]) {
        let mut digits = [0; 20];
        let len = decimal(arg.len(), &mut digits);
        let encoded = 1 + len.len() + 2 + arg.len() + 2;
        let size = match self.oversize {
            Some(size) => size + encoded,
            None => packed_len(self.argc + 1, self.buf.len() - HEADER_ROOM + encoded),
        };
        if self.oversize.is_some() || size > MAX_COMMAND_BYTES {
            self.oversize = Some(size);
            return;
        }
        self.buf.reserve(encoded);
        self.buf.push(b'$');
        self.buf.extend_from_slice(len);
        self.buf.extend_from_slice(b"\r\n");
        let range = (self.buf.len(), self.buf.len() + arg.len());
        self.buf.extend_from_slice(arg);
        self.buf.extend_from_slice(b"\r\n");
        match self.argc {
            0 => self.name = range,
            1 => self.script = range,
            _ => {}
        }
        self.argc += 1;
    }

    /// `Err(size)` when the pushed arguments would make a request larger
    /// than [`MAX_COMMAND_BYTES`]: such a command is never sent.
    pub fn check_size(&self) -> Result<(), usize> {
        self.oversize.map_or(Ok(()), Err)
    }

    /// The command name, as given.
    pub fn name(&self) -> &[u8] {
        &self.buf[self.name.0..self.name.1]
    }

    /// The name for log lines: lossy UTF-8, cut after
    /// [`LOGGED_NAME_BYTES`] bytes (VSL records are short, and VCL may
    /// pass anything as a name).
    pub fn logged_name(&self) -> String {
        let name = self.name();
        match name.get(..LOGGED_NAME_BYTES) {
            Some(head) if name.len() > LOGGED_NAME_BYTES => {
                format!("{}...", String::from_utf8_lossy(head))
            }
            _ => String::from_utf8_lossy(name).into_owned(),
        }
    }

    /// The argument after the name (a subcommand, or the script of an
    /// `EVAL`), if any.
    pub fn first_arg(&self) -> Option<&[u8]> {
        (self.argc >= 2).then(|| &self.buf[self.script.0..self.script.1])
    }

    /// Argument `index` (0: the name), found by walking the packed
    /// arguments: only cluster routing asks, once per command, so the
    /// standalone path keeps no index of them.
    pub fn arg(&self, index: usize) -> Option<&[u8]> {
        if index >= self.argc {
            return None;
        }
        let mut at = HEADER_ROOM;
        for current in 0..=index {
            // Each argument is `$len\r\narg\r\n`, as `push` wrote it.
            let digits_end = at + self.buf[at..].iter().position(|&b| b == b'\r')?;
            let len: usize = std::str::from_utf8(&self.buf[at + 1..digits_end])
                .ok()?
                .parse()
                .ok()?;
            let start = digits_end + 2;
            if current == index {
                return self.buf.get(start..start + len);
            }
            at = start + len + 2;
        }
        None
    }

    /// The number of arguments, the name included.
    pub fn arg_count(&self) -> usize {
        self.argc
    }

    /// Every argument after the name, in order, as pushed.
    pub fn args(&self) -> impl Iterator<Item = &[u8]> + '_ {
        let mut rest = &self.buf[self.name.1 + 2..];
        std::iter::from_fn(move || {
            // `$len\r\narg\r\n`, as `push` wrote it.
            let digits = rest.get(1..)?.iter().position(|&b| b == b'\r')?;
            let len: usize = std::str::from_utf8(&rest[1..1 + digits])
                .ok()?
                .parse()
                .ok()?;
            let start = 1 + digits + 2;
            let arg = rest.get(start..start + len)?;
            rest = rest.get(start + len + 2..)?;
            Some(arg)
        })
    }

    /// An `EVAL` (any case) with a script, so it may go out as `EVALSHA`.
    pub fn is_eval(&self) -> bool {
        self.argc >= 2 && self.name().eq_ignore_ascii_case(b"EVAL")
    }

    /// The exact length of [`packed`](Self::packed), for size limits.
    pub fn byte_len(&self) -> usize {
        packed_len(self.argc, self.buf.len() - HEADER_ROOM)
    }

    /// The RESP request `*N\r\n$len\r\narg\r\n...`. Takes `&mut self` to
    /// write the header in place, right-aligned before the arguments.
    pub fn packed(&mut self) -> &[u8] {
        let mut digits = [0; 20];
        let count = decimal(self.argc, &mut digits);
        let start = HEADER_ROOM - 3 - count.len();
        let header = &mut self.buf[start..HEADER_ROOM];
        header[0] = b'*';
        header[1..=count.len()].copy_from_slice(count);
        header[count.len() + 1..].copy_from_slice(b"\r\n");
        &self.buf[start..]
    }

    /// The request as `EVALSHA <sha1 of the script> numkeys ...`, the other
    /// arguments unchanged; `None` unless [`is_eval`](Self::is_eval).
    /// Allocates: it is only sent for scripts, and `packed()` stays the
    /// `EVAL` to fall back on after `NOSCRIPT`.
    pub fn packed_as_evalsha(&self) -> Option<Vec<u8>> {
        let sha = self.script_sha1_hex()?;
        let rest = &self.buf[self.script.1 + 2..];
        let mut digits = [0; 20];
        let count = decimal(self.argc, &mut digits);
        const NAME_AND_SHA: &[u8] = b"\r\n$7\r\nEVALSHA\r\n$40\r\n";
        let mut out = Vec::with_capacity(1 + count.len() + NAME_AND_SHA.len() + 42 + rest.len());
        out.push(b'*');
        out.extend_from_slice(count);
        out.extend_from_slice(NAME_AND_SHA);
        out.extend_from_slice(&sha);
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(rest);
        Some(out)
    }

    /// The lowercase hex SHA-1 of the script of an `EVAL`, as `EVALSHA` and
    /// `SCRIPT LOAD` name it; `None` unless [`is_eval`](Self::is_eval).
    pub fn script_sha1_hex(&self) -> Option<[u8; 40]> {
        if !self.is_eval() {
            return None;
        }
        let script = &self.buf[self.script.0..self.script.1];
        let digest = sha1_smol::Sha1::from(script).digest().bytes();
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut hex = [0; 40];
        for (pair, byte) in hex.chunks_exact_mut(2).zip(digest) {
            pair[0] = HEX[usize::from(byte >> 4)];
            pair[1] = HEX[usize::from(byte & 0xf)];
        }
        Some(hex)
    }
}

/// The length of a request of `argc` arguments whose encoded arguments
/// take `args_len` bytes: they follow the `*argc\r\n` header.
fn packed_len(argc: usize, args_len: usize) -> usize {
    let digits = argc.checked_ilog10().unwrap_or(0) as usize + 1;
    1 + digits + 2 + args_len
}

/// Short, so that logging a command never dumps a megabyte argument.
impl fmt::Debug for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Command")
            .field("name", &self.logged_name())
            .field("args", &self.argc)
            .field("bytes", &self.byte_len())
            .field("timeout", &self.timeout)
            .field("retries", &self.retries)
            .finish()
    }
}

/// Writes `n` in decimal at the end of `out`, returning the digits; avoids
/// the `fmt` machinery on the per-argument path.
fn decimal(mut n: usize, out: &mut [u8; 20]) -> &[u8] {
    let mut i = out.len();
    loop {
        i -= 1;
        // `n % 10` is a single digit: the cast cannot truncate.
        out[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &out[i..];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reference encoding, built the obvious way.
    fn resp(args: &[&[u8]]) -> Vec<u8> {
        let mut out = format!("*{}\r\n", args.len()).into_bytes();
        for arg in args {
            out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
            out.extend_from_slice(arg);
            out.extend_from_slice(b"\r\n");
        }
        out
    }

    fn command(args: &[&[u8]]) -> Command {
        let mut c = Command::new(args[0]);
        for arg in &args[1..] {
            c.push(arg);
        }
        c
    }

    #[test]
    fn arguments_by_index() {
        let big = vec![b'x'; 1000];
        let c = command(&[b"SET", b"", &big, b"\r\n"]);
        assert_eq!(c.arg(0), Some(&b"SET"[..]));
        assert_eq!(c.arg(1), Some(&b""[..]));
        assert_eq!(c.arg(2), Some(&big[..]));
        assert_eq!(c.arg(3), Some(&b"\r\n"[..]));
        assert_eq!(c.arg(4), None);
    }

    #[test]
    fn packs_name_only() {
        let mut c = Command::new(b"PING");
        assert_eq!(c.packed(), b"*1\r\n$4\r\nPING\r\n");
        assert_eq!(c.byte_len(), c.packed().len());
        assert_eq!(c.name(), b"PING");
        assert_eq!(c.arg_count(), 1);
    }

    #[test]
    fn packs_arguments() {
        let args: [&[u8]; 3] = [b"SET", b"key", b"value"];
        let mut c = command(&args);
        assert_eq!(
            c.packed(),
            b"*3\r\n$3\r\nSET\r\n$3\r\nkey\r\n$5\r\nvalue\r\n"
        );
        assert_eq!(c.arg_count(), 3);
    }

    #[test]
    fn packs_many_arguments() {
        let owned: Vec<Vec<u8>> = (0..1234).map(|i| format!("arg{i}").into_bytes()).collect();
        let mut args: Vec<&[u8]> = vec![b"RPUSH"];
        args.extend(owned.iter().map(Vec::as_slice));
        let mut c = command(&args);
        assert_eq!(c.arg_count(), 1235);
        assert_eq!(c.byte_len(), resp(&args).len());
        assert_eq!(c.packed(), resp(&args));
    }

    #[test]
    fn packs_binary_and_empty_arguments() {
        let args: [&[u8]; 5] = [b"", b"a\0b", b"\r\n", b"", b"$3\r\n*1"];
        let mut c = command(&args);
        assert_eq!(c.name(), b"");
        assert_eq!(c.packed(), resp(&args));
        assert_eq!(c.byte_len(), resp(&args).len());
    }

    #[test]
    fn packs_a_large_argument() {
        let big = vec![0xA5; 1 << 20];
        let mut c = command(&[b"SET", b"k", &big]);
        let want = resp(&[b"SET", b"k", &big]);
        assert_eq!(c.byte_len(), want.len());
        assert!(c
            .packed()
            .starts_with(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1048576\r\n"));
        assert_eq!(c.packed(), want);
    }

    #[test]
    fn packed_is_repeatable_and_push_after_it_works() {
        let mut c = command(&[b"MGET", b"a"]);
        let first = c.packed().to_vec();
        assert_eq!(c.packed(), first);
        assert_eq!(first, resp(&[b"MGET", b"a"]));
        for i in 0..20 {
            c.push(b"b");
            let mut args: Vec<&[u8]> = vec![b"MGET", b"a"];
            args.extend(std::iter::repeat(&b"b"[..]).take(i + 1));
            assert_eq!(c.packed(), resp(&args), "crossing 10 arguments");
            assert_eq!(c.byte_len(), c.packed().len());
        }
    }

    #[test]
    fn detects_eval() {
        for name in [&b"EVAL"[..], b"eval", b"EvAl"] {
            assert!(command(&[name, b"return 1", b"0"]).is_eval());
            assert!(command(&[name, b"return 1"]).is_eval());
            assert!(!Command::new(name).is_eval(), "no script");
        }
        for name in [&b"EVALSHA"[..], b"EVA", b"EVAL_RO", b"GET", b""] {
            assert!(!command(&[name, b"return 1", b"0"]).is_eval());
        }
        assert_eq!(Command::new(b"GET").script_sha1_hex(), None);
        assert_eq!(command(&[b"GET", b"k"]).packed_as_evalsha(), None);
    }

    #[test]
    fn rewrites_eval_as_evalsha() {
        let sha = b"e0e1f9fabfc9d4800c877a703b823ac0578ff8db";
        let mut c = command(&[b"eval", b"return 1", b"2", b"k1", b"k2", b"a\0\r\n"]);
        assert_eq!(c.script_sha1_hex().as_ref(), Some(sha));
        assert_eq!(
            c.packed_as_evalsha().unwrap(),
            resp(&[b"EVALSHA", sha, b"2", b"k1", b"k2", b"a\0\r\n"])
        );
        // The EVAL to fall back on after NOSCRIPT is untouched.
        assert_eq!(
            c.packed(),
            resp(&[b"eval", b"return 1", b"2", b"k1", b"k2", b"a\0\r\n"])
        );
        // Script alone, and empty script (sha1("") is well known).
        let c = command(&[b"EVAL", b"return 1"]);
        assert_eq!(c.packed_as_evalsha().unwrap(), resp(&[b"EVALSHA", sha]));
        let c = command(&[b"EVAL", b"", b"0"]);
        assert_eq!(
            c.script_sha1_hex().as_ref(),
            Some(b"da39a3ee5e6b4b0d3255bfef95601890afd80709")
        );
    }

    #[test]
    fn overrides_default_to_none() {
        let mut c = Command::new(b"GET");
        assert_eq!((c.timeout, c.retries), (None, None));
        c.timeout = Some(Duration::ZERO);
        c.retries = Some(0);
        assert_eq!((c.timeout, c.retries), (Some(Duration::ZERO), Some(0)));
        let debug = format!("{c:?}");
        assert!(debug.contains("\"GET\""), "{debug}");
    }

    #[test]
    fn an_argument_past_the_size_limit_is_refused_not_buffered() {
        let mut c = Command::new(b"RPUSH");
        c.push(b"k");
        let chunk = vec![b'x'; 1 << 20];
        let mut pushed = 0;
        while c.check_size().is_ok() {
            c.push(&chunk);
            pushed += 1;
        }
        assert_eq!(pushed, 16, "15 arguments of 1 MiB fit, the 16th does not");
        let Err(size) = c.check_size() else {
            unreachable!()
        };
        assert!(size > MAX_COMMAND_BYTES);
        assert!(
            c.byte_len() <= MAX_COMMAND_BYTES,
            "the refused argument was not kept"
        );
        assert!(c.buf.capacity() <= 2 * MAX_COMMAND_BYTES);
        // Later arguments are only counted.
        c.push(b"more");
        assert_eq!(c.check_size(), Err(size + 1 + 1 + 2 + 4 + 2));
    }

    #[test]
    fn a_command_just_at_the_size_limit_is_kept() {
        let mut c = Command::new(b"SET");
        c.push(b"k");
        // What is left for the value, with its `$len\r\n` and `\r\n`.
        let room = MAX_COMMAND_BYTES - c.byte_len() - (1 + 8 + 2 + 2);
        c.push(&vec![b'v'; room]);
        assert_eq!(c.check_size(), Ok(()));
        assert_eq!(c.byte_len(), MAX_COMMAND_BYTES);
        assert_eq!(c.packed().len(), MAX_COMMAND_BYTES);
    }

    #[test]
    fn args_are_read_back_as_pushed() {
        let mut command = Command::new(b"XREAD");
        for arg in [&b"COUNT"[..], b"", b"a\r\n$3\r\nb", b"BLOCK"] {
            command.push(arg);
        }
        let args: Vec<&[u8]> = command.args().collect();
        assert_eq!(args, [&b"COUNT"[..], b"", b"a\r\n$3\r\nb", b"BLOCK"]);
        assert_eq!(Command::new(b"PING").args().count(), 0);
    }

    #[test]
    fn logged_name_is_cut_after_64_bytes() {
        assert_eq!(Command::new(b"GET").logged_name(), "GET");
        let exact = vec![b'a'; LOGGED_NAME_BYTES];
        assert_eq!(Command::new(&exact).logged_name().len(), LOGGED_NAME_BYTES);
        let long = Command::new(&vec![b'b'; 1 << 20]).logged_name();
        assert_eq!(long, format!("{}...", "b".repeat(LOGGED_NAME_BYTES)));
        assert_eq!(Command::new(b"\xffX").logged_name(), "\u{fffd}X");
    }

    #[test]
    fn decimal_digits() {
        let mut d = [0; 20];
        assert_eq!(decimal(0, &mut d), b"0");
        assert_eq!(decimal(10, &mut d), b"10");
        assert_eq!(
            decimal(usize::MAX, &mut d),
            usize::MAX.to_string().as_bytes()
        );
    }
}

/// Property tests: whatever VCL pushes (binary, empty, CRLF, RESP-looking
/// text), the packed request is read back by a RESP reader as exactly
/// those arguments.
///
/// Runtime: about 2 s of CPU in a debug build (`cargo test --lib
/// command::proptests`). Found no bug.
#[cfg(test)]
mod proptests {
    use super::super::resp;
    use super::super::Reply;
    use super::*;
    use proptest::collection::vec;
    use proptest::prelude::*;

    fn arg() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            vec(any::<u8>(), 0..48),
            vec(
                prop::sample::select(vec![
                    "\r\n", "\r", "\n", "$", "*", "3", "-1", "\0", "EVAL", "a",
                ]),
                0..8
            )
            .prop_map(|parts| parts.concat().into_bytes()),
            Just(Vec::new()),
        ]
    }

    /// A request read the way a server reads it: one complete RESP array of
    /// bulk strings and nothing else.
    fn decode(packed: &[u8]) -> Vec<Vec<u8>> {
        assert_eq!(resp::scan(packed), Ok(Some(packed.len())));
        match resp::build(packed).unwrap() {
            Reply::Array(items) => items
                .into_iter()
                .map(|item| match item {
                    Reply::String(bytes) => bytes,
                    other => panic!("not a bulk string: {other:?}"),
                })
                .collect(),
            other => panic!("not an array: {other:?}"),
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

        /// Packing then reading gives the arguments back, with `packed()`
        /// called between pushes (the header is rewritten as argc grows,
        /// also across 10 and 100 arguments).
        #[test]
        fn packed_reads_back_as_the_arguments(
            args in prop_oneof![4 => vec(arg(), 1..12), 1 => vec(arg(), 90..120)],
            peeks in vec(prop::bool::weighted(0.1), 120),
        ) {
            let mut command = Command::new(&args[0]);
            for (i, a) in args.iter().enumerate().skip(1) {
                if peeks[i] {
                    prop_assert_eq!(decode(command.packed()), &args[..i]);
                }
                command.push(a);
            }
            let len = command.byte_len();
            let packed = command.packed().to_vec();
            prop_assert_eq!(len, packed.len());
            prop_assert_eq!(decode(&packed), args.clone());
            prop_assert_eq!(command.name(), &args[0][..]);
            prop_assert_eq!(command.arg_count(), args.len());
            prop_assert_eq!(command.packed(), &packed[..], "packed() is repeatable");
        }

        /// `EVAL script ...` as `EVALSHA sha1(script) ...`: every other
        /// argument kept, the EVAL itself untouched.
        #[test]
        fn evalsha_keeps_the_arguments(
            name in prop::sample::select(vec!["EVAL", "eval", "Eval", "eVAL"]),
            script in arg(),
            rest in vec(arg(), 0..8),
        ) {
            let mut command = Command::new(name.as_bytes());
            command.push(&script);
            for a in &rest {
                command.push(a);
            }
            let sha = sha1_smol::Sha1::from(&script).digest().to_string();
            prop_assert_eq!(command.script_sha1_hex().map(|h| h.to_vec()), Some(sha.clone().into_bytes()));
            let mut want = vec![b"EVALSHA".to_vec(), sha.into_bytes()];
            want.extend(rest.iter().cloned());
            prop_assert_eq!(decode(&command.packed_as_evalsha().unwrap()), want);
            let mut eval = vec![name.as_bytes().to_vec(), script.clone()];
            eval.extend(rest);
            prop_assert_eq!(decode(command.packed()), eval);
        }

        /// Anything not `EVAL` with a script is never rewritten.
        #[test]
        fn only_eval_is_rewritten(args in vec(arg(), 1..4)) {
            let mut command = Command::new(&args[0]);
            for a in &args[1..] {
                command.push(a);
            }
            let eval = args.len() >= 2 && args[0].eq_ignore_ascii_case(b"EVAL");
            prop_assert_eq!(command.is_eval(), eval);
            prop_assert_eq!(command.packed_as_evalsha().is_some(), eval);
            prop_assert_eq!(command.script_sha1_hex().is_some(), eval);
        }
    }
}
