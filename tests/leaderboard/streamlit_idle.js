// Waits on what a Streamlit page has done, never on the clock: a fixed wait is too short on a starved machine.

// The page's script run has finished. Streamlit marks its app root with the run's state (as its own
// end-to-end tests wait for): "initial" until the page's first run starts, "running" while one runs,
// "notRunning" once it has ended — by then everything the run draws or sends has been drawn and sent: a proof
// that something did NOT appear, or that a page is complete. Call it once something the run in question drew
// is visible (or right after a page load).
const RUN_ENDED = '[data-testid="stApp"][data-test-script-state="notRunning"]';

async function idle(page, timeout) {
  await page.locator(RUN_ENDED).waitFor({ state: "attached", timeout });
}

// Every data grid on the page has drawn its cells. Streamlit's grid (glide-data-grid) paints on a canvas and
// then fills an accessible table with the drawn header and cells, a moment after the run has ended: what a
// test reads of a grid's cells is there once each grid has a column header and a cell in that table.
async function gridsDrawn(page, timeout) {
  const grids = page.locator('[data-testid="stDataFrame"]');
  const n = await grids.count();
  for (let i = 0; i < n; i += 1) {
    for (const role of ["columnheader", "gridcell"]) {
      await grids.nth(i).locator(`[role="${role}"]`).first().waitFor({ state: "attached", timeout });
    }
  }
}

// Wait until the page shows one of `screens` (locators). A page that is still blank after `blankMs` — Streamlit
// drew nothing, as when its websocket was dropped on a starved machine — or whose script run has ended without
// drawing any of them — as when the browser failed to fetch one of Streamlit's own scripts ("Failed to fetch
// dynamically imported module": the leaderboard drawn, its grid never; intermittent in Streamlit itself,
// streamlit/streamlit#10510) — is reloaded, as a user would, at most
// `reloads` times (a CI run once spent the whole 10-minute step bound on such a page). A page still running its
// script is given the whole `timeout` (slow, not lost); one that keeps drawing something else then fails.
async function settle(page, screens, timeout, note = () => {}, reloads = 2, blankMs = 90000) {
  for (let attempt = 0; ; attempt += 1) {
    const start = Date.now();
    for (;;) {
      const left = Math.max(1, timeout - (Date.now() - start));
      const slice = attempt < reloads ? Math.min(blankMs, left) : left;
      let err = null;
      try {
        await Promise.any(screens.map((s) => s.waitFor({ timeout: slice })));
        return;
      } catch (e) {
        err = e.errors ? e.errors[0] : e;
      }
      if (Date.now() - start >= timeout) throw err;
      const drawn = await page.locator('[data-testid="stMain"] [data-testid="stElementContainer"]').count()
        .catch(() => -1);
      const ended = await page.locator(RUN_ENDED).count()
        .catch(() => 0);
      if ((drawn === 0 || ended > 0) && attempt < reloads) break; // blank, or done without the screen: reload
    }
    note(`no screen after ${blankMs} ms: reload ${attempt + 1}`);
    await page.reload({ waitUntil: "domcontentloaded", timeout });
  }
}

// What a page did, for a failing flow's message: `ev(text)` gets its websockets' opening, closing and errors,
// responses of status 300 and over, failed requests, console errors and warnings (every console message with
// `everyConsole`) and uncaught page errors. URLs, statuses and error texts only, never a response's body. A flow
// adds what only it needs (frames and bodies it scans for markers, navigations) with listeners of its own.
function watch(page, ev, { everyConsole = false } = {}) {
  page.on("websocket", (ws) => {
    ev(`ws open ${ws.url()}`);
    ws.on("close", () => ev("ws closed"));
    ws.on("socketerror", (e) => ev(`ws error ${e}`));
  });
  page.on("response", (r) => { if (r.status() >= 300) ev(`${r.status()} ${r.url()}`); });
  page.on("requestfailed", (r) => ev(`failed ${r.url()} ${r.failure() && r.failure().errorText}`));
  page.on("console", (m) => {
    if (everyConsole || m.type() === "error" || m.type() === "warning") ev(`console ${m.type()} ${m.text()}`);
  });
  page.on("pageerror", (e) => ev(`pageerror ${e}`));
}

module.exports = { idle, gridsDrawn, settle, watch };
