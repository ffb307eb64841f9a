// Sign in to the dashboard through the test OIDC provider in headless Debian chromium (playwright-core),
// open the benchmark page's drill-down, and report what the page and the wire carried.
// usage: node signin_flow.js '{"url":..., "markers":[...], "user":..., "forgeCookie":bool, "expiresWithinS":n,
//                               "signOutReplay":bool}'
// Prints one JSON line: login_page, signed_in, drilldown (refused|shown|none), in_dom and in_network
// (marker -> seen), network_bytes, expired_screen, expired_at_sign_in (the first page after sign-in already
// said the token had expired), reloads (blank pages reloaded), texts (a few visible strings, for failure messages); with
// signOutReplay: the session's cookies copied, replayed in a new context before and after "Sign out" is
// clicked (replay_before, replay_after: signed_in, login_page, texts, in_network), signed_out_screen.
const { chromium } = require("playwright-core");
const { SHOWN, dropFirstFetch, idle, retryLost, settle, watch, why } = require("../leaderboard/streamlit_idle.js");

async function main() {
  const opts = JSON.parse(process.argv[2]);
  // a step's bound only stops a hang: a cold page (a fresh clone's first drill-down) on 2 cores at load 15 can
  // take minutes, where an idle machine takes seconds
  const timeout = opts.timeoutMs || 600000;
  const markers = opts.markers.map((m) => [m, Buffer.from(m, "utf8")]);
  const out = { login_page: false, signed_in: false, drilldown: "none", in_dom: {}, in_network: {},
                network_bytes: 0, expired_screen: null, texts: [], reloads: 0 };
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
  let step = "start";
  let signedAt = null;
  let page = null;
  const t0 = Date.now();
  const events = []; // what the page did, for a failure message (never a frame's payload)
  const ev = (what) => { events.push(`${((Date.now() - t0) / 1000).toFixed(1)}s ${step} ${what}`.slice(0, 240)); };
  const reloaded = (what) => { out.reloads += 1; ev(what); };
  try {
    const context = await browser.newContext({ viewport: { width: 1400, height: 1000 } });
    if (process.env.MEDHELM_BROWSER_TRACE) await context.tracing.start({ screenshots: true, snapshots: true });
    if (opts.forgeCookie) {
      const host = new URL(opts.url).hostname;
      await context.addCookies([{ name: "_streamlit_user", domain: host, path: "/",
        value: "2|1:0|10:1700000000|15:_streamlit_user|80:eyJlbWFpbCI6ImFuYWx5c3RAaG9zcGl0YWwuZXhhbXBsZSIsImlzX2xvZ2dlZF9pbiI6dHJ1ZX0=|forged" }]);
    }
    page = await context.newPage();
    page.setDefaultTimeout(timeout); // clicks too, not only waits: a busy CI machine renders slowly
    watch(page, ev, { everyConsole: true });
    // and what only this flow needs: every frame and body scanned for the markers, the app's own requests
    page.on("websocket", (ws) => {
      ws.on("framereceived", (f) => note(Buffer.isBuffer(f.payload) ? f.payload : Buffer.from(String(f.payload))));
    });
    page.on("response", async (r) => {
      if (r.status() < 300 && !r.url().includes("/static/")) ev(`${r.status()} ${r.url()}`);
      try { note(await r.body()); } catch (e) { /* redirects and aborted bodies have none */ }
    });
    page.on("framenavigated", (f) => { if (f === page.mainFrame()) ev(`navigated ${f.url()}`); });
    // the failure of streamlit/streamlit#10510, made to happen: the first fetch of a chunk fails
    if (opts.dropScript) await dropFirstFetch(page, opts.dropScript, out);
    const signInButton = page.getByRole("button", { name: "Sign in", exact: true });
    // the copied cookies in a fresh browser context: {signed_in, screen text, markers seen on its wire}
    const replay = async (cookies) => {
      const ctx = await browser.newContext({ viewport: { width: 1400, height: 1000 } });
      try {
        await ctx.addCookies(cookies);
        const p = await ctx.newPage();
        p.setDefaultTimeout(timeout);
        const seen = {};
        for (const [m] of markers) seen[m] = false;
        const scan = (buf) => { for (const [m, b] of markers) if (buf.indexOf(b) >= 0) seen[m] = true; };
        p.on("websocket", (ws) => ws.on("framereceived",
          (f) => scan(Buffer.isBuffer(f.payload) ? f.payload : Buffer.from(String(f.payload)))));
        await p.goto(opts.url, { waitUntil: "domcontentloaded", timeout });
        const t = p.locator('[data-testid="stDataFrame"]').first();
        const b = p.getByRole("button", { name: "Sign in", exact: true });
        try {
          await settle(p, [b, t], timeout, () => {});
        } catch (err) {
          if (opts.failShot) await p.screenshot({ path: opts.failShot.replace(".png", "-replay.png"), fullPage: true });
          const shown = await p.locator("h1, h2, h3, [data-testid='stAlert']").allInnerTexts().catch(() => []);
          throw new Error(`replayed page: ${shown.join(" / ")} | ${String(err && err.message || err).split("\n")[0]}`);
        }
        await idle(p, timeout); // a wrongly accepted session has drawn its data by now
        return { signed_in: await t.isVisible(), login_page: await b.isVisible(),
                 texts: (await p.locator("[data-testid='stAlert']").allInnerTexts()).slice(0, 4), in_network: seen };
      } finally {
        await ctx.close();
      }
    };
    const table = page.locator('[data-testid="stDataFrame"]').first();
    step = "open";
    await page.goto(opts.url, { waitUntil: "domcontentloaded", timeout });
    await settle(page, [signInButton, table], timeout, reloaded);
    out.login_page = await signInButton.isVisible();
    if (opts.user) {
      step = "sign-in";
      await signInButton.click();
      await page.locator("#username").waitFor({ timeout });
      await page.fill("#username", opts.user);
      await Promise.all([page.waitForURL((u) => u.toString().startsWith(opts.url), { timeout }),
                         page.click("#login")]);
      await settle(page, [signInButton, table, page.getByText("has no MedHELM role")], timeout, reloaded);
      out.signed_in = await table.isVisible();
      signedAt = Date.now();  // the ID token was issued before this moment
      // a short-lived token that expired before its first page (a starved machine signs in slowly): the
      // caller tries again with a longer one
      out.expired_at_sign_in = (await page.getByText("Your sign-in has expired").count()) > 0;
    } else {
      await idle(page, timeout); // a wrongly accepted session has drawn its data by now
      out.signed_in = await table.isVisible();
    }
    // with expiresWithinS the drill-down is left out: the token may expire in the middle of it
    if (out.signed_in && !opts.expiresWithinS) {
      step = "drill-down";
      const drill = async (live) => {
        await page.locator('[data-testid="stSidebar"]').getByText("Benchmark", { exact: true }).click();
        const hidden = page.getByText("Instance text is hidden", { exact: false }).first();
        const expander = page.locator('[data-testid="stExpander"]').first();
        await Promise.race([hidden.waitFor({ timeout }), expander.waitFor({ timeout })]);
        live(); // the click below toggles: an attempt given up on must not make it too
        if (await expander.isVisible()) {
          out.drilldown = "shown";
          await expander.locator("summary").first().click();
          await expander.locator('[data-testid="stExpanderDetails"]').first().waitFor({ state: "visible", timeout });
        } else {
          out.drilldown = "refused";
        }
        await idle(page, timeout); // the page's run has ended: anything it sent after the refusal has landed
      };
      await retryLost(page, drill, async () => { // a script the page lost (see streamlit_idle.js): reload
        await page.goto(opts.url, { waitUntil: "domcontentloaded", timeout }); // the leaderboard, signed in
        await settle(page, [table], timeout, reloaded);
      }, reloaded);
    }
    if (opts.signOutReplay && out.signed_in) {
      // the session's cookies as a thief (a proxy log, another tab) would copy them; first proven usable
      step = "copy-cookie";
      const copied = await context.cookies();
      out.copied_cookies = copied.map((c) => c.name);
      out.replay_before = await replay(copied);
      step = "sign-out";
      await page.locator('[data-testid="stSidebar"]').getByRole("button", { name: "Sign out", exact: true }).click();
      await signInButton.waitFor({ timeout });
      out.signed_out_screen = (await signInButton.isVisible()) && !(await table.isVisible());
      step = "replay";
      out.replay_after = await replay(copied);
    }
    if (opts.expiresWithinS && out.signed_in) {
      // The token expires at most expiresWithinS after it was issued, so after signedAt + expiresWithinS it
      // has (250 ms of slack for the two clocks' reads): wait only until then.
      step = "expiry";
      await page.waitForTimeout(Math.max(0, signedAt + opts.expiresWithinS * 1000 + 250 - Date.now()));
      await page.reload({ waitUntil: "domcontentloaded", timeout });
      await settle(page, [signInButton, table], timeout, reloaded);
      out.expired_screen = (await page.getByText("Your sign-in has expired").count()) > 0 && !(await table.isVisible());
    }
    const dom = (await page.content()) + (await page.locator("body").innerText());
    for (const [m] of markers) out.in_dom[m] = dom.includes(m);
    out.texts = (await page.locator("h1, [data-testid='stAlert']").allInnerTexts()).slice(0, 6);
  } catch (err) {
    const texts = page ? await page.locator(SHOWN).allInnerTexts().catch(() => []) : [];
    if (page && opts.failShot) await page.screenshot({ path: opts.failShot, fullPage: true }).catch(() => {});
    if (process.env.MEDHELM_BROWSER_TRACE && page) {
      const stem = `${process.env.MEDHELM_BROWSER_TRACE}/signin-${opts.user || "anon"}-${Date.now()}`;
      await page.context().tracing.stop({ path: `${stem}.zip` }).catch(() => {});
      require("fs").writeFileSync(`${stem}.log`, events.join("\n") + `\n${String(err && err.stack || err)}\n`);
    }
    console.error(events.join("\n"));
    throw new Error(`${step}: ${why(err)} | page: ${texts.join(" / ")}`);
  } finally {
    await browser.close();
  }
  console.log(JSON.stringify(out));
}

main().catch((err) => { console.error(String(err && err.message || err).split("\n")[0]); process.exit(1); });
