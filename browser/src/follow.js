// Following a stream from a browser: the latest snapshot, then every frame after it, read with
// long-polls from the offset the replica reached. A dropped connection is read again from that
// offset; a deleted or recreated stream, or bytes that are no frames, stop the replica.
import { UrsulaReplicaError } from "./errors.js";
import { FrameReader, decodeSnapshot } from "./format.js";
import { Image } from "./image.js";

const POLL_MS = 25_000;
const MAX_BACKOFF_MS = 2_000;

const sleep = (ms, signal) =>
  new Promise((ok) => {
    const t = setTimeout(ok, ms);
    signal.addEventListener("abort", () => { clearTimeout(t); ok(); }, { once: true });
  });

/** The stream is gone or no longer the one followed: the replica stops. */
class Stop extends Error {}

/** The gateway refused the token: fatal while catching up, retried while following. */
class Refused extends Error {}

function refusal(status, url) {
  if (status === 401) {
    return new Refused(`the gateway refused the token for ${url} (401): give a valid one (setToken)`, {
      cause: { kind: "unauthorized", action: "fix" },
    });
  }
  return new Refused(`the gateway does not let this token read ${url} (403)`, {
    cause: { kind: "forbidden", action: "fix" },
  });
}

/**
 * A live read-only copy of the SQLite database the stream at `url` replicates.
 * `replica.db` is a `sqlite3.oo1.DB`; `status()`, `onCommit(fn)`, `setToken(t)`, `close()`;
 * `stopped` resolves with the `UrsulaReplicaError` that stopped it (or `null` after `close`).
 */
