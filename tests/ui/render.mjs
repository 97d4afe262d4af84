// Opens FORESIGHT_URL/ui (on WORKLOAD, `namespace/name`, if set) in Debian's
// Chromium, waits up to 60 s for the chart to be drawn with history and a
// forecast, checks its canvas has ink, saves a full-page screenshot to
// SCREENSHOT and prints a one-line JSON summary
// {"history":N,"forecast":N,"replicas":N}. Otherwise exits 1 with the reason
// and the browser's console errors.
import { chromium } from "playwright-core";

const base = (process.env.FORESIGHT_URL || "").replace(/\/+$/, "");
const shot = process.env.SCREENSHOT || "ui-screenshot.png";
const TIMEOUT_MS = 60000;
if (!base) {
  console.error("set FORESIGHT_URL, e.g. http://127.0.0.1:8080");
  process.exit(2);
}

// The chart's state, counts and how many canvas pixels are not near-white.
function inspect() {
  const c = document.getElementById("chart");
  if (!c) return { state: "no #chart element" };
  const canvas = c.querySelector("canvas");
  let inked = 0;
  if (canvas && canvas.width && canvas.height) {
    const px = canvas.getContext("2d").getImageData(0, 0, canvas.width, canvas.height).data;
    for (let i = 0; i < px.length; i += 4) {
      if (px[i + 3] > 0 && (px[i] < 200 || px[i + 1] < 200 || px[i + 2] < 200)) inked++;
    }
  }
  return {
    state: c.dataset.state,
    status: document.getElementById("status")?.textContent || "",
    history: +(c.dataset.historyPoints || 0),
    forecast: +(c.dataset.forecastPoints || 0),
    replicas: +(c.dataset.replicaPoints || 0),
    canvas: !!canvas,
    inked,
  };
}

const browser = await chromium.launch({ executablePath: "/usr/bin/chromium", args: ["--no-sandbox"] });
const errors = [];
let page;
try {
  page = await browser.newPage({ viewport: { width: 1200, height: 900 } });
  // Chromium's own "Failed to load resource" lines name no URL: the response
  // handler records those, with it.
  page.on("console", (m) => m.type() === "error" && !m.text().startsWith("Failed to load resource") && errors.push(m.text()));
  page.on("pageerror", (e) => errors.push(String(e)));
  page.on("requestfailed", (r) => errors.push(`request failed: ${r.url()} (${r.failure()?.errorText})`));
  page.on("response", (r) => r.status() >= 400 && errors.push(`HTTP ${r.status()} ${r.url()}`));
  const workload = process.env.WORKLOAD ? `?workload=${encodeURIComponent(process.env.WORKLOAD)}` : "";
  const res = await page.goto(`${base}/ui${workload}`, { timeout: TIMEOUT_MS });
  if (!res || !res.ok()) throw new Error(`GET ${base}/ui answered ${res ? res.status() : "nothing"}`);
  try {
    // The page refreshes itself every 10 s, so an early error or empty
    // history may still turn into a drawn chart: poll, don't reload.
    await page.waitForFunction(
      () => {
        const c = document.getElementById("chart");
        return c && c.dataset.state === "ready" && +c.dataset.historyPoints > 0 && +c.dataset.forecastPoints > 0;
      },
      null,
      { timeout: TIMEOUT_MS, polling: 250 },
    );
  } catch {
    throw new Error(`chart not ready with history and forecast after ${TIMEOUT_MS / 1000} s: ${JSON.stringify(await page.evaluate(inspect))}`);
  }
  const info = await page.evaluate(inspect);
  if (!info.canvas) throw new Error(`no <canvas> in #chart: ${JSON.stringify(info)}`);
  if (info.inked < 500) throw new Error(`the chart's canvas is blank: ${JSON.stringify(info)}`);
  await page.screenshot({ path: shot, fullPage: true });
  console.log(JSON.stringify({ history: info.history, forecast: info.forecast, replicas: info.replicas }));
} catch (e) {
  console.error(`UI test failed: ${e.message}`);
  if (page) await page.screenshot({ path: shot, fullPage: true }).catch(() => {});
  const counts = new Map();
  for (const e of errors) counts.set(e, (counts.get(e) || 0) + 1);
  const lines = [...counts].map(([e, n]) => (n > 1 ? `${e} (x${n})` : e));
  console.error(lines.length ? `browser console errors:\n${lines.join("\n")}` : "browser console errors: none");
  process.exitCode = 1;
} finally {
  await browser.close();
}
