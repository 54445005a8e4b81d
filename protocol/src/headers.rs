//! Header names, lowercase.

pub const STREAM_NEXT_OFFSET: &str = "stream-next-offset";
pub const STREAM_UP_TO_DATE: &str = "stream-up-to-date";
pub const STREAM_CLOSED: &str = "stream-closed";
pub const STREAM_CURSOR: &str = "stream-cursor";
pub const STREAM_TTL: &str = "stream-ttl";
pub const STREAM_EXPIRES_AT: &str = "stream-expires-at";
pub const STREAM_SEQ: &str = "stream-seq";
pub const STREAM_INCARNATION: &str = "stream-incarnation";
pub const STREAM_RETAINED_OFFSET: &str = "stream-retained-offset";
/// Diagnostic (the spec: unstable): data below this offset was flushed to the cold tier.
pub const STREAM_COLD_HOT_START_OFFSET: &str = "stream-cold-hot-start-offset";
pub const STREAM_SNAPSHOT_OFFSET: &str = "stream-snapshot-offset";
pub const STREAM_SNAPSHOT_DIGEST: &str = "stream-snapshot-digest";
pub const STREAM_SNAPSHOT_MATCH: &str = "stream-snapshot-match";
pub const STREAM_DATA_CONTENT_TYPE: &str = "stream-data-content-type";
pub const STREAM_SSE_DATA_ENCODING: &str = "stream-sse-data-encoding";
pub const STREAM_RECORD_MATCH: &str = "stream-record-match";
pub const PRODUCER_ID: &str = "producer-id";
pub const PRODUCER_EPOCH: &str = "producer-epoch";
pub const PRODUCER_SEQ: &str = "producer-seq";
pub const PRODUCER_EXPECTED_SEQ: &str = "producer-expected-seq";
pub const PRODUCER_RECEIVED_SEQ: &str = "producer-received-seq";
pub const NOT_APPLIED: &str = "x-ursula-not-applied";
pub const NOT_APPLIED_CHECKED: &str = "x-ursula-not-applied-checked";

/// Every `Stream-*` and `Producer-*` header a browser client needs to read.
pub const EXPOSED: &str = "stream-next-offset, stream-up-to-date, stream-closed, stream-cursor, \
stream-ttl, stream-expires-at, stream-seq, stream-incarnation, stream-retained-offset, \
stream-snapshot-offset, stream-snapshot-digest, stream-data-content-type, stream-sse-data-encoding, \
producer-epoch, producer-seq, producer-expected-seq, producer-received-seq, etag, location, \
content-type, retry-after, x-ursula-not-applied";

/// Admin mutations: the `process_incarnation` the operator observed in the metrics (`428`
/// without it, `412` when the process restarted since).
pub const PROCESS_INCARNATION: &str = "x-ursula-process-incarnation";
/// Admin mutations while a maintenance fence is active, and the fence's lifecycle calls: the
/// executor's token `reservation_id:generation:executor_id` (`428` without it, `412` for
/// another token).
pub const MAINTENANCE_FENCE: &str = "x-ursula-maintenance-fence";
/// Peer RPCs and their answers: the Raft protocol the sender speaks.
pub const RAFT_PROTOCOL: &str = "x-ursula-raft-protocol";
/// Peer RPCs: the node id of the sender.
pub const RAFT_FROM: &str = "x-ursula-raft-from";
/// Peer RPCs: the node id the sender meant the RPC for.
pub const RAFT_TO: &str = "x-ursula-raft-to";
/// Peer RPCs: the cluster's peer secret (`raft.peer_secret_file`), when the cluster has one.
pub const RAFT_SECRET: &str = "x-ursula-raft-secret";

/// Standard HTTP headers the protocol gives a meaning to: the type a stream is created with,
/// when to retry a refusal, where a redirect points, and the bearer token.
pub const CONTENT_TYPE: &str = "content-type";
pub const RETRY_AFTER: &str = "retry-after";
pub const LOCATION: &str = "location";
pub const AUTHORIZATION: &str = "authorization";
