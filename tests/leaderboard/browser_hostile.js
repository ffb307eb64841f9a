// Open the leaderboard, then the Benchmark page for every benchmark (every instance expander opened), then the
// Compare page, and report what a viewer's browser did: the visible text, elements pointing at the
// exfiltration listener, elements built from data markup (`data-hostile`), inline event handlers, script
// effects (window.__pwned, dialogs), CSP violations and every request that left the app's own origin.
// No fixed sleeps: every step waits for the app's script run it started to finish (Streamlit's root element
// carries the run state in data-test-script-state; an init script counts the runs that reached notRunning),
// and for opened expanders to stop animating.
// usage: node browser_hostile.js URL LISTENER_ORIGIN [TIMEOUT_MS]   (NODE_PATH must reach playwright-core)
const { chromium } = require("playwright-core");
const { idle, retryLost, settle, why } = require("./streamlit_idle.js");

async function main() {
  const [url, listener, timeoutArg] = process.argv.slice(2);
  const timeout = Number(timeoutArg || 60000);
  const origin = new URL(url).origin;
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
           "--disable-component-update", "--disable-sync", "--no-first-run"],
  });
  const out = { texts: [], pointing: [], injected: [], handlers: [], pwned: false, dialogs: 0, foreign: [],
                violations: 0, violationTexts: [], expanders: 0, benchmarks: 0, pages: [], step: "start" };
  try {
    const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
    page.on("console", (msg) => {
      if (!/Content Security Policy/i.test(msg.text())) return;
      out.violations += 1;
      out.violationTexts.push(msg.text().slice(0, 300));
    });
    await page.addInitScript(() => {  // counts finished script runs: running (or rerunRequested) -> notRunning
      window.__runsDone = 0;
      let last = null;
      const look = () => {
        const app = document.querySelector('[data-testid="stApp"]');
        const state = app ? app.getAttribute("data-test-script-state") : null;
        if (state === last) return;
        if (state === "notRunning" && last !== null) window.__runsDone += 1;
        last = state;
      };
      new MutationObserver(look).observe(document, { subtree: true, childList: true, attributes: true,
                                                     attributeFilter: ["data-test-script-state"] });
    });
    page.on("dialog", async (d) => { out.dialogs += 1; await d.dismiss().catch(() => {}); });
    page.on("request", (req) => {
      const u = req.url();
      if (!u.startsWith("data:") && !u.startsWith("blob:") && new URL(u).origin !== origin) out.foreign.push(u);
    });

    async function inspect(where) {
      live();
      out.texts.push(await page.locator("body").innerText());
      // what a selectbox shows is partly its input's value or aria-label, not the body's text
      out.texts.push(...await page.evaluate(() => [...document.querySelectorAll("input, [aria-label]")].map(
        (el) => `${el.value || ""} ${el.getAttribute("aria-label") || ""}`.trim()).filter(Boolean)));
      const found = await page.evaluate((target) => {
        const attrs = ["src", "href", "srcset", "poster", "data", "action", "formaction", "xlink:href"];
        const r = { pointing: [], injected: [], handlers: [], pwned: Boolean(window.__pwned) };
        for (const el of document.querySelectorAll("*")) {
          for (const a of attrs) {
            const v = el.getAttribute(a);
            if (v && (v.includes(target) || /^\s*javascript:/i.test(v))) r.pointing.push(el.outerHTML.slice(0, 300));
          }
          for (const a of el.getAttributeNames()) {
            if (/^on/i.test(a)) r.handlers.push(el.outerHTML.slice(0, 200));
          }
          if (el.hasAttribute("data-hostile")) r.injected.push(el.outerHTML.slice(0, 200));
          const bg = getComputedStyle(el).backgroundImage;
          if (bg && bg.includes(target)) r.pointing.push("background: " + el.outerHTML.slice(0, 200));
        }
        return r;
      }, listener);
      for (const k of ["pointing", "injected", "handlers"]) out[k].push(...found[k].map((h) => `${where}: ${h}`));
      out.pwned = out.pwned || found.pwned;
      out.pages.push(where);
    }

    let live = () => {};
    const runsDone = () => page.evaluate(() => window.__runsDone);
    async function runs(action) {  // do what starts a script run; return when that run has finished
      const before = (await runsDone()) || 0;  // 0 on the blank page before the app's first load
      await action();
      await page.waitForFunction((n) => window.__runsDone > n && document.querySelector(
        '[data-testid="stApp"]')?.getAttribute("data-test-script-state") === "notRunning", before, { timeout });
    }

    async function choose(label, index) {  // a Streamlit selectbox by its label; the index-th option
      const box = page.locator('[data-testid="stSelectbox"]').filter({
        has: page.locator('[data-testid="stWidgetLabel"]', { hasText: new RegExp(`^${label}$`) }) }).first();
      const input = box.locator("input");
      const current = (await input.inputValue()).trim();  // the option shown now (choosing it starts no run)
      const options = page.locator('[role="option"]');
      live();
      for (let attempt = 0; attempt < 5 && !(await options.first().isVisible()); attempt++) {
        await (attempt % 2 ? input.press("ArrowDown") : input.click());  // a focused box may need a key to open
        await options.first().waitFor({ state: "visible", timeout: 3000 }).catch(() => {});
      }
      await options.first().waitFor({ state: "visible", timeout });
      live();
      const n = await options.count();
      const option = options.nth(Math.min(index, n - 1));
      const chosen = index < n && (await option.getAttribute("aria-selected")) !== "true"
        && (await option.innerText()).trim() !== current;
      out.step = `${out.step.split(" / ")[0]} / ${label} ${index} of ${n}` + (chosen ? " (waiting for its run)" : "");
      if (chosen) await runs(() => option.click());
      else await page.keyboard.press("Escape");  // closing the list (or keeping the choice) starts no run
      return n;
    }

    // every expander open and still (one left open by an earlier page stays open). A click can be lost to the
    // re-render that follows a script run (the expander drawn anew, closed): each expander still closed is clicked
    // again whenever the wait has not ended within a slice; the whole is bounded by `timeout`, and a failure says
    // what each expander was doing. `unsettled` runs in the page, for the wait and for that message alike: every
    // expander not yet open and still, as "index:closed" or "index:open~animation(state)".
    const unsettled = () => [...document.querySelectorAll('[data-testid="stExpander"]')].map((e, i) => {
      const closed = Boolean(e.querySelector('[data-testid="stExpanderDetails"][inert]'));
      const running = e.getAnimations({ subtree: true });
      return closed || running.length ? `${i}:${closed ? "closed" : "open"}`
        + running.map((a) => `~${a.animationName || a.constructor.name}(${a.playState})`).join("") : null;
    }).filter(Boolean);
    async function openExpanders() {
      const expanders = page.locator('[data-testid="stExpander"]');
      const n = await expanders.count();
      out.expanders += n;
      out.step = `${out.step.split(" / ")[0]} / ${n} expanders opening`;
      const start = Date.now();
      for (let pass = 0; ; pass++) {
        const now = await expanders.count();
        for (let i = 0; i < now; i++) {
          const closed = await expanders.nth(i).locator('[data-testid="stExpanderDetails"]').first().evaluate(
            (d) => d.hasAttribute("inert")).catch(() => false);  // Streamlit makes a collapsed expander's content inert
          live(); // a click toggles: an attempt given up on must not make it too
          if (closed) await expanders.nth(i).locator("summary").first().click();
        }
        const left = timeout - (Date.now() - start);
        try {
          await page.waitForFunction(`(${unsettled})().length === 0`, null, { timeout: Math.max(1, Math.min(left, 30000)) });
          return;
        } catch (err) {
          if (Date.now() - start < timeout) continue;
          const state = await page.evaluate(unsettled).catch(() => []);
          throw new Error(`${String(err && err.message || err).split("\n")[0]} after ${pass + 1} passes; `
                          + `unsettled expanders ${state.join(" ")}`);
        }
      }
    }

    const open = async () => {
      out.step = "open";
      await page.goto(url, { waitUntil: "domcontentloaded", timeout });
      await settle(page, [page.locator('[data-testid="stDataFrame"]').first()], timeout); // a blank page reloaded
      await idle(page, timeout);
    };
    await open();
    // Each page fetches the code of widgets the leaderboard had none of (expanders, selectboxes): a page that
    // lost one is loaded anew and the whole walk done again, its counts from zero (what it found is kept).
    await retryLost(page, async (isLive) => {
      live = isLive; // choose, openExpanders and inspect stop in an attempt given up on
      out.pages = [];
      out.expanders = 0;
      await inspect("leaderboard");

      out.step = "benchmark page";
      await runs(() => page.getByText("Benchmark", { exact: true }).first().click());
      await page.locator('[data-testid="stExpander"]').first().waitFor({ state: "visible", timeout });
      out.benchmarks = await choose("Benchmark", 99);  // counts the options
      for (let b = 0; b < out.benchmarks; b++) {
        out.step = `benchmark ${b}`;
        await choose("Benchmark", b);
        const nRuns = await choose("Run", 99);
        for (let r = 0; r < nRuns; r++) {
          await choose("Run", r);
          await page.locator('[data-testid="stExpander"]').first().waitFor({ state: "visible", timeout });
          await openExpanders();
          await inspect(`benchmark ${b} run ${r}`);
        }
      }

      out.step = "compare page";
      await runs(() => page.getByText("Compare", { exact: true }).first().click());
      for (let b = 0; b < out.benchmarks; b++) {
        await choose("Benchmark", b);
        await openExpanders();
        await inspect(`compare ${b}`);
      }
    }, open, () => { out.reloads = (out.reloads || 0) + 1; });
    console.log(JSON.stringify(out));
  } catch (err) {
    const shot = process.env.SHOT;  // a screenshot of the failure, when asked for
    if (shot) await browser.contexts()[0]?.pages()[0]?.screenshot({ path: shot }).catch(() => {});
    const text = await browser.contexts()[0]?.pages()[0]?.locator("body").innerText().catch(() => "") || "";
    throw new Error(`${out.step}: ${why(err)} | page: `
                    + text.slice(0, 600).replace(/\s+/g, " "));
  } finally {
    await browser.close();
  }
}

main().catch((err) => { console.error(String(err && err.message || err).split("\n")[0]); process.exit(1); });
