// Open the leaderboard, then the Benchmark page with every instance expander opened, and report what a
// viewer's browser did: the visible text, elements pointing at the exfiltration listener, CSP violations.
// usage: node browser_hostile.js URL LISTENER_ORIGIN [TIMEOUT_MS]   (NODE_PATH must reach playwright-core)
const { chromium } = require("playwright-core");

async function main() {
  const [url, listener, timeoutArg] = process.argv.slice(2);
  const timeout = Number(timeoutArg || 60000);
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
           "--disable-component-update", "--disable-sync", "--no-first-run"],
  });
  const out = { texts: [], pointing: 0, violations: 0, expanders: 0, step: "start" };
  try {
    const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
    page.on("console", (msg) => { if (/Content Security Policy/i.test(msg.text())) out.violations += 1; });
    out.step = "open";
    await page.goto(url, { waitUntil: "domcontentloaded", timeout });
    await page.locator('[data-testid="stDataFrame"]').first().waitFor({ state: "visible", timeout });
    await page.waitForTimeout(1500);
    out.texts.push(await page.locator("body").innerText());
    out.step = "benchmark page";
    await page.getByText("Benchmark", { exact: true }).first().click();
    await page.locator('[data-testid="stExpander"]').first().waitFor({ state: "visible", timeout });
    await page.waitForTimeout(1000);
    out.step = "expanders";
    const summaries = page.locator('[data-testid="stExpander"] summary');
    out.expanders = await summaries.count();
    for (let i = 0; i < out.expanders; i++) await summaries.nth(i).click();
    await page.waitForTimeout(2000);
    out.texts.push(await page.locator("body").innerText());
    out.pointing = await page.evaluate((origin) => {
      const attrs = ["src", "href", "srcset", "poster", "data", "action"];
      const found = [];
      for (const el of document.querySelectorAll("*")) {
        for (const a of attrs) {
          const v = el.getAttribute(a);
          if (v && v.includes(origin)) found.push(el.outerHTML.slice(0, 300));
        }
        const bg = getComputedStyle(el).backgroundImage;
        if (bg && bg.includes(origin)) found.push("background: " + el.outerHTML.slice(0, 200));
      }
      return found;
    }, listener);
    console.log(JSON.stringify(out));
  } catch (err) {
    const text = await browser.contexts()[0]?.pages()[0]?.locator("body").innerText().catch(() => "") || "";
    throw new Error(`${out.step}: ${String(err && err.message || err).split("\n")[0]} | page: ${text.slice(0, 600)}`);
  } finally {
    await browser.close();
  }
}

main().catch((err) => { console.error(String(err && err.message || err).split("\n")[0]); process.exit(1); });
