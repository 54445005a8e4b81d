//! Commands the state machine applies, their answers and refusals.

use bytes::Bytes;

use super::json::JsonError;

/// A stream's lifetime setting as configured at create.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Lifetime {
    /// Sliding window in seconds.
    Ttl(u64),
    /// Absolute expiry, unix milliseconds.
    ExpiresAt(u64),
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ProducerTuple {
    pub id: String,
    pub epoch: u64,
    pub seq: u64,
}

/// A request body as the state machine sees it.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub enum Body {
    /// Stored byte for byte.
    Raw(Bytes),
    /// The request's content type is JSON: the stored text, or why the body is not valid JSON.
    Json(Result<Bytes, JsonError>),
    /// The stored bytes were staged in the cold tier before the write was proposed: the entry
    /// carries only where they are (docs/cold-tier.md, "External payloads"). Appends only.
    External(ExternalBody),
}

/// An append's stored bytes in an object of the cold tier, uploaded by the leader that
/// proposed it. The object holds the stream's hot bytes `[hot_from, hot_from + hot_len)` as
/// that leader read them, then the `len` bytes appended: applied, it becomes one owned cold
/// chunk `[hot_from, hot_from + hot_len + len)` and the hot ring is empty. It applies only
/// while the stream's incarnation and hot ring are still what the leader read; otherwise it
/// is refused ([`Refusal::ExternalMoved`]) and the leader stages again.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ExternalBody {
    pub object: std::sync::Arc<str>,
    pub incarnation: u64,
    pub hot_from: u64,
    pub hot_len: u64,
    pub len: u64,
}

impl Body {
    pub fn is_empty(&self) -> bool {
        match self {
            Body::Raw(b) => b.is_empty(),
            Body::Json(Ok(b)) => b.is_empty(),
            Body::Json(Err(JsonError::EmptyArray)) => true,
            Body::Json(Err(_)) => false,
            Body::External(x) => x.len == 0,
        }
    }
}

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Create {
    pub key: String,
    /// Normalized.
    pub content_type: String,
    pub lifetime: Option<Lifetime>,
    pub closed: bool,
    /// A printable `Stream-Seq`, stored unchecked when the stream is created.
    pub stream_seq: Option<Vec<u8>>,
    pub producer: Option<ProducerTuple>,
    pub incarnation: Option<u64>,
    /// `None` when the request had no body at all.
    pub body: Option<Body>,
}

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Append {
    pub key: String,
    /// Normalized request content type; `None` when absent.
    pub content_type: Option<String>,
    pub close: bool,
    pub stream_seq: Option<Vec<u8>>,
    pub producer: Option<ProducerTuple>,
    pub incarnation: Option<u64>,
    pub body: Body,
}

impl Create {
    /// A create of the `application/octet-stream` stream `key`, with nothing else set (tools
    /// and tests that build state directly).
    pub fn octet_stream(key: &str) -> Create {
        Create {
            key: key.into(),
            content_type: "application/octet-stream".into(),
            lifetime: None,
            closed: false,
            stream_seq: None,
            producer: None,
            incarnation: None,
            body: None,
        }
    }
}

impl Append {
    /// An append of `body` to the `application/octet-stream` stream `key`, with nothing else
    /// set (tools and tests that build state directly).
    pub fn octet_stream(key: &str, body: Bytes) -> Append {
        Append {
            key: key.into(),
            content_type: Some("application/octet-stream".into()),
            close: false,
            stream_seq: None,
            producer: None,
            incarnation: None,
            body: Body::Raw(body),
        }
    }
}

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct PublishSnapshot {
    pub key: String,
    pub offset: u64,
    pub content_type: String,
    /// Empty when the body was staged in the cold tier (`cold`).
    pub body: Bytes,
    pub incarnation: Option<u64>,
    #[serde(default)]
    pub cold: Option<ColdBody>,
    /// What the proposing node read as the byte before `offset` on a JSON stream when that byte
    /// is cold (whether it is a newline), so the state machine can check the boundary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boundary: Option<bool>,
}

