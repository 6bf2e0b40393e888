//! A small HTTP client on loopback.
use super::*;

pub(crate) struct Response {
    pub(crate) status: u16,
    pub(crate) headers: HashMap<String, String>,
    /// Lossy UTF-8.
    pub(crate) body: String,
}

/// Reads one HTTP/1.1 response (Content-Length bodies only: Varnish's
/// synthetic responses have one).
pub(crate) fn read_response(reader: &mut BufReader<TcpStream>) -> io::Result<Response> {
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    let status = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, format!("status {line:?}")))?;
    let mut headers = HashMap::new();
    loop {
        line.clear();
        if reader.read_line(&mut line)? == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        if let Some((name, value)) = l.split_once(':') {
            headers.insert(name.trim().to_ascii_lowercase(), value.trim().to_string());
        }
    }
    let len: usize = headers
        .get("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; len];
    reader.read_exact(&mut body)?;
    let body = String::from_utf8_lossy(&body).into_owned();
    Ok(Response {
        status,
        headers,
        body,
    })
}

pub(crate) fn request(reader: &mut BufReader<TcpStream>, path: &str) -> io::Result<Response> {
    let req = format!("GET {path} HTTP/1.1\r\nHost: faults\r\n\r\n");
    reader.get_mut().write_all(req.as_bytes())?;
    read_response(reader)
}

pub(crate) fn connect(port: u16, timeout: Duration) -> io::Result<BufReader<TcpStream>> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    Ok(BufReader::new(stream))
}

/// One GET on a fresh connection, 10 s at most.
pub(crate) fn http_get(port: u16, path: &str) -> io::Result<Response> {
    let mut conn = connect(port, Duration::from_secs(10))?;
    request(&mut conn, path)
}

/// The counters of database `db` (`/<db>/stats`).
pub(crate) fn counters(port: u16, db: &str) -> Res<Counters> {
    let resp = http_get(port, &format!("/{db}/stats")).map_err(|e| format!("/{db}/stats: {e}"))?;
    if resp.status != 200 {
        return Err(format!("/{db}/stats: status {}", resp.status));
    }
    let mut values = HashMap::new();
    for name in COUNTERS {
        let header = format!("x-c-{}", name.replace('.', "-"));
        let value = resp
            .headers
            .get(&header)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| format!("/{db}/stats: no header {header}"))?;
        values.insert(*name, value);
    }
    Ok(Counters(values))
}

pub(crate) const COUNTERS: &[&str] = &[
    "connections.total",
    "connections.failed",
    "connections.dropped.error",
    "connections.dropped.hung_up",
    "connections.dropped.overflow",
    "connections.dropped.ttl",
    "connections.dropped.sick",
    "workers.blocked",
    "commands.total",
    "commands.failed",
    "commands.retried",
    "commands.error",
    "commands.noscript",
    "cluster.discoveries.total",
    "cluster.discoveries.failed",
    "cluster.replies.moved",
    "cluster.replies.ask",
];

pub(crate) struct Counters(HashMap<&'static str, u64>);

impl Counters {
    pub(crate) fn get(&self, name: &str) -> u64 {
        self.0.get(name).copied().unwrap_or(0)
    }
}

impl std::fmt::Display for Counters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts: Vec<String> = COUNTERS
            .iter()
            .filter(|n| self.get(n) != 0)
            .map(|n| format!("{n} {}", self.get(n)))
            .collect();
        write!(f, "{}", parts.join(", "))
    }
}
