// Buffers browser events and appends them to a JSON stream: one POST of a JSON array appends one
// message per element, in order. Each event keeps the one time the browser captured; Ursula
// orders the stream by commit, never by that time.
const STREAM = "/telemetry/events";
const queue = [];
let sent = 0;

function capture(type, fields = {}) {
  queue.push({ captured_at: new Date().toISOString(), type, page: location.pathname, ...fields });
}

async function flush() {
  if (queue.length === 0) return;
  const batch = queue.splice(0);
  try {
    const response = await fetch(STREAM, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(batch),
      keepalive: true,
    });
    if (!response.ok) throw new Error(`append answered ${response.status}`);
    sent += batch.length;
    document.querySelector("#sent").textContent = String(sent);
    document.querySelector("#tail").textContent = response.headers.get("Stream-Next-Offset");
  } catch (e) {
    // Offline or refused: keep the events, in order, for the next flush.
    queue.unshift(...batch);
    capture("telemetry_error", { message: String(e.message ?? e) });
  }
}

addEventListener("load", () => {
  const nav = performance.getEntriesByType("navigation")[0];
  capture("navigation", { duration_ms: nav === undefined ? null : Math.round(nav.duration) });
  flush();
});
addEventListener("click", (e) => {
  const target = e.target.closest("button");
  if (target !== null) {
    capture("click", { target: target.id });
    flush();
  }
});
addEventListener("error", (e) => capture("error", { message: e.message }));
// The last events of a closing page go out with keepalive.
addEventListener("pagehide", flush);
setInterval(flush, 1000);
