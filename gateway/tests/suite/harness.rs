//! What the suites share: the workspace's harness (`ursula-testkit`): real nodes, the gateway in
//! front of them, an issuer and hand-signed tokens; `calls`, requests through a gateway as one
//! caller; `seeded`, the pieces of an access-controlled stack; and `startup`, a gateway its
//! flags stop at startup.

pub use ursula_testkit::auth;
pub use ursula_testkit::bins;
pub use ursula_testkit::cluster;
pub use ursula_testkit::conn;
pub use ursula_testkit::gateway;

pub mod calls;
pub mod seeded;
pub mod startup;
