// The browser replica in a real browser: headless Chromium opens a page on one loopback origin
// that follows, through `ursula gateway` on another, a stream a Node owner commits to with
// `open()`. After every batch it applies the page reports a checksum of the notes table, and
// every one of them must be a state the owner committed: a whole commit, never half of one.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { PRIVATE, PUBLIC, startStack } from "./helpers/stack.mjs";

let stack;
let n = 0;
const streamUrl = (bucket) => `${stack.gatewayBase}/${bucket}/notes-${process.pid}-${++n}`;
const PAGE = "test/pages/replica.js";

before(async () => {
  stack = await startStack();
});

after(async () => {
  await stack?.stop();
});

/** Every state the owner's table went through, by checksum. */
function ownerStates(owner, lines) {
  return new Set([owner.ready.sum, ...lines.filter((l) => l.sum !== undefined).map((l) => l.sum)]);
}

/** The page's reports about `url`, in the order the page sent them. */
const pageReports = (url) => stack.reports.filter((r) => r.url === url).sort((a, b) => a.seq - b.seq);

const rowsOf = (sum) => (sum === "none" ? -1 : Number(sum.split("/")[0]));

function assertWholeCommits(url, states) {
  const seen = pageReports(url).filter((r) => r.sum !== undefined);
  let rows = -1;
  for (const r of seen) {
    assert.ok(r.sum === "none" || states.has(r.sum), `the page saw ${r.sum}, a state the owner never committed: ${JSON.stringify(r)}`);
    assert.ok(rowsOf(r.sum) >= rows, `the page went back from ${rows} rows to ${r.sum}`);
    rows = rowsOf(r.sum);
  }
  return new Set(seen.map((r) => r.sum));
}

test("a page on another origin follows a private stream through the gateway with a token and sees only whole commits", async () => {
  const url = streamUrl(PRIVATE);
  // Three rows of 1.5 KiB a commit: each commit writes several pages.
  const owner = await stack.owner(url, { count: 40, rate: 20, rows: 3, pad: 1500, token: stack.token() });
  const from = stack.reports.length;
  const page = stack.browse(PAGE, { url, token: stack.token() });
  try {
    const caught = await stack.waitReport((r) => r.url === url, { from, what: "catch-up report" });
    assert.equal(caught.event, "caught-up", JSON.stringify(caught));
    assert.equal(caught.sum, owner.ready.sum, "the replica caught up with the table the owner created");
    owner.go();
    const lines = await owner.done;
    const last = lines.filter((l) => l.sum !== undefined).at(-1);
    assert.equal(last.i, 40);
    await stack.waitReport((r) => r.url === url && r.sum === last.sum, { from, what: "the owner's last commit on the page" });
    const seen = assertWholeCommits(url, ownerStates(owner, lines));
    // Followed live, not only read at the end: most of the 40 commits showed on their own.
    assert.ok(seen.size >= 20, `the page showed ${seen.size} states of 41`);
  } finally {
    page.close();
  }
});

test("a page reads a public_read bucket without a token, and a private stream without one meets the concealing 404", async () => {
  const open = streamUrl(PUBLIC);
  const closed = streamUrl(PRIVATE);
  const owners = [
    await stack.owner(open, { count: 5, rate: 50, token: stack.token() }),
    await stack.owner(closed, { count: 5, rate: 50, token: stack.token() }),
  ];
  for (const o of owners) o.go();
  const [openLines] = await Promise.all(owners.map((o) => o.done));
  const from = stack.reports.length;
  const page = stack.browse(PAGE, { url: [open, closed] });
  try {
    const last = openLines.at(-2).sum;
    const caught = await stack.waitReport((r) => r.url === open, { from, what: "the public stream" });
    assert.equal(caught.event, "caught-up", JSON.stringify(caught));
    assert.equal(caught.sum, last);
    const refused = await stack.waitReport((r) => r.url === closed, { from, what: "the private stream" });
    assert.equal(refused.event, "refused", JSON.stringify(refused));
    assert.equal(refused.error.classified, true);
    assert.equal(refused.error.kind, "not_found", JSON.stringify(refused));
    assert.equal(refused.error.action, "fix");
  } finally {
    page.close();
  }
});

