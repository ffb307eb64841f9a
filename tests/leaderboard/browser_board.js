// Open the leaderboard and report what a reader sees: the page's visible text, the text of the grids' cells
// (Streamlit's data grid draws on a canvas; glide-data-grid keeps an accessible table of the drawn cells: a
// missing number is drawn "None" there and has the text ""), the charts, then a full-page screenshot.
// usage: node browser_board.js URL SCREENSHOT.png [TIMEOUT_MS]   (NODE_PATH must reach playwright-core)
const { chromium } = require("playwright-core");
const { gridsDrawn, idle, settle } = require("./streamlit_idle.js");

const grid = '[data-testid="stDataFrame"]';
const chart = '[data-testid="stVegaLiteChart"]';

async function read(page, timeout, out) {
  await page.locator(grid).first().waitFor({ state: "visible", timeout });
  out.step = "charts";
  await page.locator(chart).first().waitFor({ state: "visible", timeout });
  await idle(page, timeout); // the page's run has ended: every chart and grid it draws is there ...
  await gridsDrawn(page, timeout); // ... and each grid has painted its cells
  out.step = "read";
  out.text = await page.locator('[data-testid="stMain"], body').first().innerText();
  const board = page.locator(grid).first();
  out.cells = await board.locator('[role="gridcell"], td, th').allInnerTexts();
  out.headers = await board.locator('[role="columnheader"]').allInnerTexts();
  out.all_cells = await page.locator(`${grid} [role="gridcell"], ${grid} td`).allInnerTexts();
  out.charts = await page.locator(chart).count();
  out.chart_heights = await page.locator(chart).evaluateAll((els) => els.map((e) => e.getBoundingClientRect().height));
}

(async () => {
  const [url, shot, timeoutArg] = process.argv.slice(2);
  const timeout = Number(timeoutArg || 60000);
  const out = { step: "open" };
  const browser = await chromium.launch({ executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run"] });
  const page = await browser.newPage({ viewport: { width: 2600, height: 1400 } }); // every column drawn
  try {
    await page.goto(url, { waitUntil: "domcontentloaded", timeout });
    await settle(page, [page.locator(grid).first()], timeout); // a page left blank is reloaded
    await read(page, timeout, out);
    await page.screenshot({ path: shot, fullPage: true });
    console.log(JSON.stringify(out));
  } catch (err) {
    const seen = (await page.locator("body").innerText().catch(() => "")).slice(0, 600);
    console.error(`${out.step}: ${String((err && err.message) || err).split("\n")[0]} | page: ${seen}`);
    process.exitCode = 1;
  } finally {
    await browser.close();
  }
})();
