// An event-loop watcher for the child processes that time an open (js/test/async.test.mjs and
// js/bench/replica-bench.mjs import it): an interval timer counts its ticks and the longest gap
// between two, so an open that blocks the event loop shows as no ticks and one long gap.

/** Starts an interval timer of `everyMs`; read `ticks` while it runs, `stop()` for the gap. */
export function watchLoop(everyMs) {
  let ticks = 0;
  let maxGap = 0;
  let last = performance.now();
  const timer = setInterval(() => {
    const now = performance.now();
    maxGap = Math.max(maxGap, now - last);
    last = now;
    ticks += 1;
  }, everyMs);
  return {
    get ticks() {
      return ticks;
    },
    /** Restarts the gap clock as the timed call starts; returns that time. */
    start() {
      last = performance.now();
      return last;
    },
    /** Stops the timer and resolves with the longest gap. */
    async stop() {
      // The first tick after a blocking call measures the stall it caused.
      await new Promise((r) => setTimeout(r, 20));
      clearInterval(timer);
      return maxGap;
    },
  };
}
