//! The one RESP client of the harnesses and the system bench: commands on
//! a loopback connection, whole RESP2 replies (nested arrays included).
use std::io::{self, BufRead, BufReader, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::time::Duration;

use super::Res;

/// A whole RESP2 reply.
#[derive(Clone, Debug, PartialEq)]
pub enum Resp {
    Status(String),
    Error(String),
    Int(i64),
    /// A bulk string (lossy UTF-8); `None` for the nil bulk string.
    Bulk(Option<String>),
    /// `None` for the nil array.
    Array(Option<Vec<Resp>>),
}

impl Resp {
    /// A status or bulk string's text.
    pub fn text(&self) -> Option<&str> {
        match self {
            Resp::Status(s) | Resp::Bulk(Some(s)) => Some(s),
            _ => None,
        }
    }

    /// An array's elements (none for anything else).
    pub fn items(&self) -> &[Resp] {
        match self {
            Resp::Array(Some(items)) => items,
            _ => &[],
        }
    }

    /// A RESP2 map (an array of key, value, key, value...): the value of `key`.
    pub fn get(&self, key: &str) -> Option<&Resp> {
        self.items()
            .chunks(2)
            .find(|kv| kv[0].text() == Some(key))
            .and_then(|kv| kv.get(1))
    }
}

/// Reads one RESP2 reply; nesting is bounded (64 levels) as the replies
/// come from test servers only.
pub fn read_value(r: &mut impl BufRead) -> io::Result<Resp> {
    read_value_at(r, 0)
}

fn read_value_at(r: &mut impl BufRead, depth: usize) -> io::Result<Resp> {
    let bad = |what: &str| io::Error::new(io::ErrorKind::InvalidData, what.to_string());
    if depth > 64 {
        return Err(bad("reply nested too deep"));
    }
    let mut line = String::new();
    if r.read_line(&mut line)? == 0 {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "connection closed",
        ));
    }
    let line = line.trim_end_matches(['\r', '\n']);
    let (kind, rest) = line.split_at(line.len().min(1));
    let number = || rest.parse::<i64>().map_err(|_| bad("bad length"));
    Ok(match kind {
        "+" => Resp::Status(rest.to_string()),
        "-" => Resp::Error(rest.to_string()),
        ":" => Resp::Int(number()?),
        "$" => {
            let len = number()?;
            if len < 0 {
                Resp::Bulk(None)
            } else {
                let mut data = vec![0; len as usize + 2];
                r.read_exact(&mut data)?;
                data.truncate(len as usize);
                Resp::Bulk(Some(String::from_utf8_lossy(&data).into_owned()))
            }
        }
        "*" => {
            let len = number()?;
            if len < 0 {
                Resp::Array(None)
            } else {
                let items = (0..len)
                    .map(|_| read_value_at(r, depth + 1))
                    .collect::<io::Result<Vec<_>>>()?;
                Resp::Array(Some(items))
            }
        }
        _ => return Err(bad(&format!("unexpected reply line {line:?}"))),
    })
}

/// Minimal RESP client on 127.0.0.1: sends one command (after `AUTH` when a
/// password is given) and returns the reply's line, or a bulk string's
/// content. 500 ms to connect, 2 s per read and write.
pub fn redis_cmd(port: u16, password: Option<&str>, args: &[&str]) -> io::Result<String> {
    redis_cmd_at(Ipv4Addr::LOCALHOST, port, password, args)
}

/// [`redis_cmd`] to a server on another loopback address (127.0.1.1...).
pub fn redis_cmd_at(
    host: Ipv4Addr,
    port: u16,
    password: Option<&str>,
    args: &[&str],
) -> io::Result<String> {
    let mut conn = RedisConn::open_at(host, port)?;
    if let Some(pw) = password {
        let auth = conn.cmd(&["AUTH", pw])?;
        if auth.starts_with('-') {
            return Ok(auth);
        }
    }
    conn.cmd(args)
}

/// A connection kept for many commands (a resharding sends hundreds):
/// 500 ms to connect, 2 s per read and write.
pub struct RedisConn(BufReader<TcpStream>);

impl RedisConn {
    pub fn open(port: u16) -> io::Result<RedisConn> {
        RedisConn::open_at(Ipv4Addr::LOCALHOST, port)
    }

    pub fn open_at(host: Ipv4Addr, port: u16) -> io::Result<RedisConn> {
        let addr = SocketAddr::from((host, port));
        let stream = TcpStream::connect_timeout(&addr, Duration::from_millis(500))?;
        stream.set_read_timeout(Some(Duration::from_secs(2)))?;
        stream.set_write_timeout(Some(Duration::from_secs(2)))?;
        Ok(RedisConn(BufReader::new(stream)))
    }

    /// Reads and writes may take up to `bound` (2 s when opened).
    pub fn set_timeouts(&mut self, bound: Duration) -> io::Result<()> {
        self.0.get_ref().set_read_timeout(Some(bound))?;
        self.0.get_ref().set_write_timeout(Some(bound))
    }

    /// One command: its reply's line (`+OK`, `-ERR ...`, `:1`, `*2`: an
    /// array is read whole), or a bulk string's content (nil: empty).
    pub fn cmd(&mut self, args: &[&str]) -> io::Result<String> {
        Ok(match self.value(args)? {
            Resp::Status(text) => format!("+{text}"),
            Resp::Error(text) => format!("-{text}"),
            Resp::Int(n) => format!(":{n}"),
            Resp::Bulk(text) => text.unwrap_or_default(),
            Resp::Array(items) => format!("*{}", items.map_or(-1, |items| items.len() as i64)),
        })
    }

    /// [`RedisConn::cmd`] where an error reply is an error.
    pub fn ok(&mut self, args: &[&str]) -> Res<String> {
        match self.cmd(args) {
            Ok(reply) if reply.starts_with('-') => Err(format!("{}: {reply}", args.join(" "))),
            Ok(reply) => Ok(reply),
            Err(e) => Err(format!("{}: {e}", args.join(" "))),
        }
    }

    /// One command and its whole reply, nested arrays included.
    pub fn value(&mut self, args: &[&str]) -> io::Result<Resp> {
        let mut buf = Vec::new();
        encode(&mut buf, args);
        self.0.get_mut().write_all(&buf)?;
        read_value(&mut self.0)
    }

    /// One command whose reply is an array of bulk strings.
    pub fn cmd_array(&mut self, args: &[&str]) -> io::Result<Vec<String>> {
        match self.value(args)? {
            Resp::Array(Some(items)) => Ok(items
                .iter()
                .map(|item| item.text().unwrap_or_default().to_string())
                .collect()),
            other => Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{other:?}"),
            )),
        }
    }
}

fn encode(buf: &mut Vec<u8>, args: &[&str]) {
    buf.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for a in args {
        buf.extend_from_slice(format!("${}\r\n{a}\r\n", a.len()).as_bytes());
    }
}

/// The value of `field:` in an INFO reply.
pub fn info_field<T: std::str::FromStr>(text: &str, field: &str) -> Option<T> {
    text.lines().find_map(|l| {
        l.strip_prefix(field)
            .and_then(|r| r.strip_prefix(':'))
            .and_then(|v| v.trim().parse().ok())
    })
}
