//! The listener's and the upstream connections' timeouts and the listener's connection cap
//! ([`TimeoutArgs`]), and the duration syntax their flags take ([`parse_duration`]).

use std::time::Duration;

use clap::Args;

/// `--listen` when not given: every interface, on the port the nodes' clients use.
pub const DEFAULT_LISTEN: &str = "0.0.0.0:4437";
/// `--request-head-timeout` when not given: as the nodes' `server.request_head_timeout`,
/// above the idle time of the clients we ship (the extension keeps a connection 90 s), since
/// it also closes a kept-alive connection that sends nothing.
pub const DEFAULT_REQUEST_HEAD_TIMEOUT: Duration = Duration::from_secs(120);
/// `--max-connections` when not given: as the nodes' `server.max_connections`.
pub const DEFAULT_MAX_CONNECTIONS: usize = 16_384;
/// `--response-header-timeout` when not given: above the longest long-poll a node holds
/// (`timeout_ms` is clamped to 60 s), so a long-poll that finds no data is never cut.
pub const DEFAULT_RESPONSE_HEADER_TIMEOUT: Duration = Duration::from_secs(75);

/// Timeout and connection flags of `ursula gateway`.
#[derive(Debug, Clone, Args)]
pub struct TimeoutArgs {
    /// How long a connect to an upstream may take before it counts as failed (e.g. 5s, 500ms;
    /// a bare number is seconds).
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = parse_duration)]
    pub connect_timeout: Duration,
    /// An upstream that sends no response headers within this long of the request answers
    /// `504`, unmarked, and is not ejected for it.
    #[arg(long, value_name = "DURATION", default_value = "75s", value_parser = parse_duration)]
    pub response_header_timeout: Duration,
    /// Linux `TCP_USER_TIMEOUT` on upstream connections (at least 1s); keepalive probes go out
    /// after 2/5 of it and then every 1/5.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = parse_duration)]
    pub upstream_tcp_user_timeout: Duration,
    /// A client connection that sends no whole request head within this long of opening or
    /// of its last answer is closed.
    #[arg(long, value_name = "DURATION", default_value = "120s", value_parser = parse_duration)]
    pub request_head_timeout: Duration,
    /// Client connections served at once; the rest wait in the kernel's backlog.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_CONNECTIONS)]
    pub max_connections: usize,
}

impl Default for TimeoutArgs {
    fn default() -> TimeoutArgs {
        TimeoutArgs {
            connect_timeout: Duration::from_secs(5),
            response_header_timeout: DEFAULT_RESPONSE_HEADER_TIMEOUT,
            upstream_tcp_user_timeout: Duration::from_secs(5),
            request_head_timeout: DEFAULT_REQUEST_HEAD_TIMEOUT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
        }
    }
}

/// Why a timeout flag was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TimeoutError {
    #[error("--{0} must be more than 0")]
    Zero(&'static str),
    #[error("--upstream-tcp-user-timeout must be at least 1s")]
    TcpUserTimeoutBelowOneSecond,
    #[error("--max-connections must be at least 1")]
    NoConnections,
    #[error("--max-connections must be at most {0}")]
    TooManyConnections(usize),
}

impl TimeoutArgs {
    pub fn check(&self) -> Result<(), TimeoutError> {
        for (name, d) in [
            ("connect-timeout", self.connect_timeout),
            ("response-header-timeout", self.response_header_timeout),
            ("request-head-timeout", self.request_head_timeout),
        ] {
            if d.is_zero() {
                return Err(TimeoutError::Zero(name));
            }
        }
        if self.upstream_tcp_user_timeout < Duration::from_secs(1) {
            return Err(TimeoutError::TcpUserTimeoutBelowOneSecond);
        }
        if self.max_connections == 0 {
            return Err(TimeoutError::NoConnections);
        }
        // The listener's semaphore holds at most this many permits, and panics above it.
        if self.max_connections > tokio::sync::Semaphore::MAX_PERMITS {
            return Err(TimeoutError::TooManyConnections(
                tokio::sync::Semaphore::MAX_PERMITS,
            ));
        }
        Ok(())
    }
}

/// `30s`, `500ms`, `2m`, `1h`, or a bare number of seconds (the chart renders seconds).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let bad = || format!("{s:?} is not a duration like 30s or 500ms");
    let n: u64 = num.parse().map_err(|_| bad())?;
    let ms = match unit {
        "ms" => Some(n),
        "" | "s" => n.checked_mul(1000),
        "m" => n.checked_mul(60_000),
        "h" => n.checked_mul(3_600_000),
        _ => None,
    };
    ms.map(Duration::from_millis).ok_or_else(bad)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_take_a_unit_or_mean_seconds() {
        assert_eq!(parse_duration("5"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_duration("5s"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert!(parse_duration("5 parsecs").is_err());
        assert!(parse_duration("-1s").is_err());
        assert!(parse_duration("").is_err());
    }

    #[test]
    fn the_tcp_user_timeout_takes_at_least_a_second_and_nothing_is_zero() {
        let ok = TimeoutArgs::default();
        assert_eq!(ok.check(), Ok(()));
        let short = TimeoutArgs {
            upstream_tcp_user_timeout: Duration::from_millis(999),
            ..TimeoutArgs::default()
        };
        assert_eq!(
            short.check(),
            Err(TimeoutError::TcpUserTimeoutBelowOneSecond)
        );
        let zero = TimeoutArgs {
            response_header_timeout: Duration::ZERO,
            ..TimeoutArgs::default()
        };
        assert_eq!(
            zero.check(),
            Err(TimeoutError::Zero("response-header-timeout"))
        );
        let none = TimeoutArgs {
            max_connections: 0,
            ..TimeoutArgs::default()
        };
        assert_eq!(none.check(), Err(TimeoutError::NoConnections));
    }
}
