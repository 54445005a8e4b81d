//! Raw connections that misbehave on purpose: request heads that never end, and whether the
//! server closed one.

use std::io::Read;
use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;

/// This process's limit of open files (`RLIMIT_NOFILE`'s soft value), 1024 when unknown.
pub fn open_files_limit() -> usize {
    std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|l| {
            l.lines()
                .find(|l| l.starts_with("Max open files"))
                .and_then(|l| l.split_whitespace().nth(3).map(str::to_owned))
        })
        .and_then(|n| n.parse().ok())
        .unwrap_or(1024)
}

/// `count` connections to `port` that each sent a request line for `path` and one header,
/// and then nothing.
pub fn half_heads(port: u16, path: &str, count: usize) -> Vec<TcpStream> {
    (0..count)
        .map(|_| {
            let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
            s.write_all(format!("GET {path} HTTP/1.1\r\nHost: slow\r\n").as_bytes())
                .expect("half a head");
            s
        })
        .collect()
}

/// Reads from `conn` until a whole request or response head (through its blank line) has
/// come: `Ok` with what was read, or `Err` with the part read when the connection ended or
/// failed first.
pub fn read_head(conn: &mut impl Read) -> Result<Vec<u8>, Vec<u8>> {
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match conn.read(&mut buf) {
            Ok(0) | Err(_) => return Err(head),
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    Ok(head)
}

/// Whether the peer closed `s` within `wait`: EOF or a reset, not a read that timed out.
pub fn closed_by_peer(mut s: &TcpStream, wait: Duration) -> bool {
    s.set_read_timeout(Some(wait)).expect("read timeout");
    let mut buf = [0u8; 512];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return true,
            // hyper may answer 408 before it closes; read on to the close.
            Ok(_) => continue,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return false;
            }
            Err(_) => return true,
        }
    }
}
