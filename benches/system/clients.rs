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

/// One persistent connection to Redis for INFO and setup, so that probing
/// adds no connection to `total_connections_received` during a run.
pub(crate) struct Probe {
    conn: RedisConn,
    /// Commands sent so far: Redis counts them in total_commands_processed.
    pub(crate) sent: u64,
}

impl Probe {
    pub(crate) fn connect(port: u16) -> Res<Probe> {
        let mut conn = RedisConn::open(port).map_err(|e| e.to_string())?;
        conn.set_timeouts(Duration::from_secs(10))
            .map_err(|e| e.to_string())?;
        Ok(Probe { conn, sent: 0 })
    }

    pub(crate) fn command(&mut self, args: &[&str]) -> Res<Resp> {
        self.sent += 1;
        self.conn
            .value(args)
            .map_err(|e| format!("redis probe: {e}"))
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
