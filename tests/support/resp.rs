//! Whole RESP2 replies (nested arrays included), for [`super::RedisConn::value`].
use std::io::{self, BufRead};

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
