// Opens FORESIGHT_URL/ui (on WORKLOAD, `namespace/name`, if set) in Debian's Chromium, waits for the chart to be drawn
// with data, checks the canvas has ink, saves a screenshot to SCREENSHOT and
// prints a one-line JSON summary. Exit 1 with the reason (and the page's
// console errors) otherwise.
import { chromium } from "playwright-core";

const base = process.env.FORESIGHT_URL;
const shot = process.env.SCREENSHOT || "ui-screenshot.png";
if (!base) {
  console.error("set FORESIGHT_URL, e.g. http://127.0.0.1:8080");
  process.exit(2);
}

const browser = await chromium.launch({ executablePath: "/usr/bin/chromium", args: ["--no-sandbox"] });
const errors = [];
try {
  const page = await browser.newPage({ viewport: { width: 1200, height: 900 } });
  page.on("console", (m) => m.type() === "error" && errors.push(m.text()));
  page.on("pageerror", (e) => errors.push(String(e)));
  const workload = process.env.WORKLOAD ? `?workload=${encodeURIComponent(process.env.WORKLOAD)}` : "";
  await page.goto(`${base}/ui${workload}`);
  await page.waitForFunction(
    () => {
      const c = document.getElementById("chart");
      return c.dataset.state === "error" ||
        (c.dataset.state === "ready" && +c.dataset.historyPoints > 0 && +c.dataset.forecastPoints > 0);
    },
    null,
    { timeout: 60000 },
  );
  const info = await page.evaluate(() => {
    const c = document.getElementById("chart");
    const canvas = c.querySelector("canvas");
    let inked = 0;
    if (canvas) {
      const px = canvas.getContext("2d").getImageData(0, 0, canvas.width, canvas.height).data;
      for (let i = 0; i < px.length; i += 4) if (px[i + 3] > 0 && (px[i] < 200 || px[i + 1] < 200 || px[i + 2] < 200)) inked++;
    }
    return {
      state: c.dataset.state,
      status: document.getElementById("status").textContent,
      history: +c.dataset.historyPoints,
      forecast: +c.dataset.forecastPoints,
      replicas: +c.dataset.replicaPoints,
      canvas: !!canvas,
      inked,
    };
  });
  await page.screenshot({ path: shot, fullPage: true });
  if (info.state !== "ready" || !info.canvas || info.inked < 500) {
    throw new Error(`chart not drawn: ${JSON.stringify(info)}`);
  }
  console.log(JSON.stringify({ history: info.history, forecast: info.forecast, replicas: info.replicas }));
} catch (e) {
  console.error(`UI test failed: ${e.message}`);
  if (errors.length) console.error(`browser console errors:\n${errors.join("\n")}`);
  process.exitCode = 1;
} finally {
  await browser.close();
}
