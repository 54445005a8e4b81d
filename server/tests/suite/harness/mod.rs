//! What the suites share: the workspace's harness (`ursula-testkit`: ports, scratch, real nodes
//! and clusters), and the router in process (`router`), which only the server's own tests can
//! drive.

pub use ursula_testkit::cluster;
pub use ursula_testkit::conn;
pub use ursula_testkit::http;
pub use ursula_testkit::ports;
pub use ursula_testkit::process;
pub use ursula_testkit::scratch;

pub mod router;
