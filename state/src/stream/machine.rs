//! One group's streams and the rules that change them.

use std::collections::HashMap;

use bytes::Bytes;
use std::sync::Arc;

use sha2::Digest;
use sha2::Sha256;

use super::command::*;
use super::data::StreamData;
use super::json::JsonError;
use super::ledger::Staging;
use super::ledger::Tenancy;
use super::producer::Producers;
use super::producer::Receipt;
use super::producer::Verdict;

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Snapshot {
    pub offset: u64,
    pub content_type: String,
    /// Empty when the body lives in the cold tier (`cold`).
    pub body: Bytes,
    pub digest: String,
    #[serde(default)]
    pub cold: Option<Arc<str>>,
}

impl Stream {
    /// Every cold object this stream's state names: its unindexed chunks, its index pages
    /// and a cold snapshot body (the objects the pages list are not in the state).
    pub(super) fn objects(&self) -> Vec<Arc<str>> {
        let mut out: Vec<Arc<str>> = self.data.objects().cloned().collect();
        if let Some(ix) = self.data.index() {
            out.extend(ix.keys().map(Arc::from));
        }
        if let Some(o) = self.snapshot.as_ref().and_then(|s| s.cold.clone()) {
            out.push(o);
        }
        out
    }
}

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Stream {
    pub incarnation: u64,
    pub content_type: Box<str>,
    pub json: bool,
    pub lifetime: Option<Lifetime>,
    /// Unix ms at which the stream stops existing.
    pub expires_ms: Option<u64>,
    /// Last time a read renewed the sliding TTL.
    pub renewed_ms: u64,
    pub closed: bool,
    pub data: StreamData,
    /// Earliest readable offset.
    pub retained: u64,
    pub stream_seq: Option<Box<[u8]>>,
    /// Boxed: most streams never see a producer, and idle streams should stay small.
    pub producers: Option<Box<Producers>>,
    pub snapshot: Option<Box<Snapshot>>,
}

/// Counts what is written to it.
struct Counter(u64);

impl std::io::Write for Counter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len() as u64;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Stream {
    /// The bytes this stream's replicated state takes beyond its unflushed payload: its
    /// encoding (as in a Raft snapshot) less the hot bytes (the spec's "Memory without
    /// retention" bound is on this). Encoding into a counter copies nothing.
    pub fn state_bytes(&self) -> u64 {
        let mut c = Counter(0);
        match rmp_serde::encode::write(&mut c, self) {
            Ok(()) => c.0.saturating_sub(self.data.held_bytes()),
            Err(_) => 0,
        }
    }

    pub fn meta(&self) -> Meta {
        Meta {
            incarnation: self.incarnation,
            content_type: self.content_type.to_string(),
            tail: self.data.tail(),
            closed: self.closed,
            lifetime: self.lifetime,
        }
    }

    pub fn tail(&self) -> u64 {
        self.data.tail()
    }

    fn expired(&self, now_ms: u64) -> bool {
        self.expires_ms.is_some_and(|at| at <= now_ms)
    }

    /// Sliding renewal: never moves expiry earlier.
    fn renew(&mut self, now_ms: u64) {
        if let Some(Lifetime::Ttl(secs)) = self.lifetime {
            let next = now_ms.saturating_add(secs.saturating_mul(1000));
            self.expires_ms = Some(self.expires_ms.map_or(next, |at| at.max(next)));
            self.renewed_ms = now_ms;
        }
    }

    /// Whether `offset` is a valid snapshot or retention point for this stream's mode. On a
    /// JSON stream whose byte before `offset` is cold, the answer is what the proposer read
    /// there (`read`), and unknown (a 503) when it read nothing.
    pub fn is_boundary(&self, offset: u64, read: Option<bool>) -> Result<bool, Refusal> {
        if !self.json
            || offset == 0
            || offset == self.retained_first()
            || self.data.is_chunk_edge(offset)
        {
            return Ok(true);
        }
        if offset <= self.data.hot_start() {
            return read.ok_or(Refusal::BoundaryUnknown);
        }
        Ok(self.data.byte_before(offset) == Some(b'\n'))
    }