/// A snapshot body uploaded to the cold tier before the publish was proposed: the replicated
/// state keeps only the reference, its size and its digest (computed by the node that staged it).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ColdBody {
    pub object: std::sync::Arc<str>,
    pub len: u64,
    pub digest: String,
}

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub enum Command {
    Create(Create),
    Append(Append),
    Delete {
        key: String,
        incarnation: Option<u64>,
    },
    PublishSnapshot(PublishSnapshot),
    Retain {
        key: String,
        offset: u64,
        incarnation: Option<u64>,
        /// As [`PublishSnapshot::boundary`].
        #[serde(default, skip_serializing_if = "Option::is_none")]
        boundary: Option<bool>,
    },
    /// A read reached the stream and its sliding TTL is due for renewal.
    Renew {
        key: String,
    },
    /// Drops streams whose lifetime ended, to free their memory.
    Sweep,
    /// Stream ranges now stored in `object` (uploaded before this was proposed).
    ColdFlush {
        object: std::sync::Arc<str>,
        slices: Vec<FlushSlice>,
        /// The object holds this one slice alone, so its stream owns it (absent from entries
        /// of older builds: their objects count as packed).
        #[serde(default)]
        owned: bool,
    },
    /// Objects the leader deleted from the cold tier; they leave the garbage list.
    ColdForget {
        objects: Vec<std::sync::Arc<str>>,
    },
    /// An operator's bucket purge: every stream of the bucket goes and the bucket is fenced.
    /// With `forget_cold` the purging node has deleted the bucket's whole object prefix, so the
    /// bucket's released objects leave the garbage list too.
    Purge {
        bucket: String,
        forget_cold: bool,
    },
    /// Part `index` of import `import`: a slice of a backup's group state (MessagePack of
    /// `GroupState`), staged in the replicated state until the commit. Parts keep each entry
    /// small: openraft gives an AppendEntries one heartbeat interval, so one entry holding a
    /// whole group would never reach the followers.
    ImportPart {
        import: u64,
        index: u32,
        bytes: Bytes,
    },
    /// The staged parts of `import`, `parts` of them, become this group's state at once, when
    /// the group holds no stream: the one write that makes the import visible.
    ImportCommit {
        import: u64,
        parts: u32,
    },
    /// A stream's chunks `[start, end)` now live in one object of its own.
    ColdCompact(ColdCompact),
    /// A page of a stream's cold history is sealed in the object store.
    ColdIndex(ColdIndexPage),
    /// Index pages retention (or a stream's end) let go, and the objects they listed.
    ColdDropPages(ColdDropPages),
}

/// Stream `key`'s chunks `[start, end)` are now `object`'s bytes from `at`, an object of the
/// stream's own: a compaction's rewrite into a fresh object, or (`adopt`) the adoption of the
/// one packed chunk of the run, whose object nothing else names, as it is.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ColdCompact {
    pub adopt: bool,
    pub key: String,
    pub incarnation: u64,
    pub page_bytes: u64,
    pub start: u64,
    pub end: u64,
    pub object: std::sync::Arc<str>,
    pub at: u64,
}

/// Page `page` of stream `key`'s cold history was uploaded under `prefix`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ColdIndexPage {
    pub key: String,
    pub incarnation: u64,
    pub page: u64,
    pub page_bytes: u64,
    pub prefix: std::sync::Arc<str>,
}

/// The pages below `below` of the index under `prefix` (stream `key`'s, or a retired one's)
/// go: they and `objects`, what they listed, are released.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ColdDropPages {
    pub key: String,
    pub prefix: std::sync::Arc<str>,
    pub below: u64,
    pub objects: Vec<std::sync::Arc<str>>,
}

/// One stream's range in a flushed object: stream bytes `[start, end)` at object offset `at`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FlushSlice {
    pub key: String,
    pub incarnation: u64,
    pub start: u64,
    pub end: u64,
    pub at: u64,
}

impl Command {
    pub fn key(&self) -> Option<&str> {
        match self {
            Command::Create(c) => Some(&c.key),
            Command::Append(a) => Some(&a.key),
            Command::Delete { key, .. } | Command::Retain { key, .. } | Command::Renew { key } => {
                Some(key)
            }
            Command::PublishSnapshot(p) => Some(&p.key),
            Command::Sweep
            | Command::ColdFlush { .. }
            | Command::ColdForget { .. }
            | Command::Purge { .. }
            | Command::ImportPart { .. }
            | Command::ImportCommit { .. }
            | Command::ColdCompact(_)
            | Command::ColdIndex(_)
            | Command::ColdDropPages(_) => None,
        }
    }

    /// Bytes of the command's body: what bounds a batched entry, and most of its encoded size.
    pub fn body_bytes(&self) -> u64 {
        let len = |b: &Body| match b {
            Body::Raw(b) | Body::Json(Ok(b)) => b.len() as u64,
            Body::Json(Err(_)) | Body::External(_) => 0,
        };
        match self {
            Command::Create(c) => c.body.as_ref().map_or(0, len),
            Command::Append(a) => len(&a.body),
            Command::PublishSnapshot(p) => p.body.len() as u64,
            Command::ImportPart { bytes, .. } => bytes.len() as u64,
            _ => 0,
        }
    }
}

