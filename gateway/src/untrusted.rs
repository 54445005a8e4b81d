//! Requests access control does not admit for a principal: anonymous ones, concealed ones and
//! refused ones. Their bodies are never buffered and never reserve any of the body budget (they
//! are read and dropped, within a drain's bounds), and where the client's address is known
//! ([`ClientAddr`]) at most `--untrusted-bodies-per-address` of them are read at once per address
//! ([`AddressSlots`]): past that, the answer goes out without the body being read.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::Mutex;

/// The client address of a request, put in its extensions by the listener. A program that
/// embeds the gateway and calls [`crate::Gateway::handle`] itself may set it too; without it,
/// no per-address limit applies to the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientAddr(pub IpAddr);

/// The untrusted bodies being read now, per client address.
#[derive(Debug)]
pub struct AddressSlots {
    cap: u32,
    held: Arc<Mutex<HashMap<IpAddr, u32>>>,
}

/// One untrusted body being read for `addr`; given back when dropped, however the request
/// ended.
#[derive(Debug)]
pub struct AddressSlot {
    addr: IpAddr,
    held: Arc<Mutex<HashMap<IpAddr, u32>>>,
}

impl AddressSlots {
    pub fn new(cap: u32) -> AddressSlots {
        AddressSlots {
            cap,
            held: Arc::new(Mutex::new(HashMap::new())),
        }
    }

    /// A slot for one more body of `addr`, or `None` when it has `cap` being read.
    pub fn take(&self, addr: IpAddr) -> Option<AddressSlot> {
        let mut held = lock(&self.held);
        let n = held.entry(addr).or_insert(0);
        if *n >= self.cap {
            if *n == 0 {
                held.remove(&addr);
            }
            return None;
        }
        *n += 1;
        Some(AddressSlot {
            addr,
            held: self.held.clone(),
        })
    }

    /// Addresses with a body being read now.
    pub fn addresses(&self) -> usize {
        lock(&self.held).len()
    }
}

impl Drop for AddressSlot {
    fn drop(&mut self) {
        let mut held = lock(&self.held);
        if let Some(n) = held.get_mut(&self.addr) {
            *n = n.saturating_sub(1);
            // An address with nothing held costs no entry: the map stays as small as the
            // set of addresses with a body under way.
            if *n == 0 {
                held.remove(&self.addr);
            }
        }
    }
}

fn lock(m: &Mutex<HashMap<IpAddr, u32>>) -> std::sync::MutexGuard<'_, HashMap<IpAddr, u32>> {
    // Counts only, each update whole: a panic elsewhere leaves the map consistent.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_holds_at_most_cap_slots_and_dropped_slots_come_back() {
        let slots = AddressSlots::new(2);
        let a: IpAddr = "192.0.2.1".parse().expect("ip");
        let b: IpAddr = "2001:db8::1".parse().expect("ip");
        let one = slots.take(a).expect("first");
        let two = slots.take(a).expect("second");
        assert!(slots.take(a).is_none());
        let other = slots.take(b).expect("another address has its own");
        assert_eq!(slots.addresses(), 2);
        drop(one);
        let three = slots.take(a).expect("a slot came back");
        drop((two, three, other));
        assert_eq!(slots.addresses(), 0);
    }

    #[test]
    fn a_cap_of_zero_reads_no_untrusted_body_and_keeps_no_entry() {
        let slots = AddressSlots::new(0);
        assert!(slots.take("192.0.2.9".parse().expect("ip")).is_none());
        assert_eq!(slots.addresses(), 0);
    }
}
