// instrument() against a recording meter.
import assert from "node:assert/strict";
import { setTimeout as sleep } from "node:timers/promises";
import { test } from "node:test";
import { instrument, open, UrsulaSetupError } from "../index.js";
import { useServer } from "./helpers/hooks.mjs";
import { streamUrl, tempDir, thrown } from "./helpers/kit.mjs";

const ctx = useServer();

function recordingMeter() {
  const created = [];
  const records = [];
  const gauges = new Map();
  const meter = {
    createHistogram(name, options) {
      created.push({ type: "histogram", name, unit: options?.unit });
      return { record: (value, attributes) => records.push({ name, value, attributes }) };
    },
    createCounter(name, options) {
      created.push({ type: "counter", name, unit: options?.unit });
      return { add: (value, attributes) => records.push({ name, value, attributes }) };
    },
    createObservableGauge(name, options) {
      created.push({ type: "gauge", name, unit: options?.unit });
      const callbacks = new Set();
      gauges.set(name, callbacks);
      return { addCallback: (cb) => callbacks.add(cb), removeCallback: (cb) => callbacks.delete(cb) };
    },
  };
  const collect = () => {
    const out = {};
    for (const [name, callbacks] of gauges) {
      for (const cb of callbacks) cb({ observe: (value, attributes) => (out[name] = { value, attributes }) });
    }
    return out;
  };
  return { meter, created, records, collect, gauges };
}

test("instrument reports the spec's metrics, drains every intervalMs, and stops", async () => {
  const db = open(streamUrl(ctx.server.base, "metrics"), { dir: tempDir() });
  const file = db.location();
  const m = recordingMeter();
  const stop = instrument(file, m.meter, { intervalMs: 100, attributes: { service: "notes" } });
  assert.deepEqual(
    m.created.map((c) => `${c.type} ${c.name}`).sort(),
    [
      "counter sqlite_ursula.append.retries",
      "counter sqlite_ursula.commit.unmeasured",
      "counter sqlite_ursula.stream.bytes",
      "gauge sqlite_ursula.fenced",
      "gauge sqlite_ursula.log.bytes",
      "gauge sqlite_ursula.payment_required",
      "gauge sqlite_ursula.poisoned",
      "gauge sqlite_ursula.snapshot.age",
      "gauge sqlite_ursula.snapshot.bytes",
      "gauge sqlite_ursula.snapshot.due_bytes",
      "gauge sqlite_ursula.snapshot.failures",
      "gauge sqlite_ursula.writes_refused",
      "histogram sqlite_ursula.append.duration",
      "histogram sqlite_ursula.commit.duration",
    ],
  );
  assert.equal(m.created.find((c) => c.name === "sqlite_ursula.commit.duration").unit, "ms");
  db.exec("CREATE TABLE t(x)");
  for (let i = 0; i < 3; i++) db.prepare("INSERT INTO t VALUES (?)").run(i);
  await sleep(300);
  const durations = m.records.filter((r) => r.name === "sqlite_ursula.commit.duration");
  assert.equal(durations.length, 4);
  assert.ok(durations.every((r) => r.value > 0 && r.attributes["sqlite.file"] === file && r.attributes.service === "notes"));
  assert.equal(m.records.filter((r) => r.name === "sqlite_ursula.append.duration").length, 4);
  const bytes = m.records.filter((r) => r.name === "sqlite_ursula.stream.bytes").reduce((a, r) => a + r.value, 0);
  assert.ok(bytes > 0);
  const g = m.collect();
  assert.equal(g["sqlite_ursula.poisoned"].value, 0);
  assert.equal(g["sqlite_ursula.fenced"].value, 0);
  assert.equal(g["sqlite_ursula.writes_refused"].value, 0);
  assert.equal(g["sqlite_ursula.payment_required"].value, 0);
  assert.ok(g["sqlite_ursula.log.bytes"].value > 0);
  assert.ok(g["sqlite_ursula.snapshot.due_bytes"].value >= 8 * 1024 * 1024);
  assert.equal(g["sqlite_ursula.log.bytes"].attributes["sqlite.file"], file);

  stop();
  const count = m.records.length;
  db.prepare("INSERT INTO t VALUES (?)").run(9);
  await sleep(250);
  assert.equal(m.records.length, count, "no drain after stop");
  assert.equal([...m.gauges.values()].every((s) => s.size === 0), true, "gauge callbacks removed");
  db.close();
});

test("instrument of a file that is not attached throws an UrsulaError", () => {
  const e = thrown(() => instrument("/nonexistent/x.db", recordingMeter().meter));
  assert.ok(e instanceof UrsulaSetupError);
  assert.equal(e.kind, "not_attached");
});