    fn retained_first(&self) -> u64 {
        self.retained
    }
}

/// The state of every stream in one group. Cloning it is cheap next to its size (stream bytes
/// are shared segments): a snapshot clones on the core and encodes elsewhere.
#[derive(Debug, Default, Clone, serde::Serialize, serde::Deserialize)]
pub struct GroupState {
    /// Encoded in key order, so equal states encode to equal bytes on every replica.
    #[serde(serialize_with = "super::sorted::map")]
    pub(super) streams: HashMap<Box<str>, Stream>,
    pub(super) last_incarnation: u64,
    /// Cold objects no stream references any more, and when that happened (the command's
    /// clock): the leader deletes them after a grace, then forgets them by a command.
    #[serde(default)]
    pub(super) cold_garbage: Vec<(Arc<str>, u64)>,
    /// Hot payload bytes across the group's streams, kept as commands apply; recounted after
    /// a snapshot is loaded.
    #[serde(skip)]
    pub(super) hot: u64,
    /// Usage counters and erasure fences per bucket (absent from states of older builds).
    #[serde(default)]
    pub(super) tenancy: Tenancy,
    /// A backup import's parts staged so far, until its commit.
    #[serde(default)]
    pub(super) staging: Option<Staging>,
    /// Index pages of streams that are gone: the leader reads each page, releases what it
    /// lists and the page itself, then forgets the pages by a command. Left out while empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(super) cold_retired: Vec<super::page::ColdIndex>,
}

fn expires_for(lifetime: Option<Lifetime>, now_ms: u64) -> Option<u64> {
    match lifetime? {
        Lifetime::Ttl(secs) => Some(now_ms.saturating_add(secs.saturating_mul(1000))),
        Lifetime::ExpiresAt(at) => Some(at),
    }
}

pub fn snapshot_digest(content_type: &str, body: &[u8]) -> String {
    let mut h = Sha256::new();
    h.update(content_type.as_bytes());
    h.update([0u8]);
    h.update(body);
    format!("sha256:{:x}", h.finalize())
}

impl GroupState {
    /// A live stream: present and not expired.
    pub fn get(&self, key: &str, now_ms: u64) -> Option<&Stream> {
        self.streams.get(key).filter(|s| !s.expired(now_ms))
    }

    fn get_mut(&mut self, key: &str, now_ms: u64) -> Option<&mut Stream> {
        self.streams.get_mut(key).filter(|s| !s.expired(now_ms))
    }

    pub fn len(&self) -> usize {
        self.streams.len()
    }

    /// Whether a sweep at `now_ms` would drop a stream. The node proposes a sweep only then:
    /// an empty one still went through Raft as an entry of every group every sweep interval,
    /// replicated, journaled, and keeping every journal segment it landed in until the group's
    /// next snapshot.
    pub fn any_expired(&self, now_ms: u64) -> bool {
        self.streams.values().any(|s| s.expired(now_ms))
    }

    pub fn is_empty(&self) -> bool {
        self.streams.is_empty()
    }

    pub fn streams(&self) -> impl Iterator<Item = (&str, &Stream)> {
        self.streams.iter().map(|(k, v)| (&**k, v))
    }

