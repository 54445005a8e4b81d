//! Loopback ports for the servers a test starts, shared by the server's test binary and
//! `ursula-vfs-tests`.
//!
//! They come from below the kernel's ephemeral range (32768-60999 by default). A port that
//! `bind(0)` handed out and the probe released is soon handed out again there, to another
//! test's `bind(0)` or as the source port of an outgoing connection, and a node that then cannot
//! listen fails its test. Below the range only another test's pick can collide: each process
//! walks the range from its own random start, probing every port before it hands it out.

use std::net::TcpListener;
use std::sync::OnceLock;
use std::sync::atomic::AtomicU32;
use std::sync::atomic::Ordering;
use std::time::SystemTime;
use std::time::UNIX_EPOCH;

const LOW: u32 = 20_000;
const SPAN: u32 = 12_000;

/// A loopback port nobody listens on right now.
pub fn free_port() -> u16 {
    static START: OnceLock<u32> = OnceLock::new();
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let start = *START.get_or_init(|| {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let seed = (u64::from(std::process::id()) << 32) ^ nanos;
        (seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40) as u32 % SPAN
    });
    for _ in 0..SPAN {
        let offset = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = (LOW + (start + offset) % SPAN) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free loopback port in {LOW}..{}", LOW + SPAN);
}
