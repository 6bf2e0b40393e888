//! A keep-alive HTTP/1.1 client for varnishd on loopback.
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::time::Duration;

/// A keep-alive HTTP/1.1 connection to varnishd on 127.0.0.1.
pub struct HttpConn(BufReader<TcpStream>);

/// A response's status and headers (names lower-case); bodies are read
/// (Content-Length only, as Varnish's synthetic responses have) and dropped.
pub struct HttpResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
}

impl HttpResponse {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

impl HttpConn {
    /// 2 s to connect, `timeout` per read and write.
    pub fn open(port: u16, timeout: Duration) -> io::Result<HttpConn> {
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(timeout))?;
        stream.set_write_timeout(Some(timeout))?;
        Ok(HttpConn(BufReader::new(stream)))
    }

    /// `GET path` with the given request headers (values must be valid
    /// header values: no CR, LF).
    pub fn get(&mut self, path: &str, headers: &[(&str, &str)]) -> io::Result<HttpResponse> {
        let mut req = format!("GET {path} HTTP/1.1\r\nHost: test\r\n");
        for (name, value) in headers {
            req.push_str(&format!("{name}: {value}\r\n"));
        }
        req.push_str("\r\n");
        self.0.get_mut().write_all(req.as_bytes())?;
        let mut line = String::new();
        if self.0.read_line(&mut line)? == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        let status = line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| {
                io::Error::new(io::ErrorKind::InvalidData, format!("status {line:?}"))
            })?;
        let mut headers = Vec::new();
        loop {
            line.clear();
            if self.0.read_line(&mut line)? == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            let l = line.trim_end();
            if l.is_empty() {
                break;
            }
            if let Some((name, value)) = l.split_once(':') {
                headers.push((name.trim().to_ascii_lowercase(), value.trim().to_string()));
            }
        }
        let response = HttpResponse { status, headers };
        let len: usize = response
            .header("content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let mut body = vec![0; len];
        self.0.read_exact(&mut body)?;
        Ok(response)
    }
}
