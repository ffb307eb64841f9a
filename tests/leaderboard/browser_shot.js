// Open the leaderboard in headless Debian chromium (playwright-core, no browser download), wait until the
// leaderboard table is drawn, save a screenshot and print timings as JSON.
// usage: node browser_shot.js URL SCREENSHOT.png [TIMEOUT_MS]   (NODE_PATH must reach playwright-core)
const { chromium } = require("playwright-core");
const { gridsDrawn } = require("./streamlit_idle.js");

async function main() {
  const [url, shot, timeoutArg] = process.argv.slice(2);
  const timeout = Number(timeoutArg || 60000);
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
           "--disable-component-update", "--disable-sync", "--no-first-run"],
  });
  try {
    const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
    const started = Date.now();
    await page.goto(url, { waitUntil: "domcontentloaded", timeout });
    await page.getByText("MedHELM leaderboard", { exact: true }).first().waitFor({ timeout });
    const titleS = (Date.now() - started) / 1000;
    // the leaderboard table: Streamlit's data grid with its first column header drawn
    await page.locator('[data-testid="stDataFrame"]').first().waitFor({ state: "visible", timeout });
    const tableS = (Date.now() - started) / 1000;
    await page.locator('[data-testid="stVegaLiteChart"]').first().waitFor({ state: "visible", timeout });
    await gridsDrawn(page, timeout); // the canvas grids have painted their cells before the screenshot
    await page.screenshot({ path: shot, fullPage: true });
    const totalS = (Date.now() - started) / 1000;
    // a revisit: the same browser opens the leaderboard again, Streamlit's scripts now in its HTTP cache
    const again = Date.now();
    await page.reload({ waitUntil: "domcontentloaded", timeout });
    await page.locator('[data-testid="stDataFrame"]').first().waitFor({ state: "visible", timeout });
    const revisitS = (Date.now() - again) / 1000;
    console.log(JSON.stringify({ title_s: titleS, leaderboard_s: tableS, total_s: totalS, revisit_s: revisitS }));
  } finally {
    await browser.close();
  }
}

main().catch((err) => { console.error(String(err && err.message || err).split("\n")[0]); process.exit(1); });