    /// Applies one command at `now_ms`, the time the engine stamped on it.
    pub fn apply(&mut self, cmd: Command, now_ms: u64) -> Result<Applied, Refusal> {
        match cmd {
            Command::Create(c) => self.create(c, now_ms),
            Command::Append(a) => self.append(a, now_ms),
            Command::Delete { key, incarnation } => {
                let s = self.get(&key, now_ms).ok_or(Refusal::NotFound)?;
                check_incarnation(s, incarnation)?;
                if let Some(gone) = self.streams.remove(key.as_str()) {
                    self.hot -= gone.data.hot_len();
                    self.release_stream(gone, now_ms);
                }
                Ok(Applied::Deleted)
            }
            Command::ColdFlush {
                object,
                slices,
                owned,
            } => Ok(self.cold_flush(&object, slices, owned, now_ms)),
            Command::ColdForget { objects } => {
                self.cold_garbage.retain(|(o, _)| !objects.contains(o));
                Ok(Applied::ColdForgotten)
            }
            Command::PublishSnapshot(p) => self.publish_snapshot(p, now_ms),
            Command::Retain {
                key,
                offset,
                incarnation,
                boundary,
            } => self.retain(&key, (offset, boundary), incarnation, now_ms),
            Command::Renew { key } => {
                if let Some(s) = self.get_mut(&key, now_ms) {
                    s.renew(now_ms);
                }
                Ok(Applied::Renewed)
            }
            Command::Sweep => {
                let before = self.streams.len();
                let mut expired: Vec<Box<str>> = self
                    .streams
                    .iter()
                    .filter(|(_, s)| s.expired(now_ms))
                    .map(|(k, _)| k.clone())
                    .collect();
                // Key order: every replica releases in the same order, so states stay equal
                // byte for byte.
                expired.sort_unstable();
                for k in expired {
                    if let Some(gone) = self.streams.remove(&k) {
                        self.hot -= gone.data.hot_len();
                        self.release_stream(gone, now_ms);
                    }
                }
                Ok(Applied::Swept {
                    removed: before - self.streams.len(),
                })
            }
            Command::Purge {
                bucket,
                forget_cold,
            } => Ok(self.purge(&bucket, forget_cold, now_ms)),
            Command::ImportPart {
                import,
                index,
                bytes,
            } => self.stage_import(import, index, bytes),
            Command::ImportCommit { import, parts } => self.commit_import(import, parts),
            Command::ColdCompact(c) => Ok(self.cold_compact(c, now_ms)),
            Command::ColdIndex(c) => Ok(self.cold_index(c)),
            Command::ColdDropPages(c) => Ok(self.cold_drop_pages(c, now_ms)),
        }
    }

    fn next_incarnation(&mut self, now_ms: u64) -> u64 {
        // Strictly increasing per group, so a recreated stream never reuses a token.
        let candidate = now_ms.saturating_mul(1000);
        self.last_incarnation = candidate.max(self.last_incarnation + 1);
        self.last_incarnation
    }

    fn create(&mut self, c: Create, now_ms: u64) -> Result<Applied, Refusal> {
        if let Some(s) = self.get(&c.key, now_ms) {
            check_incarnation(s, c.incarnation)?;
            if *s.content_type != *c.content_type {
                return Err(Refusal::ConfigConflict("content type differs".into()));
            }
            if s.closed != c.closed {
                return Err(Refusal::ConfigConflict("closed state differs".into()));
            }
            let same_lifetime = match (s.lifetime, c.lifetime) {
                (None, None) => true,
                (Some(Lifetime::Ttl(a)), Some(Lifetime::Ttl(b))) => a == b,
                (Some(Lifetime::ExpiresAt(a)), Some(Lifetime::ExpiresAt(b))) => a == b,
                _ => false,
            };
            if !same_lifetime {
                return Err(Refusal::ConfigConflict("TTL or expiry differs".into()));
            }
            return Ok(Applied::Created {
                meta: s.meta(),
                fresh: false,
            });
        }
        if self.tenancy.is_erased(&c.key) {
            // A purged bucket stays concealed: nothing is created in it again.
            return Err(Refusal::NotFound);
        }
        if c.incarnation.is_some() {
            return Err(Refusal::IncarnationMismatch { current: None });
        }
        if c.producer.as_ref().is_some_and(|p| p.seq != 0) {
            return Err(Refusal::CreateSeqNotZero);
        }
        let json = ursula_protocol::content_type::is_json(&c.content_type);
        let (initial, staged): (Bytes, _) = match c.body {
            None => (Bytes::new(), None),
            Some(Body::Raw(b)) => (b, None),
            Some(Body::Json(Ok(b))) => (b, None),
            Some(Body::Json(Err(JsonError::EmptyArray))) => (Bytes::new(), None),
            Some(Body::Json(Err(e))) => return Err(Refusal::InvalidJson(e)),
            // A staged initial body: the object holds the body alone, from offset 0 (a new
            // stream has no hot ring, and no incarnation until now, so the locator's is unread).
            Some(Body::External(x)) if x.hot_from == 0 && x.hot_len == 0 => (Bytes::new(), Some(x)),
            Some(Body::External(_)) => return Err(Refusal::ExternalMoved),
        };
        let mut data = StreamData::default();
        data.append_at(&initial, now_ms);
        if let Some(x) = &staged
            && !data.place_external(x)
        {
            return Err(Refusal::ExternalMoved);
        }
        let incarnation = self.next_incarnation(now_ms);
        let mut stream = Stream {
            incarnation,
            content_type: c.content_type.into(),
            json,
            lifetime: c.lifetime,
            expires_ms: expires_for(c.lifetime, now_ms),
            renewed_ms: now_ms,
            closed: c.closed,
            data,
            retained: 0,
            stream_seq: c.stream_seq.map(Into::into),
            producers: None,
            snapshot: None,
        };
        if let Some(p) = c.producer {
            let mut producers = Producers::default();
            producers.record(
                &p.id,
                p.epoch,
                0,
                now_ms,
                Receipt {
                    next_offset: stream.tail(),
                },
            );
            stream.producers = Some(Box::new(producers));
        }
        let meta = stream.meta();
        self.hot += stream.data.hot_len();
        let stored = initial.len() as u64 + staged.as_ref().map_or(0, |x| x.len);
        self.tenancy.count(&c.key, stored);
        // An expired stream at this key is replaced by the new incarnation.
        if let Some(old) = self.streams.insert(c.key.into(), stream) {
            self.hot -= old.data.hot_len();
            self.release_stream(old, now_ms);
        }
        Ok(Applied::Created { meta, fresh: true })
    }

