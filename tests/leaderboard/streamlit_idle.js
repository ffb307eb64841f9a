// Wait until the page's Streamlit script run has finished. Streamlit marks its app root with the run's state
// (as its own end-to-end tests wait for): "initial" until the page's first run starts, "running" while one
// runs, "notRunning" once it has ended — by then everything the run draws or sends has been drawn and sent.
// A proof that something did NOT appear, or that a page is complete, which no fixed wait gives on a starved
// machine. Call it once something the run in question drew is visible (or right after a page load).
async function idle(page, timeout) {
  await page.locator('[data-testid="stApp"][data-test-script-state="notRunning"]').waitFor({ state: "attached", timeout });
}

module.exports = { idle };
