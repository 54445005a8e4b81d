//! The pieces of an access-controlled stack for tests that start their own gateways.

use ursula_testkit::auth::{Issuer, public_jwk, seeded_node};
use ursula_testkit::gateway::Proc;
use ursula_testkit::scratch::Scratch;

/// A scratch directory named after `name`, an issuer holding one Ed25519 key (`ed1`) and a
/// seeded node (`auth::seeded_node`) in it. Bound as `let (scratch, issuer, node)`, the node
/// and the issuer drop before their scratch directory.
pub fn seeded(name: &str) -> (Scratch, Issuer, Proc) {
    let scratch = Scratch::new(name);
    let issuer = Issuer::start(vec![public_jwk("ed", "ed1")]);
    let node = seeded_node(&scratch);
    (scratch, issuer, node)
}
