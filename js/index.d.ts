// Types of @tonbo/sqlite-ursula (hand-written; the package ships plain ESM).
import type { DatabaseSync, DatabaseSyncOptions } from "node:sqlite";

/**
 * A stream offset as the server wrote it: opaque. Compare two offsets of one stream only as
 * strings, never as numbers. `"-1"` means none.
 */
export type StreamOffset = string;

/** What to do about a failure. */
export type UrsulaAction = "retry" | "reattach" | "stop" | "fix";

/** What refused a commit before it reached the stream (`status(file).refused_kind`). */
export type WriteRefusedKind =
  | "payment_required"
  | "unauthorized"
  | "forbidden"
  | "rate_limited"
  | "too_large"
  | "not_applied"
  | "unreachable";

/** The extension's failure kinds. */
export type UrsulaErrorKind =
  | WriteRefusedKind
  | "unsupported"
  | "refused"
  | "unavailable"
  | "outcome_unknown"
  | "local_damage"
  | "local_state"
  | "internal"
  | "fenced"
  | "invalid_argument"
  | "invalid_url"
  | "invalid_name"
  | "not_found"
  | "in_use"
  | "unreplicated_file"
  | "other_stream"
  | "stream_state"
  | "not_attached"
  | "local_setup"
  | "retained";

export interface UrsulaErrorDetails {
  action: UrsulaAction;
  kind: UrsulaErrorKind | string;
  reason?: string | null;
  fenced?: boolean;
  cause?: unknown;
}

/** A failure of the extension. Branch on `action`. */
export class UrsulaError extends Error {
  constructor(message: string, details: UrsulaErrorDetails);
  /** What to do: retry, reattach (close and open again), stop, or fix the setup. */
  readonly action: UrsulaAction;
  /** What failed: the extension's kind; for a refused commit, what refused it. */
  readonly kind: UrsulaErrorKind | string;
  /** Why: the refusing layer's explanation, the poison's reason, or the extension's message. */
  readonly reason: string | null;
  /** True when another owner took the stream over. */
  readonly fenced: boolean;
  /**
   * For kind `retained` (an `at` below what the stream can rebuild): the earliest offset an
   * `at` open can rebuild now, the latest snapshot's.
   */
  readonly earliest?: StreamOffset | null;
  /** Copied from `cause` when it is node:sqlite's error. */
  readonly code?: string;
  readonly errcode?: number;
  readonly errstr?: string;
}
/** Nothing reached the stream (action retry; fix for too_large). */
export class UrsulaWriteRefusedError extends UrsulaError {}
/** Refused with 402 Payment Required in front of the stream (action retry). */
export class UrsulaPaymentRequiredError extends UrsulaWriteRefusedError {}
/** A commit the stream did not take: the file needs a new attach (action fix). */
export class UrsulaReplicationError extends UrsulaError {}
/** The local file may not match the stream: close and open again (action reattach). */
export class UrsulaReattachError extends UrsulaReplicationError {}
/** Another owner holds the stream: stop using the database (action stop). */
export class UrsulaFencedError extends UrsulaReplicationError {}
/** The request cannot succeed as made (action fix). */
export class UrsulaSetupError extends UrsulaError {}

/** node:sqlite's options and these four; `open` refuses any other key (`invalid_argument`). */
export interface OpenOptions extends DatabaseSyncOptions {
  /** The local file, a plain path (made absolute now). Default: a file named after the URL in `dir`. */
  path?: string;
  /** Directory of the file named after the URL. Default: `sqlite-ursula` in the cache directory. */
  dir?: string;
  /** Attach read-only and open read-only, on a `-ro<n>` file of its own without `path`. */
  readOnly?: boolean;
  /**
   * With `readOnly`: a live read replica. After the catch-up the file keeps applying the
   * owner's commits as they reach the stream; each read transaction sees whole commits only.
   */
  follow?: boolean;
  /**
   * With `readOnly: true` only: the database as it was after the last commit at or before this
   * stream offset (20 digits, as `status().offset` and `commits()` give them; `"-1"`: before
   * any commit). Rebuilt from the latest snapshot at or before it, else from the stream's start;
   * below what can be rebuilt it fails with kind `retained` and `earliest`, past the tail with
   * `invalid_argument`.
   */
  at?: StreamOffset;
}

/** Opens the database `streamUrl` replicates: attach, then `new DatabaseSync(file)`. */
export function open(streamUrl: string, options?: OpenOptions): DatabaseSync;

/**
 * `open` with the attach and its catch-up from the stream off the event loop (on libuv's thread
 * pool): the same options, database and errors (as rejections). An open of a file whose
 * openAsync has not settled fails with in_use.
 */
export function openAsync(streamUrl: string, options?: OpenOptions): Promise<DatabaseSync>;

export interface AttachOptions {
  /** Catch up without claiming the stream; every write fails with SQLITE_READONLY. */
  readOnly?: boolean;
  /** With `readOnly`: keep applying the owner's commits (a live read replica). */
  follow?: boolean;
  /** With `readOnly: true`: rebuild the file as it was at this offset (see `OpenOptions.at`). */
  at?: StreamOffset;
}

/** Catches `file` up, claims the stream (unless read-only) and attaches it. */
export function attach(file: string, streamUrl: string, options?: AttachOptions): StreamOffset;

/** `attach` off the event loop; a second attach of `file` while one runs fails with in_use. */
export function attachAsync(file: string, streamUrl: string, options?: AttachOptions): Promise<StreamOffset>;

/**
 * Loads the extension once per process; returns the control connection. A later call returns
 * the same connection, and throws `UrsulaSetupError` (`local_setup`) if it names another
 * library than the one loaded.
 */
export function loadUrsulaVfs(path?: string): DatabaseSync;