    fn append(&mut self, a: Append, now_ms: u64) -> Result<Applied, Refusal> {
        let s = self.get_mut(&a.key, now_ms).ok_or(Refusal::NotFound)?;
        check_incarnation(s, a.incarnation)?;
        let body_empty = a.body.is_empty();
        if body_empty && !a.close {
            return Err(Refusal::EmptyAppend);
        }
        let tail = s.tail();
        // Producer duplicates are answered before any other conflict.
        let mut verdict = None;
        if let Some(p) = &a.producer {
            let v = s.producers.as_ref().map_or_else(
                || Producers::default().check(&p.id, p.epoch, p.seq, now_ms),
                |ps| ps.check(&p.id, p.epoch, p.seq, now_ms),
            );
            if let Verdict::Duplicate {
                epoch,
                last_seq,
                receipt,
            } = v
            {
                return Ok(Applied::Appended {
                    incarnation: s.incarnation,
                    next_offset: receipt.map(|r| r.next_offset),
                    closed: s.closed,
                    producer_ack: Some((epoch, last_seq)),
                    duplicate: true,
                });
            }
            verdict = Some(v);
        }
        if s.closed {
            if body_empty && a.producer.is_none() {
                // Closing again is idempotent and renews nothing.
                return Ok(Applied::Appended {
                    incarnation: s.incarnation,
                    next_offset: Some(tail),
                    closed: true,
                    producer_ack: None,
                    duplicate: true,
                });
            }
            return Err(Refusal::Closed { tail });
        }
        if !body_empty {
            match &a.content_type {
                Some(ct) if **ct == *s.content_type => {}
                got => {
                    return Err(Refusal::ContentTypeMismatch {
                        tail,
                        got: got.clone().unwrap_or_default(),
                        want: s.content_type.to_string(),
                    });
                }
            }
        }
        if let (Some(p), Some(v)) = (&a.producer, verdict) {
            match v {
                Verdict::Accept | Verdict::Duplicate { .. } => {}
                Verdict::StaleEpoch { current } => {
                    return Err(Refusal::StaleEpoch {
                        current,
                        got: p.epoch,
                    });
                }
                Verdict::NewEpochNotZero => return Err(Refusal::NewEpochNotZero),
                Verdict::Gap { expected } => {
                    return Err(Refusal::SeqGap {
                        expected,
                        received: p.seq,
                    });
                }
                Verdict::Full => return Err(Refusal::ProducerLimit),
            }
        }
        if let Some(seq) = &a.stream_seq
            && s.stream_seq
                .as_deref()
                .is_some_and(|stored| seq.as_slice() <= stored)
        {
            return Err(Refusal::StreamSeqConflict { tail });
        }
        let bytes: &[u8] = match &a.body {
            Body::Raw(b) => b,
            Body::Json(Ok(b)) => b,
            Body::Json(Err(JsonError::EmptyArray)) if a.close => &[],
            Body::Json(Err(e)) => return Err(Refusal::InvalidJson(e.clone())),
            Body::External(_) => &[],
        };
        // Commit.
        // A staged append leaves nothing hot and takes the hot bytes it found into its object.
        let (appended, staged_hot) = match &a.body {
            Body::External(x) => {
                if x.incarnation != s.incarnation || !s.data.place_external(x) {
                    return Err(Refusal::ExternalMoved);
                }
                (x.len, Some(x.hot_len))
            }
            _ => {
                s.data.append_at(bytes, now_ms);
                (bytes.len() as u64, None)
            }
        };
        if a.close {
            s.closed = true;
        }
        if let Some(seq) = a.stream_seq {
            s.stream_seq = Some(seq.into());
        }
        let next = s.tail();
        let ack = a.producer.map(|p| {
            let producers = s.producers.get_or_insert_with(Default::default);
            producers.record(&p.id, p.epoch, p.seq, now_ms, Receipt { next_offset: next });
            (p.epoch, p.seq)
        });
        s.renew(now_ms);
        let applied = Applied::Appended {
            incarnation: s.incarnation,
            next_offset: Some(next),
            closed: s.closed,
            producer_ack: ack,
            duplicate: false,
        };
        match staged_hot {
            Some(freed) => self.hot -= freed,
            None => self.hot += appended,
        }
        self.tenancy.count(&a.key, appended);
        Ok(applied)
    }

