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

// Streamlit's frontend fetches a widget's code the first time it draws one; when that fetch fails ("Failed to
// fetch dynamically imported module": intermittent in Streamlit itself, streamlit/streamlit#10510; a CI run under
// load lost the multiselect's chunk at sign-in and then waited its whole step bound for the sidebar) the widget
// never appears, whatever else the page draws. `track(page)` notes such a failure until the next load of the
// page; `scriptLost(page)` says whether one happened since. Idempotent; `watch` and `settle` call it.
// A widget's code comes with its stylesheet when it has one (the data grid's DataFrame.*.css): Vite's preload
// helper fails the import with "Unable to preload CSS for <url>" when that fetch fails, and Streamlit draws the
// error where the grid would be (a loaded CI run waited out its 10-minute calibration step on such a page).
const LOST_IMPORT = "Failed to fetch dynamically imported module";
const LOST = [LOST_IMPORT, "Unable to preload CSS for"];
const lostIn = (text) => LOST.some((m) => text.includes(m));

function track(page) {
  if (page.__medhelmTracked) return;
  page.__medhelmTracked = true;
  page.__medhelmLost = false;
  page.on("console", (m) => { if (m.type() === "error" && lostIn(m.text())) page.__medhelmLost = true; });
  page.on("pageerror", (e) => { if (lostIn(String(e))) page.__medhelmLost = true; });
  page.on("framenavigated", (f) => { if (f === page.mainFrame()) page.__medhelmLost = false; });
}

function scriptLost(page) {
  return Boolean(page.__medhelmLost);
}

class LostScript extends Error {}

// That failure made to happen, for the tests of the flows' recovery: the first fetch of Streamlit's chunk `name`
// (e.g. "Radio", "Multiselect"; "css/DataFrame" for the grid's stylesheet) is reset; `out.dropped` names the file
// whose fetch was reset.
async function dropFirstFetch(page, name, out) {
  let dropped = false;
  await page.route(`**/static/${name.includes("/") ? name : `js/${name}`}*`, (route) => {
    if (dropped) return route.continue();
    dropped = true;
    out.dropped = route.request().url().split("/").pop();
    return route.abort("connectionreset");
  });
}

// `work` (a promise on `page`), or a LostScript error within a second of the page losing one of its scripts: a
// step that waits for a widget need not wait out its whole bound for one that will never draw.
async function unlessLost(page, work) {
  track(page);
  let timer = null;
  const lost = new Promise((_, reject) => {
    const check = () => {
      if (scriptLost(page)) reject(new LostScript(`${LOST_IMPORT} (the page lost one of its scripts)`));
      else timer = setTimeout(check, 1000);
    };
    check();
  });
  try {
    return await Promise.race([work, lost]);
  } finally {
    clearTimeout(timer);
    work.catch(() => {}); // the step given up on may still fail: nobody waits for it any more
  }
}

// One step of a flow: `work(live)` (a function returning a promise on `page`), done again after `recover()` (which
// loads the page anew and waits for its screen) when the page loses one of its scripts meanwhile, at most
// `retries` times — what a user does with a widget that never draws. A later widget's code is fetched when it is
// first drawn (a Trends chart, the Review page's radios after sign-in: a CI run under load waited out a 10-minute
// bound for a sidebar that lost its script), so every step that waits for a widget goes through here. `work` must
// be safe to do again from its start. The attempt given up on cannot be stopped (its waits resolve on the page
// loaded anew), so it must call `live()` after each wait and before each click that toggles (an expander): from
// the moment of the loss, `live()` throws in it, and it stops instead of clicking beside the next attempt.
async function retryLost(page, work, recover, note = () => {}, retries = 2) {
  for (let attempt = 0; ; attempt += 1) {
    const gen = page.__medhelmGen = (page.__medhelmGen || 0) + 1;
    const live = () => { if (page.__medhelmGen !== gen) throw new LostScript("an attempt given up on"); };
    try {
      return await unlessLost(page, work(live));
    } catch (e) {
      page.__medhelmGen += 1; // the attempt's own work, still waiting somewhere, stops at its next live()
      if (!(e instanceof LostScript) || attempt >= retries) throw e;
      note(`a script of the page failed to load: reload ${attempt + 1}`);
      await recover();
    }
  }
}

// Wait until the page shows one of `screens` (locators). A page that is still blank after `blankMs` — Streamlit
// drew nothing, as when its websocket was dropped on a starved machine — or whose script run has ended without
// drawing any of them — as when the browser failed to fetch one of Streamlit's own scripts ("Failed to fetch
// dynamically imported module": the leaderboard drawn, its grid never; intermittent in Streamlit itself,
// streamlit/streamlit#10510) — or that shows a screen after losing one of those scripts (`scriptLost`: a widget
// that will never draw) is reloaded, as a user would, at most
// `reloads` times (a CI run once spent the whole 10-minute step bound on such a page). A page still running its
// script is given the whole `timeout` (slow, not lost); one that keeps drawing something else then fails.
async function settle(page, screens, timeout, note = () => {}, reloads = 2, blankMs = 90000) {
  track(page);
  for (let attempt = 0; ; attempt += 1) {
    const start = Date.now();
    let lost = false;
    for (;;) {
      const left = Math.max(1, timeout - (Date.now() - start));
      const slice = attempt < reloads ? Math.min(blankMs, left) : left;
      let err = null;
      try {
        await Promise.any(screens.map((s) => s.waitFor({ timeout: slice })));
        if (attempt >= reloads) return;
        await idle(page, timeout); // the run has drawn its widgets: each has fetched its code, or lost it
        if (!scriptLost(page)) return;
        lost = true;
        break;
      } catch (e) {
        err = e.errors ? e.errors[0] : e;
      }
      if (scriptLost(page) && attempt < reloads) { lost = true; break; }
      if (Date.now() - start >= timeout) throw err;
      const drawn = await page.locator('[data-testid="stMain"] [data-testid="stElementContainer"]').count()
        .catch(() => -1);
      const ended = await page.locator(RUN_ENDED).count()
        .catch(() => 0);
      if ((drawn === 0 || ended > 0) && attempt < reloads) break; // blank, or done without the screen: reload
    }
    note(lost ? `a script of the page failed to load: reload ${attempt + 1}`
      : `no screen after ${blankMs} ms: reload ${attempt + 1}`);
    await page.reload({ waitUntil: "domcontentloaded", timeout });
  }
}

// What a page did, for a failing flow's message: `ev(text)` gets its websockets' opening, closing and errors,
// responses of status 300 and over, failed requests, console errors and warnings (every console message with
// `everyConsole`) and uncaught page errors. URLs, statuses and error texts only, never a response's body. A flow
// adds what only it needs (frames and bodies it scans for markers, navigations) with listeners of its own.
function watch(page, ev, { everyConsole = false } = {}) {
  track(page);
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

// A failed step's error in one line, for a flow's message: Playwright's first line ("locator.waitFor: Timeout
// 600000ms exceeded.") and, when it has one, the line that says what was waited for.
function why(err) {
  const lines = String(err && err.message || err).split("\n");
  const waited = lines.find((l) => l.includes("waiting for"));
  return waited ? `${lines[0]} (${waited.trim().replace(/^- /, "")})` : lines[0];
}

// What a failed page shows, for a flow's message: headings, alerts and the errors Streamlit drew in place of an
// element (stException: a widget whose code or stylesheet failed to load shows its error there).
const SHOWN = "h1, h2, h3, [data-testid='stAlert'], [data-testid='stException']";

module.exports = { idle, gridsDrawn, settle, watch, retryLost, dropFirstFetch, why, SHOWN };