export class Replica {
  #url;
  #token;
  #fetch;
  #image;
  #frames = new FrameReader();
  #abort = new AbortController();
  #listeners = new Set();
  #incarnation = null;
  /** Where the next read starts: past the last byte read, which may be inside a frame. */
  #readAt = "-1";
  #stop;
  #closed = false;
  #state = {
    offset: "-1",
    snapshot: null,
    epoch: 0n,
    commits: 0,
    caughtUp: false,
    following: true,
    error: null,
    lastError: null,
  };

  constructor(url, { sqlite3, token, fetch: fetchFn }) {
    this.#url = url;
    this.#token = token ?? null;
    this.#fetch = fetchFn ?? globalThis.fetch.bind(globalThis);
    this.#image = new Image(sqlite3);
    this.stopped = new Promise((ok) => { this.#stop = ok; });
  }

  get db() {
    return this.#image.db;
  }

  /** Where the replica is: the offset its database reflects and how it follows. */
  status() {
    const s = this.#state;
    return { ...s, epoch: Number(s.epoch), dbBytes: this.#image.pages * 4096 };
  }

  /** Calls `fn({ offset, commits })` after each batch of whole commits is applied. */
  onCommit(fn) {
    this.#listeners.add(fn);
    return () => this.#listeners.delete(fn);
  }

  /** The bearer token of the next requests (`null` for none). */
  setToken(token) {
    this.#token = token ?? null;
  }

  /** Stops following and closes the database. */
  close() {
    this.#abort.abort();
    this.#finish(null);
    if (!this.#closed) {
      this.#closed = true;
      this.#image.close();
    }
  }

  /** Stops following; the database keeps the last whole commit it reached until `close()`. */
  #finish(error) {
    if (!this.#state.following) return;
    this.#state.following = false;
    this.#state.error = error;
    this.#stop(error);
  }

  async #request(method, url, long = false) {
    const headers = {};
    if (this.#token !== null) headers.authorization = `Bearer ${this.#token}`;
    if (this.#incarnation !== null) headers["stream-incarnation"] = this.#incarnation;
    const res = await this.#fetch(url, { method, headers, signal: this.#abort.signal, cache: "no-store" });
    const body = method === "HEAD" ? new Uint8Array(0) : new Uint8Array(await res.arrayBuffer());
    return { status: res.status, headers: res.headers, body, long };
  }

  /** HEAD of the stream: its incarnation and latest snapshot, or a stop. */
  async #head() {
    const a = await this.#request("HEAD", this.#url);
    if (a.status === 404) throw this.#gone();
    if (a.status === 412) throw this.#recreated();
    if (a.status === 401 || a.status === 403) throw refusal(a.status, this.#url);
    if (a.status !== 200) throw new Error(`reading the stream's state answered ${a.status}`);
    return { incarnation: a.headers.get("stream-incarnation"), snapshot: a.headers.get("stream-snapshot-offset") };
  }

  #gone() {
    if (this.#incarnation === null) {
      return new Stop(`there is no stream at ${this.#url}, or the gateway conceals it from this token`, {
        cause: { kind: "not_found", action: "fix" },
      });
    }
    return new Stop(`the stream ${this.#url} was deleted: this replica stopped following it at ${this.#state.offset}`, {
      cause: { kind: "not_found", action: "reattach" },
    });
  }

  #recreated() {
    return new Stop(`the stream ${this.#url} was deleted and recreated: this replica followed the earlier one`, {
      cause: { kind: "stream_state", action: "reattach" },
    });
  }

  async #installSnapshot(offset) {
    const a = await this.#request("GET", `${this.#url}/snapshot/${offset}`);
    if (a.status !== 200) throw new Error(`reading snapshot ${offset} answered ${a.status}`);
    const snap = decodeSnapshot(a.body);
    this.#image.load(snap.image);
    this.#frames = new FrameReader();
    this.#readAt = snap.offset;
    this.#state.offset = snap.offset;
    this.#state.snapshot = snap.offset;
    this.#state.epoch = snap.epoch > this.#state.epoch ? snap.epoch : this.#state.epoch;
  }

  /** The first catch-up: the latest snapshot, when there is one. */
  async start() {
    const head = await this.#head();
    this.#incarnation = head.incarnation;
    if (head.snapshot !== null) await this.#installSnapshot(head.snapshot);
  }

  /** One read; `true` when the stream answered. */
  async poll() {
    const live = this.#state.caughtUp ? `&live=long-poll&timeout_ms=${POLL_MS}` : "";
    const a = await this.#request("GET", `${this.#url}?offset=${this.#readAt}${live}`, live !== "");
    switch (a.status) {
      case 200:
        this.#apply(a);
        return true;
      case 204:
        this.#state.caughtUp = true;
        return true;
      case 404:
        throw this.#gone();
      case 412:
        throw this.#recreated();
      case 401:
      case 403:
        throw refusal(a.status, this.#url);
      case 416: {
        const head = await this.#head();
        if (head.incarnation !== this.#incarnation) throw this.#recreated();
        throw new Stop(`the stream ${this.#url} ends before ${this.#state.offset}, which this replica applied: the stream lost commits`, {
          cause: { kind: "stream_state", action: "reattach" },
        });
      }
      case 410: {
        // Retention passed the offset: go on from the latest snapshot when it is past it.
        const head = await this.#head();
        if (head.snapshot === null || head.snapshot <= this.#state.offset) {
          throw new Stop(`retention passed ${this.#state.offset}, which this replica reached, and no snapshot after it is readable`, {
            cause: { kind: "stream_state", action: "reattach" },
          });
        }
        await this.#installSnapshot(head.snapshot);
        this.#notify(0);
        return true;
      }
      default:
        this.#state.lastError = `HTTP ${a.status}`;
        return false;
    }
  }

  #apply(a) {
    const next = a.headers.get("stream-next-offset");
    if (next === null) throw new Error("a read answered without Stream-Next-Offset");
    this.#frames.push(a.body);
    const commits = [];
    for (let f = this.#frames.next(); f !== null; f = this.#frames.next()) {
      if (f.record.kind === "commit") commits.push(f.record);
      else if (f.record.epoch > this.#state.epoch) this.#state.epoch = f.record.epoch;
    }
    this.#image.apply(commits);
    this.#readAt = next;
    // The offset after a whole frame is known where a read ends between frames.
    const whole = this.#frames.pending === 0;
    if (whole) this.#state.offset = next;
    this.#state.caughtUp = whole && a.headers.get("stream-up-to-date") !== null;
    this.#state.commits += commits.length;
    this.#state.lastError = null;
    if (commits.length > 0) this.#notify(commits.length);
  }

  #notify(commits) {
    for (const fn of this.#listeners) {
      try {
        fn({ offset: this.#state.offset, commits });
      } catch (e) {
        queueMicrotask(() => { throw e; });
      }
    }
  }

  /** Follows until closed or stopped. */
  async run() {
    let backoff = 50;
    while (this.#state.following) {
      try {
        const answered = await this.poll();
        if (answered) {
          backoff = 50;
          continue;
        }
      } catch (e) {
        if (this.#abort.signal.aborted) return;
        if (e instanceof Stop) return this.#finish(new UrsulaReplicaError(e.message, e.cause));
        if (e?.name === "FormatError") {
          return this.#finish(new UrsulaReplicaError(`the stream holds bytes that are no frames of this format: ${e.message}`, {
            kind: "stream_state", action: "fix", cause: e,
          }));
        }
        // A refused token (setToken may replace it), a dropped connection or a network error:
        // read again from the same offset.
        this.#state.lastError = String(e?.message ?? e);
      }
      await sleep(backoff, this.#abort.signal);
      backoff = Math.min(backoff * 2, MAX_BACKOFF_MS);
    }
  }
}