/** Sets the process-wide bearer token; `null` returns to URSULA_VFS_TOKEN_FILE. */
export function setToken(token: string | null): void;

/** One commit of the stream, at the offset right after its frame. */
export interface CommitPoint {
  /** The commit point: what `status().offset` said after the commit, and an `at` that opens it. */
  readonly offset: StreamOffset;
  /** The epoch of the owner that wrote it; null when the listing began at a snapshot and no claim came before it. */
  readonly epoch: number | null;
  /** Pages the commit wrote. */
  readonly pages: number;
  /** The database's size in pages after it. */
  readonly db_pages: number;
  /** The commit frame's size on the stream. */
  readonly bytes: number;
}

export interface CommitListing {
  /** The earliest point an `at` open can rebuild: `"-1"` while the stream's start is readable, else the latest snapshot. */
  readonly earliest: StreamOffset;
  /** The stream's tail when the listing started; commits after it are not listed. */
  readonly tail: StreamOffset;
  /** The latest snapshot, `"-1"` for none. */
  readonly snapshot: StreamOffset;
  /** Oldest first. The frames carry no time: map offsets to times yourself if you need them. */
  readonly commits: CommitPoint[];
  /** More commits follow the last one listed: ask again with `from` set to its offset. */
  readonly more: boolean;
}

export interface CommitsOptions {
  /** List the commits after this offset (default: all that can be rebuilt). */
  from?: StreamOffset;
  /** At most this many (default 1000). */
  limit?: number;
}

/** The commit points an `at` open of `streamUrl` can rebuild (`ursula_commits`); reads the stream on the calling thread. */
export function commits(streamUrl: string, options?: CommitsOptions): CommitListing;

export interface AttachError {
  /**
   * `refused` for a write refused before it reached the stream (see `refused_kind`),
   * `unsupported` for a setup the extension refuses (EXCLUSIVE locking, page size; action fix),
   * or the poison's kind.
   */
  readonly kind: string;
  readonly action: UrsulaAction;
  readonly message: string;
  /** For a refused commit (`kind` is `refused`): what refused it. */
  readonly refused_kind?: WriteRefusedKind;
}

export interface AttachStatus {
  readonly offset: StreamOffset;
  readonly epoch: number;
  readonly poisoned: boolean;
  readonly fenced: boolean;
  readonly reason: string | null;
  readonly read_only: boolean;
  /** The offset an `at` attach asked for (`offset` is the commit point it built); null for other attaches. */
  readonly at: StreamOffset | null;
  readonly writes_refused: boolean;
  readonly refused_kind: WriteRefusedKind | null;
  readonly refused_reason: string | null;
  readonly payment_required: boolean;
  readonly payment_reason: string | null;
  readonly snapshot: StreamOffset;
  readonly retained: StreamOffset;
  readonly local: StreamOffset;
  readonly installed: StreamOffset;
  readonly attach_ms: number;
  readonly commits: number;
  readonly append_retries: number;
  readonly log_bytes: number;
  readonly snapshot_due_bytes: number;
  readonly snapshot_age_ms: number | null;
  readonly snapshot_failures: number;
  readonly snapshot_error: string | null;
  readonly snapshot_bytes: number | null;
  /** Why writes fail now, null while they go through. */
  readonly error: AttachError | null;
  /** A live read replica (`follow`) that still applies the owner's commits. */
  readonly following: boolean;
  /** A replica: the stream's tail as it last read it; null for other files. */
  readonly tail: StreamOffset | null;
  /** A replica: stream bytes between `offset` (applied) and `tail`; null for other files. */
  readonly lag_bytes: number | null;
  /** A replica: milliseconds since it last had applied all it read (0: caught up). */
  readonly lag_ms: number | null;
}

export function status(file: string): AttachStatus;

export interface VfsCommitStat {
  readonly bytes: number;
  readonly raw: number;
  readonly pages: number;
  readonly attempts: number;
  readonly append_us: number;
  readonly vfs_us: number;
}

export interface VfsSnapshotStat {
  readonly offset: StreamOffset;
  readonly bytes: number;
  readonly raw: number;
  readonly copy_us: number;
  readonly total_us: number;
}

export interface VfsStats {
  readonly commits: VfsCommitStat[];
  readonly checkpoints_us: number[];
  readonly snapshots: VfsSnapshotStat[];
  /** Measurements dropped since the last drain (the newest 8,192 of each kind are kept). */
  readonly dropped: {
    readonly commits: number;
    readonly commit_bytes: number;
    readonly commit_retries: number;
    readonly checkpoints: number;
    readonly snapshots: number;
  };
}

export function drainStats(file: string): VfsStats;

export type MetricAttributes = Readonly<Record<string, string | number | boolean>>;

/** The part of an OpenTelemetry Meter that instrument uses. */
export interface MeterLike {
  createHistogram(name: string, options?: { description?: string; unit?: string }): {
    record(value: number, attributes?: MetricAttributes): void;
  };
  createCounter(name: string, options?: { description?: string; unit?: string }): {
    add(value: number, attributes?: MetricAttributes): void;
  };
  createObservableGauge(name: string, options?: { description?: string; unit?: string }): {
    addCallback(callback: (result: { observe(value: number, attributes?: MetricAttributes): void }) => void): void;
    removeCallback?(callback: (result: { observe(value: number, attributes?: MetricAttributes): void }) => void): void;
  };
}

export interface InstrumentOptions {
  /** How often to drain drainStats, in milliseconds (1000). */
  intervalMs?: number;
  /** Added to every measurement, next to `sqlite.file`. */
  attributes?: MetricAttributes;
}

/** Reports `file` as metrics on `meter`; call the returned function to stop. */
export function instrument(file: string, meter: MeterLike, options?: InstrumentOptions): () => void;
