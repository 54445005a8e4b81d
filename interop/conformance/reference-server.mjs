// Starts the Durable Streams reference server (@durable-streams/server) on loopback, as the
// baseline for conformance counts and benchmarks.
//
// env: PORT (default 4437), DATA_DIR (omit = in-memory; set = file-backed log + LMDB),
//      LONG_POLL_MS (server long-poll timeout; keep it well under 5 s for the suite — upstream
//      uses 500), WEBHOOKS=1 (needed for the suite's subscription group).
// Prints "listening <url>" once ready; stops cleanly on SIGTERM/SIGINT.
import { DurableStreamTestServer } from "@durable-streams/server"

const opts = { port: Number(process.env.PORT ?? 4437), host: "127.0.0.1" }
if (process.env.DATA_DIR) opts.dataDir = process.env.DATA_DIR
if (process.env.LONG_POLL_MS) opts.longPollTimeout = Number(process.env.LONG_POLL_MS)
if (process.env.WEBHOOKS === "1") opts.webhooks = true

const server = new DurableStreamTestServer(opts)
console.log(`listening ${await server.start()}`)

const stop = async () => {
  await server.stop()
  process.exit(0)
}
process.on("SIGTERM", stop)
process.on("SIGINT", stop)
