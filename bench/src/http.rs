//! A minimal HTTP/1.1 client over one keep-alive `TcpStream`: requests are pre-encoded bytes,
//! responses are parsed with `httparse`, bodies are counted (or kept) and never copied into
//! anything heavier. Much cheaper per request than the servers it measures.

use std::net::SocketAddr;
use std::net::ToSocketAddrs;
use std::time::Duration;

use bytes::Buf;
use bytes::BytesMut;
use tokio::io::AsyncReadExt;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// Most response headers either server sends; more is an error.
const MAX_HEADERS: usize = 64;
/// A response head larger than this is an error.
const MAX_HEAD_BYTES: usize = 64 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    #[error("connection closed by the server")]
    Closed,
    #[error("bad response: {0}")]
    Parse(String),
    #[error("no response within {0:?}")]
    Timeout(Duration),
}

impl From<httparse::Error> for HttpError {
    fn from(e: httparse::Error) -> Self {
        HttpError::Parse(e.to_string())
    }
}

/// Where the servers listen: a loopback socket address and the `Host` header for it.
#[derive(Debug, Clone)]
pub struct Target {
    pub addr: SocketAddr,
    pub host: String,
}

impl Target {
    /// Parses `http://HOST:PORT[/]`; refuses anything that is not a loopback address.
    pub fn parse(base: &str) -> Result<Target, HttpError> {
        let rest = base
            .strip_prefix("http://")
            .ok_or_else(|| HttpError::Parse(format!("{base}: only http:// URLs are supported")))?;
        let host = rest.trim_end_matches('/');
        if host.contains('/') {
            return Err(HttpError::Parse(format!(
                "{base}: give the server root, without a path"
            )));
        }
        let addr = host
            .to_socket_addrs()?
            .next()
            .ok_or_else(|| HttpError::Parse(format!("{base}: does not resolve")))?;
        if !addr.ip().is_loopback() {
            return Err(HttpError::Parse(format!(
                "{base}: only loopback addresses are allowed"
            )));
        }
        Ok(Target {
            addr,
            host: host.to_owned(),
        })
    }

    /// Encodes a request with an octet-stream body (or none, for `body = None`).
    pub fn request(&self, method: &str, path: &str, body: Option<&[u8]>) -> Vec<u8> {
        let mut out = format!("{method} {path} HTTP/1.1\r\nHost: {}\r\n", self.host).into_bytes();
        if let Some(body) = body {
            out.extend_from_slice(
                format!(
                    "Content-Type: application/octet-stream\r\nContent-Length: {}\r\n\r\n",
                    body.len()
                )
                .as_bytes(),
            );
            out.extend_from_slice(body);
        } else {
            out.extend_from_slice(b"\r\n");
        }
        out
    }
}

/// What the client needs from a response head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Head {
    pub status: u16,
    pub content_length: Option<usize>,
    pub chunked: bool,
    /// `Stream-Sse-Data-Encoding: base64`.
    pub base64: bool,
}

impl Head {
    fn has_body(&self, head_request: bool) -> bool {
        !(head_request
            || self.status == 204
            || self.status == 304
            || (100..200).contains(&self.status))
    }
}

/// Incremental decoder of a `Transfer-Encoding: chunked` body.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub enum Chunked {
    #[default]
    Size,
    Data(usize),
    DataEnd,
    Trailer,
    Done,
}

impl Chunked {
    /// Consumes what it can from `buf`, appending body bytes to `out` (when given) and adding
    /// their count to `n`. Returns `true` once the last chunk and the trailer are consumed.
    pub fn decode(
        &mut self,
        buf: &mut BytesMut,
        mut out: Option<&mut Vec<u8>>,
        n: &mut usize,
    ) -> Result<bool, HttpError> {
        loop {
            match *self {
                Chunked::Size => {
                    let Some(pos) = find_crlf(buf) else {
                        return Ok(false);
                    };
                    let line = std::str::from_utf8(&buf[..pos])
                        .map_err(|e| HttpError::Parse(e.to_string()))?;
                    let hex = line.split(';').next().unwrap_or("").trim();
                    let size = usize::from_str_radix(hex, 16)
                        .map_err(|_| HttpError::Parse(format!("bad chunk size {hex:?}")))?;
                    buf.advance(pos + 2);
                    *self = if size == 0 {
                        Chunked::Trailer
                    } else {
                        Chunked::Data(size)
                    };
                }
                Chunked::Data(left) => {
                    if buf.is_empty() {
                        return Ok(false);
                    }
                    let k = left.min(buf.len());
                    if let Some(o) = out.as_deref_mut() {
                        o.extend_from_slice(&buf[..k]);
                    }
                    *n += k;
                    buf.advance(k);
                    *self = if k == left {
                        Chunked::DataEnd
                    } else {
                        Chunked::Data(left - k)
                    };
                }
                Chunked::DataEnd => {
                    if buf.len() < 2 {
                        return Ok(false);
                    }
                    if &buf[..2] != b"\r\n" {
                        return Err(HttpError::Parse("chunk not followed by CRLF".into()));
                    }
                    buf.advance(2);
                    *self = Chunked::Size;
                }
                Chunked::Trailer => {
                    let Some(pos) = find_crlf(buf) else {
                        return Ok(false);
                    };
                    buf.advance(pos + 2);
                    if pos == 0 {
                        *self = Chunked::Done;
                    }
                }
                Chunked::Done => return Ok(true),
            }
        }
    }
}

fn find_crlf(buf: &[u8]) -> Option<usize> {
    buf.windows(2).position(|w| w == b"\r\n")
}

/// One keep-alive connection.
#[derive(Debug)]
pub struct Conn {
    stream: TcpStream,
    buf: BytesMut,
}