    fn publish_snapshot(&mut self, p: PublishSnapshot, now_ms: u64) -> Result<Applied, Refusal> {
        let s = self.get_mut(&p.key, now_ms).ok_or(Refusal::NotFound)?;
        check_incarnation(s, p.incarnation)?;
        if p.offset < s.retained {
            return Err(Refusal::Gone {
                retained: s.retained,
            });
        }
        if p.offset > s.tail() {
            return Err(Refusal::SnapshotBeyondTail);
        }
        let digest = match &p.cold {
            Some(c) => c.digest.clone(),
            None => snapshot_digest(&p.content_type, &p.body),
        };
        if let Some(existing) = &s.snapshot {
            if existing.offset == p.offset {
                if existing.digest != digest {
                    return Err(Refusal::SnapshotDiffers);
                }
                let applied = Applied::SnapshotPublished {
                    incarnation: s.incarnation,
                    offset: p.offset,
                    digest,
                    tail: s.tail(),
                };
                // A retried publish staged its body again; the first copy stays.
                if let Some(c) = p.cold {
                    self.release(vec![c.object], now_ms);
                }
                return Ok(applied);
            }
            if existing.offset > p.offset {
                return Err(Refusal::SnapshotStale);
            }
        }
        if !s.is_boundary(p.offset, p.boundary)? {
            return Err(Refusal::NotMessageBoundary);
        }
        let replaced = s.snapshot.replace(Box::new(Snapshot {
            offset: p.offset,
            content_type: p.content_type,
            body: p.body,
            digest: digest.clone(),
            cold: p.cold.map(|c| c.object),
        }));
        let applied = Applied::SnapshotPublished {
            incarnation: s.incarnation,
            offset: p.offset,
            digest,
            tail: s.tail(),
        };
        // A superseded cold body goes after the grace, so a read that started before completes.
        if let Some(old) = replaced.and_then(|o| o.cold) {
            self.release(vec![old], now_ms);
        }
        Ok(applied)
    }

