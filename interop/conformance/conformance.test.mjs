// Wrapper that makes vitest collect the Durable Streams server conformance suite.
//
// The package's own CLI (`npx server-conformance-tests --run URL`) finds no test file when the
// package is installed from npm (vitest never collects files under node_modules), so we call the
// exported function from a file vitest does collect. This mirrors the package's
// src/test-runner.ts plus the two options the CLI cannot pass.
//
// env: CONFORMANCE_TEST_URL (required, e.g. http://127.0.0.1:4437)
//      CONFORMANCE_SUBSCRIPTIONS=1  enable the "Reserved subscription APIs" group (webhooks)
//      CONFORMANCE_LONGPOLL_MS=N    per-test timeout hint for three long-poll tests (default 20000)
import { runConformanceTests } from "@durable-streams/server-conformance-tests"

const baseUrl = process.env.CONFORMANCE_TEST_URL
if (!baseUrl) throw new Error("set CONFORMANCE_TEST_URL (e.g. http://127.0.0.1:4437)")

runConformanceTests({
  baseUrl,
  subscriptions: process.env.CONFORMANCE_SUBSCRIPTIONS === "1",
  ...(process.env.CONFORMANCE_LONGPOLL_MS
    ? { longPollTimeoutMs: Number(process.env.CONFORMANCE_LONGPOLL_MS) }
    : {}),
})
