// Headless Chromium driven with puppeteer-core, for the tests that click through pages and read
// their state (examples.test.mjs, h2.test.mjs); stack.mjs's browse() starts a bare Chromium.
import puppeteer from "puppeteer-core";
import { tempDir } from "../../../js/test/helpers/kit.mjs";
import { chromium } from "./stack.mjs";

/** Launches Chromium with a profile and a temp dir of its own, `args` after the usual flags. */
export function launchChromium(args = []) {
  return puppeteer.launch({
    executablePath: chromium(),
    headless: true,
    userDataDir: tempDir("ursula-chromium-"),
    // Its shared-memory files go to the temp dir without /dev/shm: ours, removed at exit.
    env: { ...process.env, TMPDIR: tempDir("ursula-chromium-tmp-") },
    args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", ...args],
  });
}