test("a stranger's token meets the concealing 404 and an expired one a 401, each classified", async () => {
  const url = streamUrl(PRIVATE);
  const owner = await stack.owner(url, { count: 1, rate: 50, token: stack.token() });
  owner.go();
  await owner.done;
  const cases = [
    ["stranger", stack.token("stranger-1"), "not_found"],
    ["expired", stack.token(undefined, -60), "unauthorized"],
  ];
  for (const [who, token, kind] of cases) {
    const from = stack.reports.length;
    const page = stack.browse(PAGE, { url, token });
    try {
      const r = await stack.waitReport((x) => x.url === url, { from, what: `the ${who}'s page` });
      assert.equal(r.event, "refused", JSON.stringify(r));
      assert.equal(r.error.classified, true, JSON.stringify(r));
      assert.equal(r.error.kind, kind, JSON.stringify(r));
      assert.equal(r.error.action, "fix");
      assert.equal(r.sum, undefined);
    } finally {
      page.close();
    }
  }
});

test("a page whose gateway goes away reads on from its offset when it is back, missing nothing", async () => {
  const url = streamUrl(PRIVATE);
  const direct = url.replace(stack.gatewayBase, stack.node.base);
  // The owner writes to the node itself, so that only the page loses its way in.
  const owner = await stack.owner(direct, { count: 60, rate: 30, rows: 2 });
  const from = stack.reports.length;
  const page = stack.browse(PAGE, { url, token: stack.token() });
  try {
    await stack.waitReport((r) => r.url === url && r.event === "caught-up", { from, what: "catch-up" });
    owner.go();
    await stack.waitReport((r) => r.url === url && rowsOf(r.sum) >= 20, { from, what: "ten commits" });
    await stack.stopGateway();
    await new Promise((r) => setTimeout(r, 700));
    const during = owner.lines.length;
    await stack.startGateway();
    const lines = await owner.done;
    assert.ok(lines.length > during, "the owner went on committing after the gateway was back");
    const last = lines.filter((l) => l.sum !== undefined).at(-1);
    await stack.waitReport((r) => r.url === url && r.sum === last.sum, { from, what: "the last commit after the outage" });
    assertWholeCommits(url, ownerStates(owner, lines));
    assert.equal(pageReports(url).filter((r) => r.event === "stopped").length, 0);
  } finally {
    page.close();
  }
});

test("a deleted stream stops the page's replica as not_found, a recreated one as stream_state", async () => {
  const gone = streamUrl(PRIVATE);
  const again = streamUrl(PRIVATE);
  for (const url of [gone, again]) {
    const o = await stack.owner(url, { count: 3, rate: 50, token: stack.token() });
    o.go();
    await o.done;
  }
  const from = stack.reports.length;
  const page = stack.browse(PAGE, { url: [gone, again], token: stack.token() });
  try {
    for (const url of [gone, again]) {
      await stack.waitReport((r) => r.url === url && r.event === "caught-up", { from, what: `catch-up of ${url}` });
    }
    const auth = { authorization: `Bearer ${stack.token()}` };
    // Deleted while the page waits on its long-poll.
    assert.equal((await fetch(gone, { method: "DELETE", headers: auth })).status, 204);
    const stopped = await stack.waitReport((r) => r.url === gone && r.event === "stopped", { from, what: "the deleted stream's stop" });
    assert.equal(stopped.error.kind, "not_found", JSON.stringify(stopped));
    assert.equal(stopped.error.action, "reattach");
    assert.equal(stopped.sum, "3/" + stopped.sum.split("/")[1], "the replica keeps its last commit readable");
    // Deleted and created again while the page cannot reach the gateway: its next read, with
    // the old incarnation, meets the new stream.
    await stack.stopGateway();
    const node = again.replace(stack.gatewayBase, stack.node.base);
    assert.equal((await fetch(node, { method: "DELETE" })).status, 204);
    const put = await fetch(node, { method: "PUT", headers: { "content-type": "application/octet-stream" } });
    assert.ok([200, 201].includes(put.status), `recreate: ${put.status}`);
    await stack.startGateway();
    const recreated = await stack.waitReport((r) => r.url === again && r.event === "stopped", { from, what: "the recreated stream's stop" });
    assert.equal(recreated.error.kind, "stream_state", JSON.stringify(recreated));
    assert.equal(recreated.error.action, "reattach");
  } finally {
    page.close();
  }
});
