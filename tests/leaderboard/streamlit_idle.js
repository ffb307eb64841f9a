// Waits on what a Streamlit page has done, never on the clock: a fixed wait is too short on a starved machine.

// The page's script run has finished. Streamlit marks its app root with the run's state (as its own
// end-to-end tests wait for): "initial" until the page's first run starts, "running" while one runs,
// "notRunning" once it has ended — by then everything the run draws or sends has been drawn and sent: a proof
// that something did NOT appear, or that a page is complete. Call it once something the run in question drew
// is visible (or right after a page load).
async function idle(page, timeout) {
  await page.locator('[data-testid="stApp"][data-test-script-state="notRunning"]').waitFor({ state: "attached", timeout });
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

module.exports = { idle, gridsDrawn };