/// What every successful stream response reports about the stream.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Meta {
    pub incarnation: u64,
    pub content_type: String,
    pub tail: u64,
    pub closed: bool,
    pub lifetime: Option<Lifetime>,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Applied {
    Created {
        meta: Meta,
        fresh: bool,
    },
    Appended {
        incarnation: u64,
        /// `None` for a duplicate whose receipt left the window.
        next_offset: Option<u64>,
        closed: bool,
        /// Epoch and seq to echo when a producer was given.
        producer_ack: Option<(u64, u64)>,
        duplicate: bool,
    },
    Deleted,
    SnapshotPublished {
        incarnation: u64,
        offset: u64,
        digest: String,
        tail: u64,
    },
    Retained {
        incarnation: u64,
        offset: u64,
    },
    Renewed,
    Swept {
        removed: usize,
    },
    ColdFlushed {
        accepted: usize,
        slices: usize,
    },
    ColdForgotten,
    Purged {
        removed_streams: u64,
        /// Released cold objects of the bucket still waiting for deletion in this group.
        pending_cold: u64,
        /// Released cold objects of the bucket this command forgot (`forget_cold`).
        reclaimed_cold: u64,
    },
    ImportStaged {
        parts: u32,
    },
    Imported {
        streams: u64,
    },
    /// Whether a cold-index command applied (a stale one, planned before the stream moved
    /// on, changes nothing).
    ColdIndexed {
        accepted: bool,
    },
}

/// A refusal decided by the state machine; nothing was applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, serde::Serialize, serde::Deserialize)]
pub enum Refusal {
    #[error("stream not found")]
    NotFound,
    #[error("Stream-Incarnation does not match the stream")]
    IncarnationMismatch { current: Option<u64> },
    #[error("stream exists with a different configuration: {0}")]
    ConfigConflict(std::borrow::Cow<'static, str>),
    #[error("stream is closed")]
    Closed { tail: u64 },
    #[error("Content-Type {got} does not match the stream's {want}")]
    ContentTypeMismatch {
        tail: u64,
        got: String,
        want: String,
    },
    #[error("producer epoch {got} is older than the current epoch {current}")]
    StaleEpoch { current: u64, got: u64 },
    #[error("a new producer epoch must start at Producer-Seq 0")]
    NewEpochNotZero,
    #[error("Producer-Seq {received} skips ahead; expected {expected}")]
    SeqGap { expected: u64, received: u64 },
    #[error("producer_limit: the stream holds 4096 producers and none has been idle for an hour")]
    ProducerLimit,
    #[error("Stream-Seq is not greater than the stream's last accepted value")]
    StreamSeqConflict { tail: u64 },
    #[error("{0}")]
    InvalidJson(JsonError),
    #[error("an append needs a body or Stream-Closed: true")]
    EmptyAppend,
    #[error("a create with producer headers must use Producer-Seq 0")]
    CreateSeqNotZero,
    #[error("offset is not a JSON message boundary")]
    NotMessageBoundary,
    #[error("offset is beyond the stream's tail")]
    SnapshotBeyondTail,
    #[error("a newer snapshot is already published")]
    SnapshotStale,
    #[error("a different snapshot is already published at this offset")]
    SnapshotDiffers,
    #[error("offset has been trimmed by retention")]
    Gone { retained: u64 },
    #[error("retention cannot move backward")]
    RetentionBackward,
    #[error("retention cannot pass the latest published snapshot")]
    RetentionBeyondSnapshot,
    #[error("retention offset is beyond the stream's tail")]
    RetentionBeyondTail,
    #[error("offset is beyond the stream's tail")]
    BeyondTail { tail: u64 },
    #[error(
        "the byte before the offset is in the cold tier, so it cannot be checked as a JSON message boundary; try again"
    )]
    BoundaryUnknown,
    #[error(
        "the stream moved while its append was staged in the cold tier (another write, a flush or a new incarnation); try again"
    )]
    ExternalMoved,
    #[error("the group already holds {streams} streams: restore only into a fresh, empty cluster")]
    ImportIntoNonEmpty { streams: u64 },
    #[error("the backup counts usage in write units of {got} bytes, this cluster in {want}")]
    WriteUnitMismatch { got: u64, want: u64 },
    #[error("the imported group state does not decode: {0}")]
    ImportUndecodable(String),
    #[error("import parts out of order: {0}")]
    ImportOutOfOrder(String),
}