    fn retain(
        &mut self,
        key: &str,
        (offset, boundary): (u64, Option<bool>),
        incarnation: Option<u64>,
        now_ms: u64,
    ) -> Result<Applied, Refusal> {
        let s = self.get_mut(key, now_ms).ok_or(Refusal::NotFound)?;
        check_incarnation(s, incarnation)?;
        if offset == s.retained {
            return Ok(Applied::Retained {
                incarnation: s.incarnation,
                offset,
            });
        }
        if offset < s.retained {
            return Err(Refusal::RetentionBackward);
        }
        if offset > s.tail() {
            return Err(Refusal::RetentionBeyondTail);
        }
        if s.snapshot.as_ref().is_none_or(|snap| offset > snap.offset) {
            return Err(Refusal::RetentionBeyondSnapshot);
        }
        if !s.is_boundary(offset, boundary)? {
            return Err(Refusal::NotMessageBoundary);
        }
        s.retained = offset;
        let before = s.data.hot_len();
        s.data.trim_below(offset);
        let freed = before - s.data.hot_len();
        let forgotten = s.data.forget_cold_below(offset);
        let incarnation = s.incarnation;
        self.hot -= freed;
        self.release(forgotten, now_ms);
        Ok(Applied::Retained {
            incarnation,
            offset,
        })
    }
}

pub fn check_incarnation(s: &Stream, wanted: Option<u64>) -> Result<(), Refusal> {
    match wanted {
        Some(w) if w != s.incarnation => Err(Refusal::IncarnationMismatch {
            current: Some(s.incarnation),
        }),
        _ => Ok(()),
    }
}

impl GroupState {
    /// Stream bytes held in memory across the group.
    pub fn held_bytes(&self) -> u64 {
        self.streams.values().map(|s| s.data.held_bytes()).sum()
    }

    /// Hot payload bytes not yet flushed, across the group.
    pub fn hot_bytes(&self) -> u64 {
        self.hot
    }

    /// Recomputes the hot byte count (after a snapshot was loaded).
    pub fn recount_hot(&mut self) {
        self.hot = self.streams.values().map(|s| s.data.hot_len()).sum();
    }

    /// Objects released by every stream and waiting out their grace before deletion.
    pub fn cold_garbage(&self) -> &[(Arc<str>, u64)] {
        &self.cold_garbage
    }

    /// Every cold object this group's state names: the streams' chunks and cold snapshot
    /// bodies, and the released objects still waiting out their grace. An object of the
    /// group's that is not among them is referenced by nothing the group committed.
    pub fn cold_references(&self) -> impl Iterator<Item = Arc<str>> + '_ {
        let live = self.streams.values().flat_map(|s| s.objects());
        let retired = self
            .cold_retired
            .iter()
            .flat_map(|ix| ix.keys().map(Arc::from));
        live.chain(retired)
            .chain(self.cold_garbage.iter().map(|(o, _)| o.clone()))
    }

    /// Queues for deletion each object in `objects` no live stream still references. Packed
    /// objects are shared by streams, so only the last reference frees one.
    pub(super) fn release(&mut self, objects: Vec<Arc<str>>, now_ms: u64) {
        for o in objects {
            let referenced = self
                .streams
                .values()
                .any(|s| s.data.objects().any(|x| *x == o));
            if !referenced && !self.cold_garbage.iter().any(|(g, _)| *g == o) {
                self.cold_garbage.push((o, now_ms));
            }
        }
    }

    /// Applies a flush: each slice that still starts where its stream's hot ring does moves
    /// to the object. An object no slice landed in is garbage at once.
    fn cold_flush(
        &mut self,
        object: &Arc<str>,
        slices: Vec<FlushSlice>,
        owned: bool,
        now_ms: u64,
    ) -> Applied {
        // Only an object holding one stream's bytes can move into that stream's pages.
        let owned = owned && slices.len() == 1;
        let mut accepted = 0;
        for sl in &slices {
            let Some(s) = self.streams.get_mut(sl.key.as_str()) else {
                continue;
            };
            if s.incarnation != sl.incarnation {
                continue;
            }
            let before = s.data.hot_len();
            if s.data
                .flushed(sl.start, sl.end, (object.clone(), sl.at, owned), now_ms)
            {
                accepted += 1;
                self.hot -= before - s.data.hot_len();
            }
        }
        if accepted == 0 && !self.cold_garbage.iter().any(|(g, _)| g == object) {
            self.cold_garbage.push((object.clone(), now_ms));
        }
        Applied::ColdFlushed {
            accepted,
            slices: slices.len(),
        }
    }
}
