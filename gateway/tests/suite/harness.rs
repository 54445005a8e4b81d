//! What the suites share: the workspace's harness (`ursula-testkit`): real nodes, the gateway in
//! front of them, an issuer and hand-signed tokens.

pub use ursula_testkit::auth;
pub use ursula_testkit::bins;
pub use ursula_testkit::cluster;
pub use ursula_testkit::conn;
pub use ursula_testkit::gateway;