impl Conn {
    pub async fn connect(target: &Target) -> Result<Conn, HttpError> {
        let stream = TcpStream::connect(target.addr).await?;
        stream.set_nodelay(true)?;
        Ok(Conn {
            stream,
            buf: BytesMut::with_capacity(16 * 1024),
        })
    }

    pub async fn send(&mut self, req: &[u8]) -> Result<(), HttpError> {
        self.stream.write_all(req).await?;
        Ok(())
    }

    /// Reads more bytes into the buffer; a closed connection is an error.
    pub async fn fill(&mut self) -> Result<(), HttpError> {
        if self.buf.capacity() - self.buf.len() < 4096 {
            self.buf.reserve(16 * 1024);
        }
        match self.stream.read_buf(&mut self.buf).await? {
            0 => Err(HttpError::Closed),
            _ => Ok(()),
        }
    }

    /// Reads and consumes one response head.
    pub async fn read_head(&mut self) -> Result<Head, HttpError> {
        loop {
            let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
            let mut resp = httparse::Response::new(&mut headers);
            if let httparse::Status::Complete(len) = resp.parse(&self.buf)? {
                let mut head = Head {
                    status: resp.code.unwrap_or(0),
                    content_length: None,
                    chunked: false,
                    base64: false,
                };
                for h in resp.headers.iter() {
                    if h.name.eq_ignore_ascii_case("content-length") {
                        let v = std::str::from_utf8(h.value)
                            .ok()
                            .and_then(|s| s.trim().parse().ok());
                        head.content_length =
                            Some(v.ok_or_else(|| HttpError::Parse("bad Content-Length".into()))?);
                    } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
                        head.chunked = h.value.eq_ignore_ascii_case(b"chunked");
                    } else if h.name.eq_ignore_ascii_case("stream-sse-data-encoding") {
                        head.base64 = h.value.eq_ignore_ascii_case(b"base64");
                    }
                }
                self.buf.advance(len);
                return Ok(head);
            }
            if self.buf.len() > MAX_HEAD_BYTES {
                return Err(HttpError::Parse("response head too large".into()));
            }
            self.fill().await?;
        }
    }

    /// Reads a whole body, returning its length; keeps the bytes in `out` when given.
    pub async fn read_body(
        &mut self,
        head: &Head,
        mut out: Option<&mut Vec<u8>>,
    ) -> Result<usize, HttpError> {
        if head.chunked {
            let mut dec = Chunked::default();
            let mut n = 0;
            while !dec.decode(&mut self.buf, out.as_deref_mut(), &mut n)? {
                self.fill().await?;
            }
            return Ok(n);
        }
        let Some(len) = head.content_length else {
            return Err(HttpError::Parse(format!(
                "status {} with neither Content-Length nor chunked",
                head.status
            )));
        };
        let mut left = len;
        while left > 0 {
            if self.buf.is_empty() {
                self.fill().await?;
            }
            let k = left.min(self.buf.len());
            if let Some(o) = out.as_deref_mut() {
                o.extend_from_slice(&self.buf[..k]);
            }
            self.buf.advance(k);
            left -= k;
        }
        Ok(len)
    }

    /// Sends one request and reads its whole response: `(status, body length)`.
    pub async fn roundtrip(&mut self, req: &[u8]) -> Result<(u16, usize), HttpError> {
        self.send(req).await?;
        let head = self.read_head().await?;
        let len = if head.has_body(req.starts_with(b"HEAD ")) {
            self.read_body(&head, None).await?
        } else {
            0
        };
        Ok((head.status, len))
    }

    /// [`Conn::roundtrip`] bounded by `limit`.
    pub async fn roundtrip_within(
        &mut self,
        req: &[u8],
        limit: Duration,
    ) -> Result<(u16, usize), HttpError> {
        tokio::time::timeout(limit, self.roundtrip(req))
            .await
            .map_err(|_| HttpError::Timeout(limit))?
    }

    /// Bytes received but not consumed yet (for streaming bodies).
    pub fn buffer(&mut self) -> &mut BytesMut {
        &mut self.buf
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunked_decodes_across_splits() {
        let wire = b"5\r\nhello\r\n6;x=y\r\n world\r\n0\r\nTrailer: a\r\n\r\nNEXT";
        for split in 0..wire.len() {
            let mut dec = Chunked::default();
            let mut out = Vec::new();
            let mut n = 0;
            let mut buf = BytesMut::from(&wire[..split]);
            let done = dec
                .decode(&mut buf, Some(&mut out), &mut n)
                .expect("first part");
            buf.extend_from_slice(&wire[split..]);
            let done = done
                || dec
                    .decode(&mut buf, Some(&mut out), &mut n)
                    .expect("second part");
            assert!(done, "split at {split}");
            assert_eq!(out, b"hello world");
            assert_eq!(n, 11);
            assert_eq!(&buf[..], b"NEXT");
        }
    }

    #[test]
    fn target_refuses_non_loopback() {
        assert!(Target::parse("http://127.0.0.1:4437").is_ok());
        assert!(Target::parse("http://127.0.0.1:4437/").is_ok());
        assert!(Target::parse("http://10.0.0.1:4437").is_err());
        assert!(Target::parse("https://127.0.0.1:4437").is_err());
        assert!(Target::parse("http://127.0.0.1:4437/v1").is_err());
    }

    #[test]
    fn request_encoding() {
        let t = Target::parse("http://127.0.0.1:9").expect("target");
        let r = t.request("POST", "/v1/stream/a", Some(b"xyz"));
        assert_eq!(
            r,
            b"POST /v1/stream/a HTTP/1.1\r\nHost: 127.0.0.1:9\r\nContent-Type: application/octet-stream\r\nContent-Length: 3\r\n\r\nxyz"
        );
    }
}
