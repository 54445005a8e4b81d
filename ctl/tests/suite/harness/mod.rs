//! What the suites share: the workspace's harness (`ursula-testkit`) for real clusters and the
//! real binaries, plus what only these tests need: backups written by hand (`backup`) and a
//! scripted node for answers a real one cannot be made to give (`stub`).

pub use ursula_testkit::cluster;
pub use ursula_testkit::ctl;
pub use ursula_testkit::gateway;
pub use ursula_testkit::ports;
pub use ursula_testkit::scratch;

pub mod backup;
pub mod stub;
