//! h2c by upgrade (RFC 7540 §3.2): an HTTP/1.1 request with `Upgrade: h2c` and one
//! `HTTP2-Settings` header gets `101 Switching Protocols`, and the connection goes on as HTTP/2
//! with that request as its stream 1. hyper's HTTP/2 server has no way to adopt a request it
//! did not read, so [`resume`] hands it one: after the client's preface and first `SETTINGS`
//! frame it inserts a `HEADERS` frame on stream 1 that carries the upgraded request, and
//! hyper answers it on stream 1, as the client expects. Requests with a body are answered in
//! HTTP/1.1 instead (the RFC lets a server ignore the upgrade), as are heads too large for one
//! frame. Prior knowledge (the preface as a connection's first bytes) needs none of this.

use std::io;
use std::time::Duration;

use http::HeaderMap;
use http::HeaderValue;
use http::Request;
use http::Response;
use http::StatusCode;
use http::Version;
use http::header;
use tokio::io::AsyncRead;
use tokio::io::AsyncReadExt;
use tokio::io::AsyncWrite;

/// What an HTTP/2 client sends first (RFC 9113 §3.4); no HTTP/1 request line starts with
/// `PRI *`.
pub const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// The largest frame payload before the client learns the server's settings (RFC 9113
/// §4.2): the inserted `HEADERS` frame and the client's first `SETTINGS` must fit.
const MAX_FRAME: usize = 16_384;

const FRAME_HEADERS: u8 = 0x1;
const FRAME_SETTINGS: u8 = 0x4;
const FLAG_END_STREAM: u8 = 0x1;
const FLAG_END_HEADERS: u8 = 0x4;

/// Headers that describe the HTTP/1.1 connection, never carried into HTTP/2 (RFC 9113
/// §8.2.2); `host` becomes `:authority`.
const CONNECTION_SPECIFIC: [&str; 8] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "upgrade",
    "http2-settings",
    "host",
    "te",
];

/// The upgraded request, encoded as the `HEADERS` frame (stream 1, end of stream) that
/// [`resume`] inserts; `None` when the request does not ask for h2c the RFC's way, has a body,
/// or does not fit one frame: it is then answered in HTTP/1.1.
pub fn upgrade_frame<B>(req: &Request<B>) -> Option<Vec<u8>> {
    if req.version() != Version::HTTP_11 {
        return None;
    }
    let h = req.headers();
    let upgrade = tokens(h, header::UPGRADE);
    let connection = tokens(h, header::CONNECTION);
    if !upgrade.iter().any(|t| t == "h2c")
        || !connection.iter().any(|t| t == "upgrade")
        || !connection.iter().any(|t| t == "http2-settings")
        || h.get_all("http2-settings").iter().count() != 1
    {
        return None;
    }
    let no_body = !h.contains_key(header::TRANSFER_ENCODING)
        && h.get(header::CONTENT_LENGTH).is_none_or(|v| v == "0");
    let authority = h.get(header::HOST)?;
    if !no_body {
        return None;
    }
    let path = req.uri().path_and_query().map_or("/", |pq| pq.as_str());
    let mut block = Vec::new();
    literal(&mut block, b":method", req.method().as_str().as_bytes());
    literal(&mut block, b":scheme", b"http");
    literal(&mut block, b":authority", authority.as_bytes());
    literal(&mut block, b":path", path.as_bytes());
    for (name, value) in h {
        let keep = !CONNECTION_SPECIFIC.contains(&name.as_str())
            || (name == header::TE && value.as_bytes().eq_ignore_ascii_case(b"trailers"));
        if keep {
            literal(&mut block, name.as_str().as_bytes(), value.as_bytes());
        }
    }
    if block.len() > MAX_FRAME {
        return None;
    }
    let mut frame = frame_header(
        block.len(),
        FRAME_HEADERS,
        FLAG_END_STREAM | FLAG_END_HEADERS,
        1,
    );
    frame.extend_from_slice(&block);
    Some(frame)
}

/// The `101` that switches the connection.
pub fn switching<B>(empty: B) -> Response<B> {
    let mut resp = Response::new(empty);
    *resp.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    resp.headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    resp.headers_mut()
        .insert(header::UPGRADE, HeaderValue::from_static("h2c"));
    resp
}

/// The upgraded connection as hyper's HTTP/2 server should read it: the client's preface and
/// first `SETTINGS` frame, then `frame` (the upgraded request), then whatever else the client
/// sends. Fails when the client does not open with the preface and a `SETTINGS` frame within
/// `within`.
pub async fn resume<T>(
    io: T,
    frame: Vec<u8>,
    within: Duration,
) -> io::Result<impl AsyncRead + AsyncWrite + Unpin>
where
    T: AsyncRead + AsyncWrite + Unpin,
{
    let (mut reader, writer) = tokio::io::split(io);
    let opening = tokio::time::timeout(within, async {
        let mut head = vec![0u8; PREFACE.len() + 9];
        reader.read_exact(&mut head).await?;
        if head[..PREFACE.len()] != PREFACE[..] {
            return Err(invalid("no HTTP/2 preface after the upgrade"));
        }
        let f = &head[PREFACE.len()..];
        let len = usize::from(f[0]) << 16 | usize::from(f[1]) << 8 | usize::from(f[2]);
        if f[3] != FRAME_SETTINGS || len > MAX_FRAME {
            return Err(invalid("the preface is not followed by a SETTINGS frame"));
        }
        let mut payload = vec![0u8; len];
        reader.read_exact(&mut payload).await?;
        head.extend_from_slice(&payload);
        head.extend_from_slice(&frame);
        Ok(head)
    })
    .await
    .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "no HTTP/2 preface in time"))??;
    Ok(tokio::io::join(
        io::Cursor::new(opening).chain(reader),
        writer,
    ))
}

