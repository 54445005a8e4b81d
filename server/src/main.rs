//! The `ursula` binary: `ursula server` (the default) runs a node; `ursula gateway` runs the
//! stateless front (`ursula-gateway`). Invoked as `ursulagw` (a link to this binary, which the
//! release and the image ship), it is `ursula gateway` with the same flags.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use clap::Parser;
use clap::Subcommand;
use tokio::sync::watch;
use ursula::config;

// glibc's malloc costs a durable node under load a large share of its CPU (arena growth, page
// faults, consolidation; measured in docs/architecture.md); mimalloc's per-thread heaps suit the
// core-per-thread runtime.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Transparent huge pages off for this process, before the heap grows. With THP on, a heap that
/// grows under load (stream data, the Raft log before a snapshot) takes its new memory as 2 MiB
/// pages that the kernel zero-fills inside the page fault: CPU on the request path, and stalls
/// in a cluster's append tail (measured in docs/architecture.md and docs/benchmarks.md).
/// Databases that care for tail latency ask the same (Redis, MongoDB).
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
fn disable_transparent_huge_pages() {
    // SAFETY: PR_SET_THP_DISABLE takes plain integers and reads or writes none of our memory.
    let rc = unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
    if rc != 0 {
        // Only latency is at stake: kernels without the flag keep running with THP as configured.
        eprintln!(
            "ursula: could not turn off transparent huge pages: {}",
            std::io::Error::last_os_error()
        );
    }
}

#[cfg(not(target_os = "linux"))]
fn disable_transparent_huge_pages() {}

#[derive(Debug, Parser)]
#[command(
    name = "ursula",
    version,
    about = "Durable append-only streams over HTTP"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    server: ServerArgs,
}

#[derive(Debug, Subcommand)]
// Parsed once at startup and matched once: the size of the larger variant costs nothing.
#[allow(clippy::large_enum_variant)]
enum Command {
    /// Run a node (the default).
    Server(ServerArgs),
    /// Run the stateless gateway in front of the nodes.
    Gateway(ursula_gateway::GatewayArgs),
}

/// `ursulagw`: the gateway's own name, the flags of `ursula gateway`.
#[derive(Debug, Parser)]
#[command(
    name = "ursulagw",
    version,
    about = "The stateless gateway in front of Ursula nodes (ursula gateway)"
)]
struct GatewayCli {
    #[command(flatten)]
    gateway: ursula_gateway::GatewayArgs,
}

/// Whether this process was started as `ursulagw`, by the name it was invoked by.
fn invoked_as_gateway() -> bool {
    std::env::args_os()
        .next()
        .map(PathBuf::from)
        .and_then(|p| p.file_stem().map(|s| s == "ursulagw"))
        .unwrap_or(false)
}

fn run_gateway(args: ursula_gateway::GatewayArgs) -> ExitCode {
    match ursula_gateway::run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ursula gateway: {e}");
            ExitCode::FAILURE
        }
    }
}

#[derive(Debug, Clone, Args)]
struct ServerArgs {
    /// TOML config file (default: ./ursula.toml, /etc/ursula/ursula.toml, then the user config dir).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Resource preset: default, dev, tiny, small, standard or large.
    #[arg(long, value_name = "PRESET")]
    preset: Option<String>,
    /// Overrides raft.node_id.
    #[arg(long, value_name = "ID")]
    node_id: Option<u64>,
    /// Overrides server.listen.
    #[arg(long, value_name = "ADDR")]
    listen: Option<String>,
    /// Overrides server.admin_listen (default 127.0.0.1:4438); `off` turns the admin plane off.
    #[arg(long, value_name = "ADDR|off")]
    admin_listen: Option<String>,
}

fn main() -> ExitCode {
    disable_transparent_huge_pages();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        // Colour only for a person at a terminal: a log file, journald or `docker logs` gets
        // plain text that grep and log shippers read as it is.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    if invoked_as_gateway() {
        return run_gateway(GatewayCli::parse().gateway);
    }
    let cli = Cli::parse();
    let args = match cli.command {
        Some(Command::Server(a)) => a,
        Some(Command::Gateway(a)) => return run_gateway(a),
        None => cli.server,
    };
    let overrides = config::Overrides {
        config: args.config,
        preset: args.preset,
        node_id: args.node_id,
        listen: args.listen,
        admin_listen: args.admin_listen,
        peer_secret: std::env::var(config::secret::ENV).ok(),
    };
    let cfg = match config::resolve(&overrides) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("ursula: {e}");
            return ExitCode::from(2);
        }
    };
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("ursula: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let deadline = cfg.shutdown_deadline;
    let result = rt.block_on(async move {
        let (tx, rx) = watch::channel(false);
        tokio::spawn(async move {
            ursula_gateway::serve::wait_for_signal().await;
            let _ = tx.send(true);
            // A second signal: the operator wants out now, whatever the shutdown is doing.
            tokio::spawn(async {
                ursula_gateway::serve::wait_for_signal().await;
                tracing::warn!("a second signal: exiting at once, without recording a clean shutdown");
                std::process::exit(1);
            });
            // On its own thread: a shutdown stuck on the runtime must not hold the deadline up.
            std::thread::spawn(move || {
                std::thread::sleep(deadline);
                tracing::error!(
                    "shutdown did not finish within {deadline:?} of the signal (server.shutdown_deadline): exiting without recording a clean shutdown; the next start treats the run as a crash"
                );
                std::process::exit(1);
            });
        });
        ursula::node::run(cfg, rx).await
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ursula: {e}");
            ExitCode::FAILURE
        }
    }
}
