// Open the leaderboard, switch to the Trends page, wait for its chart and tables, and report what a viewer's
// browser shows: the visible text, the number of charts and tables, the chart's drawn marks, CSP violations (after the switch to Trends).
// usage: node browser_trends.js URL SCREENSHOT.png [TIMEOUT_MS]   (NODE_PATH must reach playwright-core)
const { chromium } = require("playwright-core");
const { gridsDrawn, idle, retryLost, settle } = require("./streamlit_idle.js");

async function main() {
  const [url, shot, timeoutArg] = process.argv.slice(2);
  const timeout = Number(timeoutArg || 60000);
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
           "--disable-component-update", "--disable-sync", "--no-first-run"],
  });
  const out = { step: "start", violations: 0 };
  try {
    const page = await browser.newPage({ viewport: { width: 1400, height: 1200 } });
    page.on("console", (msg) => { if (/Content Security Policy/i.test(msg.text())) { out.violations += 1; out.csp = (out.csp || []).concat([out.step + ": " + msg.text().slice(0, 120)]); } });
    out.step = "open";
    const open = async () => {
      await page.goto(url, { waitUntil: "domcontentloaded", timeout });
      await settle(page, [page.locator('[data-testid="stDataFrame"]').first()], timeout); // a blank page reloaded
    };
    await open();
    out.step = "trends page";
    out.violations_on_open = out.violations; // counted apart: this page's own violations are what we check
    // the chart's code is fetched when the Trends page first draws one: a page that lost it is loaded anew
    await retryLost(page, async () => {
      out.violations = 0;
      await page.getByText("Trends", { exact: true }).first().click();
      await page.getByText("Trends across releases", { exact: true }).first().waitFor({ timeout });
      await page.locator('[data-testid="stVegaLiteChart"]').first().waitFor({ state: "visible", timeout });
      await page.locator('[data-testid="stDataFrame"]').nth(1).waitFor({ state: "visible", timeout });
      await idle(page, timeout); // the Trends run has ended: every chart and table it draws is there ...
      await gridsDrawn(page, timeout); // ... and each table has painted its cells
    }, open, () => { out.reloads = (out.reloads || 0) + 1; });
    out.step = "read";
    out.text = await page.locator("body").innerText();
    out.charts = await page.locator('[data-testid="stVegaLiteChart"]').count();
    out.tables = await page.locator('[data-testid="stDataFrame"]').count();
    // data from the store must stay text: no element made from a model name's markup
    out.injected = await page.evaluate(() => document.querySelectorAll('img[src="x"]').length
      + [...document.querySelectorAll("strong, b")].filter((e) => e.textContent.trim() === "bold").length);
    out.chart_box = await page.locator('[data-testid="stVegaLiteChart"]').first().boundingBox();
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
