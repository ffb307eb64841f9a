// Sign in to the dashboard through the test OIDC provider in headless Debian chromium (playwright-core),
// rate one answer on the Review page, open Jury calibration, and report what the page and the wire carried.
// usage: node review_flow.js '{"url":..., "user":..., "markers":[...], "score":"4"}'
// Prints one JSON line: signed_in, pages (the sidebar's page names), review (rated|absent), item_before,
// item_after (the opaque ids shown), calibration (shown|absent), in_dom / in_network (marker -> seen),
// network_bytes, reloads (pages reloaded because they lost a script or stayed blank), dropped (the chunk whose first
// fetch `dropScript` reset), texts (a few visible strings, for failure messages).
const { chromium } = require("playwright-core");
const { SHOWN, dropFirstFetch, gridsDrawn, idle, retryLost, settle, why } = require("../leaderboard/streamlit_idle.js");

async function main() {
  const opts = JSON.parse(process.argv[2]);
  // a step's bound only stops a hang: a cold page (a fresh clone's first drill-down) on 2 cores at load 15 can
  // take minutes, where an idle machine takes seconds
  const timeout = opts.timeoutMs || 600000;
  const markers = opts.markers.map((m) => [m, Buffer.from(m, "utf8")]);
  const out = { signed_in: false, pages: [], review: "absent", item_before: null, item_after: null,
                calibration: "absent", in_dom: {}, in_network: {}, network_bytes: 0, reloads: 0, texts: [] };
  const reloaded = () => { out.reloads += 1; };
  for (const [m] of markers) { out.in_dom[m] = false; out.in_network[m] = false; }
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
           "--disable-component-update", "--disable-sync", "--no-first-run"],
  });
  const note = (buf) => {
    out.network_bytes += buf.length;
    for (const [m, b] of markers) if (buf.indexOf(b) >= 0) out.in_network[m] = true;
  };
  const seenDom = async (page) => {
    const dom = (await page.content()) + (await page.locator("body").innerText());
    for (const [m] of markers) if (dom.includes(m)) out.in_dom[m] = true;
  };
  let step = "start";
  let page = null;
  try {
    const context = await browser.newContext({ viewport: { width: 1400, height: 1000 } });
    page = await context.newPage();
    page.setDefaultTimeout(timeout);
    page.on("websocket", (ws) => {
      ws.on("framereceived", (f) => note(Buffer.isBuffer(f.payload) ? f.payload : Buffer.from(String(f.payload))));
    });
    page.on("response", async (r) => {
      try { note(await r.body()); } catch (e) { /* redirects and aborted bodies have none */ }
    });
    // the failure of streamlit/streamlit#10510, made to happen: the first fetch of a chunk fails
    if (opts.dropScript) await dropFirstFetch(page, opts.dropScript, out);
    const signInButton = page.getByRole("button", { name: "Sign in", exact: true });
    const sidebar = page.locator('[data-testid="stSidebar"]');
    const pageRadio = sidebar.locator('[data-testid="stRadio"]').filter({ hasText: "Page" });
    // a page that lost one of its scripts (streamlit_idle.js): load it anew, signed in, and do the step again
    const recover = async () => {
      await page.goto(opts.url, { waitUntil: "domcontentloaded", timeout });
      await settle(page, [pageRadio], timeout, reloaded);
    };
    step = "open";
    await page.goto(opts.url, { waitUntil: "domcontentloaded", timeout });
    await settle(page, [signInButton], timeout, reloaded); // a page left blank is reloaded, as a user would
    step = "sign-in";
    await signInButton.click();
    await page.locator("#username").waitFor({ timeout });
    await page.fill("#username", opts.user);
    await Promise.all([page.waitForURL((u) => u.toString().startsWith(opts.url), { timeout }), page.click("#login")]);
    // the first signed-in page fetches the code of widgets the sign-in screen had none of (the sidebar's radio)
    await settle(page, [pageRadio], timeout, reloaded);
    out.signed_in = true;
    await idle(page, timeout); // the first page has finished drawing
    out.pages = (await pageRadio.locator("label").allInnerTexts()).map((t) => t.trim()).filter((t) => t && t !== "Page");
    if (out.pages[0] === "Leaderboard") { // a viewer's first page: let its table arrive before looking
      step = "leaderboard";
      await retryLost(page, async () => {
        await page.locator('[data-testid="stDataFrame"]').first().waitFor({ timeout });
        await idle(page, timeout);
        await gridsDrawn(page, timeout);
      }, recover, reloaded);
    }
    await seenDom(page);
    if (out.pages.includes("Review")) {
      step = "review";
      const item = /Item \d+ of \d+ · R-[0-9A-F]{12}/;
      await retryLost(page, async (live) => { // nothing is stored until "Save ratings": safe to do again
        if (!(await page.getByText("Answer to rate").isVisible())) {
          await pageRadio.getByText("Review", { exact: true }).click();
        }
        const progress = page.getByText(/Item 1 of \d+ · R-[0-9A-F]{12}/).first();
        await progress.waitFor({ timeout });
        live();
        out.item_before = (await progress.innerText()).match(/R-[0-9A-F]{12}/)[0];
        await seenDom(page);
        const criterion = page.locator('[data-testid="stMain"] [data-testid="stRadio"]').first();
        live();
        await criterion.getByText(opts.score, { exact: true }).click();
      }, recover, reloaded);
      await page.getByRole("button", { name: "Save ratings" }).click();
      // after the save, a page loaded anew samples again without the rated answer: any item but the rated one
      const next = page.getByText(item).filter({ hasNotText: out.item_before }).first();
      await retryLost(page, () => next.waitFor({ timeout }), async () => {
        await recover();
        if (!(await page.getByText("Answer to rate").isVisible())) {
          await pageRadio.getByText("Review", { exact: true }).click();
        }
      }, reloaded);
      out.item_after = (await next.innerText()).match(/R-[0-9A-F]{12}/)[0];
      out.review = "rated";
      await seenDom(page);
    }
    if (out.pages.includes("Jury calibration")) {
      step = "calibration";
      await retryLost(page, async () => {
        await pageRadio.getByText("Jury calibration", { exact: true }).click();
        await page.getByText("Agreement per criterion").waitFor({ timeout });
        await page.locator('[data-testid="stDataFrame"]').first().waitFor({ timeout });
        await idle(page, timeout);
        await gridsDrawn(page, timeout);
      }, recover, reloaded);
      out.calibration = "shown";
      await seenDom(page);
    }
    out.texts = (await page.locator("h1, [data-testid='stAlert']").allInnerTexts()).slice(0, 6);
  } catch (err) {
    const texts = page ? await page.locator(SHOWN).allInnerTexts().catch(() => []) : [];
    if (page && opts.failShot) await page.screenshot({ path: opts.failShot, fullPage: true }).catch(() => {});
    throw new Error(`${step}: ${why(err)} | page: ${texts.join(" / ")}`);
  } finally {
    await browser.close();
  }
  console.log(JSON.stringify(out));
}

main().catch((err) => { console.error(String(err && err.message || err).split("\n")[0]); process.exit(1); });
