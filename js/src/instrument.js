// instrument(): an attached file's health as metrics on an OpenTelemetry-like Meter.
import { drainStats, status } from "./api.js";
import { setupError } from "./errors.js";

const GAUGES = [
  ["sqlite_ursula.log.bytes", "By", "Log since the latest snapshot, which a rebuild replays", (s) => s.log_bytes],
  ["sqlite_ursula.snapshot.due_bytes", "By", "Log size at which a snapshot is taken", (s) => s.snapshot_due_bytes],
  ["sqlite_ursula.snapshot.age", "ms", "Time since this owner last saw a snapshot published", (s) => s.snapshot_age_ms],
  ["sqlite_ursula.snapshot.failures", "{failure}", "Snapshot attempts that failed in a row", (s) => s.snapshot_failures],
  ["sqlite_ursula.snapshot.bytes", "By", "Compressed size of the latest snapshot body", (s) => s.snapshot_bytes],
  ["sqlite_ursula.poisoned", "1", "1 while commits fail until the file is attached again", (s) => flag(s.poisoned)],
  ["sqlite_ursula.fenced", "1", "1 when another owner took the stream over", (s) => flag(s.fenced)],
  ["sqlite_ursula.payment_required", "1", "1 while a layer refuses writes with 402", (s) => flag(s.payment_required)],
  ["sqlite_ursula.writes_refused", "1", "1 while writes are refused before the stream", (s) => flag(s.writes_refused)],
];

function flag(b) {
  return b ? 1 : 0;
}

/**
 * Reports `file`'s commits, appends and health on `meter` (any object with createHistogram,
 * createCounter and createObservableGauge) until the returned function is called. Drains
 * drainStats every `intervalMs` (1000 by default): do not drain the same file elsewhere.
 */
export function instrument(file, meter, options = {}) {
  if (typeof file !== "string") throw setupError("instrument", "invalid_argument", "the file must be a path string");
  for (const m of ["createHistogram", "createCounter", "createObservableGauge"]) {
    if (typeof meter?.[m] !== "function") {
      throw setupError("instrument", "invalid_argument", `the meter has no ${m}: pass an OpenTelemetry Meter`);
    }
  }
  const { intervalMs = 1000, attributes = {} } = options ?? {};
  if (!Number.isFinite(intervalMs) || intervalMs <= 0) {
    throw setupError("instrument", "invalid_argument", "intervalMs must be a positive number of milliseconds");
  }
  // Throws now, as an UrsulaError, when the file is not attached.
  status(file);
  const attrs = { "sqlite.file": file, ...attributes };
  const histogram = (name, unit, description) => meter.createHistogram(name, { unit, description });
  const counter = (name, unit, description) => meter.createCounter(name, { unit, description });
  const commitDuration = histogram("sqlite_ursula.commit.duration", "ms", "Commits in the VFS: frame build, append, local WAL write");
  const appendDuration = histogram("sqlite_ursula.append.duration", "ms", "The append requests of a commit, retries included");
  const retries = counter("sqlite_ursula.append.retries", "{attempt}", "Append attempts beyond the first");
  const streamBytes = counter("sqlite_ursula.stream.bytes", "By", "Compressed commit frame bytes appended to the stream");
  const unmeasured = counter("sqlite_ursula.commit.unmeasured", "{commit}", "Commits dropped between drains: counted in the counters, not in the histograms");
  const gauges = GAUGES.map(([name, unit, description, read]) => {
    const gauge = meter.createObservableGauge(name, { unit, description });
    const callback = (result) => {
      let s;
      try {
        s = status(file);
      } catch {
        return;
      }
      const v = read(s);
      if (typeof v === "number") result.observe(v, attrs);
    };
    gauge.addCallback(callback);
    return { gauge, callback };
  });

  const drain = () => {
    let stats;
    try {
      stats = drainStats(file);
    } catch {
      return;
    }
    for (const c of stats.commits) {
      commitDuration.record(c.vfs_us / 1000, attrs);
      appendDuration.record(c.append_us / 1000, attrs);
      if (c.attempts > 1) retries.add(c.attempts - 1, attrs);
      streamBytes.add(c.bytes, attrs);
    }
    const d = stats.dropped ?? {};
    if (d.commits > 0) unmeasured.add(d.commits, attrs);
    if (d.commit_bytes > 0) streamBytes.add(d.commit_bytes, attrs);
    if (d.commit_retries > 0) retries.add(d.commit_retries, attrs);
  };
  const timer = setInterval(drain, intervalMs);
  timer.unref();
  let stopped = false;
  return function stop() {
    if (stopped) return;
    stopped = true;
    clearInterval(timer);
    drain();
    for (const { gauge, callback } of gauges) gauge.removeCallback?.(callback);
  };
}
