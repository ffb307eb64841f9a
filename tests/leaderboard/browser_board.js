// Open the leaderboard and report what a reader sees: the page's visible text, the text of the leaderboard
// grid's cells (Streamlit's data grid draws on a canvas; glide-data-grid keeps an accessible table of the
// drawn cells), the number of charts and the section headings, then save a full-page screenshot.
// usage: node browser_board.js URL SCREENSHOT.png [TIMEOUT_MS]   (NODE_PATH must reach playwright-core)
const { chromium } = require("playwright-core");

async function main() {
  const [url, shot, timeoutArg] = process.argv.slice(2);
  const timeout = Number(timeoutArg || 60000);
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
           "--disable-component-update", "--disable-sync", "--no-first-run"],
  });
  const out = { step: "open" };
  try {
    const page = await browser.newPage({ viewport: { width: 2600, height: 1400 } });
    await page.goto(url, { waitUntil: "domcontentloaded", timeout });
    await page.locator('[data-testid="stDataFrame"]').first().waitFor({ state: "visible", timeout });
    out.step = "charts";
    await page.locator('[data-testid="stVegaLiteChart"]').first().waitFor({ state: "visible", timeout });
    await page.waitForTimeout(2000); // let the charts and the canvas grids paint
    out.step = "read";
    out.text = await page.locator('[data-testid="stMain"], section.main, body').first().innerText();
    out.cells = await page.locator('[data-testid="stDataFrame"]').first().locator('[role="gridcell"], td, th')
      .allInnerTexts();
    // every grid on the page (the benchmark matrix too), all columns drawn in the wide viewport
    out.all_cells = await page.locator('[data-testid="stDataFrame"] [role="gridcell"], [data-testid="stDataFrame"] td')
      .allInnerTexts();
    out.headers = await page.locator('[data-testid="stDataFrame"]').first().locator('[role="columnheader"]')
      .allInnerTexts();
    out.charts = await page.locator('[data-testid="stVegaLiteChart"]').count();
    out.chart_heights = [];
    for (const box of await page.locator('[data-testid="stVegaLiteChart"]').all()) {
      out.chart_heights.push(((await box.boundingBox()) || { height: 0 }).height);
    }
    await page.screenshot({ path: shot, fullPage: true });
    console.log(JSON.stringify(out));
  } catch (err) {
    const text = await browser.contexts()[0]?.pages()[0]?.locator("body").innerText().catch(() => "") || "";
    throw new Error(`${out.step}: ${String(err && err.message || err).split("\n")[0]} | page: ${text.slice(0, 600)}`);
  } finally {
    await browser.close();
  }
}

main().catch((err) => { console.error(String(err && err.message || err).split("\n")[0]); process.exit(1); });
