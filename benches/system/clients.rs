//! Small clients on loopback: HTTP GET and RESP.
use super::*;

// Small clients: HTTP GET and RESP, on loopback.

/// `GET path` with `Connection: close`: (status, body).
pub(crate) fn http_get(port: u16, path: &str) -> Res<(u16, String)> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| e.to_string())?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&raw);
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("bad HTTP response: {:.200}", text))?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Ok((status, body))
}

/// A RESP reply.
#[derive(Debug)]
#[allow(
    dead_code,
    reason = "the payloads only show through `Debug` in error messages"
)]
pub(crate) enum Resp {
    Simple(String),
    Error(String),
    Int(i64),
    Bulk(Option<String>),
    Array(Vec<Resp>),
}

/// One persistent connection to Redis for INFO and setup, so that probing
/// adds no connection to `total_connections_received` during a run.
pub(crate) struct Probe {
    pub(crate) reader: BufReader<TcpStream>,
    /// Commands sent so far: Redis counts them in total_commands_processed.
    pub(crate) sent: u64,
}

impl Probe {
    pub(crate) fn connect(port: u16) -> Res<Probe> {
        let stream = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .map_err(|e| e.to_string())?;
        Ok(Probe {
            reader: BufReader::new(stream),
            sent: 0,
        })
    }

    pub(crate) fn command(&mut self, args: &[&str]) -> Res<Resp> {
        let mut req = format!("*{}\r\n", args.len());
        for a in args {
            let _ = write!(req, "${}\r\n{a}\r\n", a.len());
        }
        self.reader
            .get_mut()
            .write_all(req.as_bytes())
            .map_err(|e| e.to_string())?;
        self.sent += 1;
        self.read()
    }

    pub(crate) fn read(&mut self) -> Res<Resp> {
        let mut line = String::new();
        self.reader
            .read_line(&mut line)
            .map_err(|e| format!("redis probe: {e}"))?;
        let line = line.trim_end_matches(['\r', '\n']);
        let (kind, rest) = line.split_at(line.len().min(1));
        let int = || {
            rest.parse::<i64>()
                .map_err(|_| format!("redis probe: bad line {line:?}"))
        };
        Ok(match kind {
            "+" => Resp::Simple(rest.to_owned()),
            "-" => Resp::Error(rest.to_owned()),
            ":" => Resp::Int(int()?),
            "$" => {
                let n = int()?;
                if n < 0 {
                    Resp::Bulk(None)
                } else {
                    let mut buf = vec![0; n as usize + 2];
                    self.reader
                        .read_exact(&mut buf)
                        .map_err(|e| e.to_string())?;
                    buf.truncate(n as usize);
                    Resp::Bulk(Some(String::from_utf8_lossy(&buf).into_owned()))
                }
            }
            "*" => {
                let n = int()?;
                let mut items = Vec::new();
                for _ in 0..n.max(0) {
                    items.push(self.read()?);
                }
                Resp::Array(items)
            }
            _ => return Err(format!("redis probe: bad line {line:?}")),
        })
    }

    /// `INFO` of these sections (several in one command since Redis 7).
    pub(crate) fn info_text(&mut self, sections: &[&str]) -> Option<String> {
        let mut args = vec!["INFO"];
        args.extend(sections);
        match self.command(&args).ok()? {
            Resp::Bulk(Some(text)) => Some(text),
            _ => None,
        }
    }

    pub(crate) fn info(&mut self, section: &str, field: &str) -> Option<u64> {
        info_field(&self.info_text(&[section])?, field)
    }
}

/// The value of `field:` in an INFO reply.
pub(crate) fn info_field<T: std::str::FromStr>(text: &str, field: &str) -> Option<T> {
    text.lines().find_map(|l| {
        l.strip_prefix(field)
            .and_then(|r| r.strip_prefix(':'))
            .and_then(|v| v.trim().parse().ok())
    })
}
