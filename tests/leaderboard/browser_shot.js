// Open the leaderboard in headless Debian chromium (playwright-core, no browser download), wait until the
// leaderboard table is drawn, save a screenshot and print timings as JSON (with `reloads`: pages reloaded because
// they stayed blank or ended their script run without the table, as `settle` in streamlit_idle.js does; a timing
// then includes the reload, as a user's wait would). On failure, stderr ends with what the page did (failed
// requests, console errors, the websocket), the way a failure can be told apart: starved, dropped, or refused.
// usage: node browser_shot.js URL SCREENSHOT.png [TIMEOUT_MS]   (NODE_PATH must reach playwright-core)
const { chromium } = require("playwright-core");
const { gridsDrawn, settle, watch } = require("./streamlit_idle.js");

async function main() {
  const [url, shot, timeoutArg] = process.argv.slice(2);
  const timeout = Number(timeoutArg || 60000);
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
           "--disable-component-update", "--disable-sync", "--no-first-run"],
  });
  const t0 = Date.now();
  const events = []; // what the page did (URLs, status, error texts: the demo store's leaderboard, no payloads)
  const ev = (what) => { events.push(`${((Date.now() - t0) / 1000).toFixed(1)}s ${what}`.slice(0, 200)); };
  let reloads = 0;
  const reloaded = (what) => { reloads += 1; ev(what); };
  try {
    const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
    watch(page, ev);
    const started = Date.now();
    await page.goto(url, { waitUntil: "domcontentloaded", timeout });
    const grid = page.locator('[data-testid="stDataFrame"]').first();
    const title = page.getByText("MedHELM leaderboard", { exact: true }).first().waitFor({ timeout })
      .then(() => (Date.now() - started) / 1000, () => null);
    // the leaderboard table: Streamlit's data grid (a page left blank, or ended without it, is reloaded)
    await settle(page, [grid], timeout, reloaded);
    await grid.waitFor({ state: "visible", timeout });
    const tableS = (Date.now() - started) / 1000;
    const titleS = await title;
    await page.locator('[data-testid="stVegaLiteChart"]').first().waitFor({ state: "visible", timeout });
    await gridsDrawn(page, timeout); // the canvas grids have painted their cells before the screenshot
    await page.screenshot({ path: shot, fullPage: true });
    const totalS = (Date.now() - started) / 1000;
    // a revisit: the same browser opens the leaderboard again, Streamlit's scripts now in its HTTP cache
    const again = Date.now();
    await page.reload({ waitUntil: "domcontentloaded", timeout });
    await settle(page, [grid], timeout, reloaded);
    await grid.waitFor({ state: "visible", timeout });
    const revisitS = (Date.now() - again) / 1000;
    console.log(JSON.stringify({ title_s: titleS, leaderboard_s: tableS, total_s: totalS, revisit_s: revisitS,
                                 reloads }));
  } catch (err) {
    throw new Error(`${String(err && err.message || err).split("\n")[0]}\n${events.slice(-12).join("\n")}`);
  } finally {
    await browser.close();
  }
}

main().catch((err) => { console.error(String(err && err.message || err)); process.exit(1); });
