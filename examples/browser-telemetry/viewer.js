// Replays a JSON stream from its start, then tails it live. Bodies are NDJSON, one event per
// line, and neither a read nor an SSE event needs to end at a line's end: text is buffered
// until a newline and only whole lines are parsed (the spec's rule for NDJSON). The offset
// read up to is kept, so a reload could resume there.
const STREAM = "/telemetry/events";
const state = { offset: "-1", events: [], rawEvents: [], live: false };
window.telemetry = state;
let pending = "";

function feed(text) {
  pending += text;
  let nl;
  while ((nl = pending.indexOf("\n")) >= 0) {
    const line = pending.slice(0, nl);
    pending = pending.slice(nl + 1);
    if (line.length > 0) show(JSON.parse(line));
  }
}

function show(event) {
  state.events.push(event);
  const row = document.createElement("tr");
  const { captured_at, type, ...detail } = event;
  for (const text of [captured_at, type, JSON.stringify(detail)]) {
    const cell = document.createElement("td");
    cell.textContent = text;
    row.append(cell);
  }
  document.querySelector("#events").append(row);
  document.querySelector("#count").textContent = String(state.events.length);
}

function at(offset) {
  state.offset = offset;
  document.querySelector("#offset").textContent = offset;
}

// Replay: catch-up reads until the stream says the reader is up to date.
for (;;) {
  const r = await fetch(`${STREAM}?offset=${state.offset}`, { cache: "no-store" });
  if (!r.ok) throw new Error(`reading the stream answered ${r.status}`);
  feed(await r.text());
  at(r.headers.get("Stream-Next-Offset"));
  if (r.headers.get("Stream-Up-To-Date") !== null) break;
}

// Tail: data events carry NDJSON text; control events carry the offset to resume from. On a
// dropped connection EventSource reconnects by itself, to the URL it was given: make a new one
// from the offset reached instead, so nothing is read twice.
function tail() {
  const source = new EventSource(`${STREAM}?offset=${state.offset}&live=sse`);
  source.addEventListener("data", (e) => {
    state.rawEvents.push(e.data);
    feed(e.data);
  });
  source.addEventListener("control", (e) => {
    const control = JSON.parse(e.data);
    at(control.streamNextOffset);
    state.live = true;
    document.querySelector("#state").textContent = "live";
  });
  source.addEventListener("error", () => {
    source.close();
    document.querySelector("#state").textContent = "reconnecting";
    setTimeout(tail, 1000);
  });
}
tail();