fn invalid(what: &'static str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what)
}

/// The comma-separated tokens of every `name` header, trimmed and lowercase.
fn tokens(h: &HeaderMap, name: header::HeaderName) -> Vec<String> {
    h.get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|t| t.trim().to_ascii_lowercase())
        .filter(|t| !t.is_empty())
        .collect()
}

fn frame_header(len: usize, kind: u8, flags: u8, stream: u32) -> Vec<u8> {
    let mut f = Vec::with_capacity(9 + len);
    f.extend_from_slice(&(len as u32).to_be_bytes()[1..]);
    f.push(kind);
    f.push(flags);
    f.extend_from_slice(&(stream & 0x7fff_ffff).to_be_bytes());
    f
}

/// An HPACK "literal header field without indexing, new name" (RFC 7541 §6.2.2), both strings
/// raw (no Huffman coding): the simplest field every decoder takes.
fn literal(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.push(0x00);
    for s in [name, value] {
        integer(out, 7, 0x00, s.len());
        out.extend_from_slice(s);
    }
}

/// An HPACK integer with an `n`-bit prefix (RFC 7541 §5.1), `high` the bits above it.
fn integer(out: &mut Vec<u8>, n: u32, high: u8, value: usize) {
    let max = (1usize << n) - 1;
    if value < max {
        out.push(high | value as u8);
        return;
    }
    out.push(high | max as u8);
    let mut rest = value - max;
    while rest >= 0x80 {
        out.push((rest & 0x7f) as u8 | 0x80);
        rest >>= 7;
    }
    out.push(rest as u8);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn upgrade_request(extra: &[(&str, &str)]) -> Request<()> {
        let mut b = Request::builder()
            .uri("/demo/s?offset=-1")
            .header("host", "127.0.0.1:8080")
            .header("connection", "Upgrade, HTTP2-Settings")
            .header("upgrade", "h2c")
            .header("http2-settings", "AAMAAABkAAQCAAAAAAIAAAAA")
            .header("accept", "text/plain");
        for (k, v) in extra {
            b = b.header(*k, *v);
        }
        b.body(()).expect("request")
    }

    #[test]
    fn hpack_integers_follow_the_rfc_examples() {
        // RFC 7541 C.1.1 and C.1.2: 10 and 1337 with a 5-bit prefix.
        let mut out = Vec::new();
        integer(&mut out, 5, 0, 10);
        assert_eq!(out, [10]);
        out.clear();
        integer(&mut out, 5, 0, 1337);
        assert_eq!(out, [31, 154, 10]);
    }

    /// The fields of a block of raw literals, as a decoder reads them (lengths under 127).
    fn fields(mut block: &[u8]) -> Vec<(String, String)> {
        let mut out = Vec::new();
        while !block.is_empty() {
            assert_eq!(block[0], 0x00, "a literal without indexing, new name");
            block = &block[1..];
            let mut pair = Vec::new();
            for _ in 0..2 {
                let len = usize::from(block[0]);
                assert!(len < 127);
                pair.push(String::from_utf8(block[1..1 + len].to_vec()).expect("text"));
                block = &block[1 + len..];
            }
            out.push((pair[0].clone(), pair[1].clone()));
        }
        out
    }

    #[test]
    fn the_frame_carries_the_request_on_stream_1_without_connection_headers() {
        let frame = upgrade_frame(&upgrade_request(&[("te", "trailers")])).expect("an upgrade");
        assert_eq!(
            &frame[3..9],
            &[
                FRAME_HEADERS,
                FLAG_END_STREAM | FLAG_END_HEADERS,
                0,
                0,
                0,
                1
            ]
        );
        let len = usize::from(frame[0]) << 16 | usize::from(frame[1]) << 8 | usize::from(frame[2]);
        assert_eq!(len, frame.len() - 9);
        let got = fields(&frame[9..]);
        let want: Vec<(String, String)> = [
            (":method", "GET"),
            (":scheme", "http"),
            (":authority", "127.0.0.1:8080"),
            (":path", "/demo/s?offset=-1"),
            ("accept", "text/plain"),
            ("te", "trailers"),
        ]
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn requests_that_do_not_ask_the_rfcs_way_or_carry_a_body_stay_http1() {
        assert!(upgrade_frame(&upgrade_request(&[("content-length", "3")])).is_none());
        assert!(upgrade_frame(&upgrade_request(&[("transfer-encoding", "chunked")])).is_none());
        assert!(upgrade_frame(&upgrade_request(&[("http2-settings", "AAAA")])).is_none());
        let mut no_option = upgrade_request(&[]);
        no_option
            .headers_mut()
            .insert("connection", HeaderValue::from_static("upgrade"));
        assert!(upgrade_frame(&no_option).is_none());
        let mut other = upgrade_request(&[]);
        other
            .headers_mut()
            .insert("upgrade", HeaderValue::from_static("websocket"));
        assert!(upgrade_frame(&other).is_none());
        let long = "x".repeat(MAX_FRAME);
        assert!(upgrade_frame(&upgrade_request(&[("x-long", &long)])).is_none());
        assert!(upgrade_frame(&upgrade_request(&[("content-length", "0")])).is_some());
    }
}
