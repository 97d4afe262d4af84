// A stand-in for Foresight's HTTP API, for working on /ui without the Rust
// server: serves the page's four files from src/api/ui and mock JSON in the
// shapes the real API returns. No dependencies.
//
//   PORT=8099 node mock-server.mjs
//   FORESIGHT_URL=http://127.0.0.1:8099 SCREENSHOT=/tmp/ui.png node render.mjs
//
// Workloads: default/llama-8b (history, forecast, plan with pools),
// batch/mistral-7b (history only: the forecast answers 404, the plan is empty),
// and MOCK_FAIL=1 makes /api/v1/workloads answer 500 (the page's error state).
import { createServer } from "node:http";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";

const UI = fileURLToPath(new URL("../../src/api/ui/", import.meta.url));
const FILES = {
  "/ui": ["index.html", "text/html; charset=utf-8"],
  "/ui/": ["index.html", "text/html; charset=utf-8"],
  "/ui/app.js": ["app.js", "text/javascript; charset=utf-8"],
  "/ui/uplot.min.js": ["uplot.min.js", "text/javascript; charset=utf-8"],
  "/ui/uplot.min.css": ["uplot.min.css", "text/css; charset=utf-8"],
};
const STEP = 10;
const PER_REPLICA = 4; // concurrency one replica handles

const iso = (s) => new Date(s * 1000).toISOString();
// A daily curve (trough at 04:00 UTC, peak at 16:00), slower swings of a few
// minutes on top, and for recorded values a little deterministic noise.
const noise = (s) => {
  const x = Math.sin(s * 12.9898 + 78.233) * 43758.5453;
  return x - Math.floor(x) - 0.5;
};
const demand = (s, noisy = true) => {
  const day = (s % 86400) / 86400;
  const base = 15 + 11 * Math.sin(2 * Math.PI * (day - 0.4167));
  const swings = 2.2 * Math.sin((2 * Math.PI * s) / 1500) + 0.9 * Math.sin((2 * Math.PI * s) / 420);
  return Math.max(0, +(base + swings + (noisy ? 1.6 * noise(s) : 0)).toFixed(2));
};
const replicasFor = (v) => Math.max(1, Math.ceil(v / PER_REPLICA));
const now = () => Math.floor(Date.now() / 1000 / STEP) * STEP;

// Replicas needed over the look-ahead: the p90 peak of the next 90 s, every 30 s.
function timeline(t) {
  const p90 = (s) => demand(s, false) + 1.28 * (0.6 + (0.05 * (s - t)) / STEP);
  const out = [];
  for (let k = 0; k < 45; k += 3) {
    const peak = Math.max(...[0, 1, 2, 3, 4, 5, 6, 7, 8, 9].map((j) => p90(t + (k + j) * STEP)));
    out.push({ time: iso(t + k * STEP), replicas: replicasFor(peak) });
  }
  return out;
}
const decision = (t) => ({
  desired_replicas: Math.max(...timeline(t).slice(0, 3).map((r) => r.replicas)),
  policy: "predictive",
  reason: "p90 forecast peaks within the 90 s cold-start look-ahead; sized for that peak",
});

function workloads() {
  const t = now();
  return {
    workloads: [
      { namespace: "default", name: "llama-8b", model: "meta-llama/Llama-3.1-8B-Instruct", signal: "concurrency", decision: decision(t) },
      { namespace: "batch", name: "mistral-7b", model: "mistralai/Mistral-7B-Instruct-v0.3", signal: "concurrency", decision: null },
    ],
  };
}

function history(ns, name, signal, since) {
  const t = now();
  const points = [];
  for (let s = t - since; s <= t; s += STEP) {
    // A scrape outage two thirds of the way back: nulls are gaps.
    const gap = s > t - since * 0.68 && s < t - since * 0.65;
    points.push({ time: iso(s), value: gap ? null : demand(s) });
  }
  return { namespace: ns, workload: name, signal, step_secs: STEP, points };
}

function forecast(ns, name) {
  const t = now();
  const points = [];
  for (let k = 1; k <= 45; k++) {
    const s = t + k * STEP;
    const v = demand(s, false);
    const spread = 0.6 + 0.05 * k; // widens with the horizon
    const q = (z) => +Math.max(0, v + z * spread).toFixed(2);
    points.push({ time: iso(s), value: +v.toFixed(2), quantiles: { "0.1": q(-1.28), "0.5": q(0), "0.9": q(1.28) } });
  }
  return {
    namespace: ns, workload: name, signal: "concurrency", model: "mstl", regime: "daily", backtest_mase: 0.81,
    fitted_at: iso(t - 120), step_secs: STEP, points,
  };
}

function plan(ns, name) {
  const t = now();
  const replicas = timeline(t);
  const d = decision(t);
  return {
    namespace: ns, workload: name, mode: "active", policy: "predictive", desired_replicas: d.desired_replicas, reason: d.reason,
    step_secs: 3 * STEP, replicas, placement: [["h100-reserved", Math.min(4, d.desired_replicas)], ["h100-spot", Math.max(0, d.desired_replicas - 4)]],
    pools: [
      { name: "h100-reserved", warm_nodes: 1, buffer_nodes: 0, reason: "reserved capacity covers the peak; kept warm" },
      { name: "h100-spot", warm_nodes: 1, buffer_nodes: 1, reason: "peak in 6 min exceeds reserved; node takes 5 min to be Ready" },
    ],
  };
}

function send(res, status, body, type = "application/json") {
  res.writeHead(status, { "content-type": type, "cache-control": "no-store" });
  res.end(typeof body === "string" || Buffer.isBuffer(body) ? body : JSON.stringify(body));
}
const problem = (res, status, title, detail) =>
  send(res, status, { type: "about:blank", title, status, detail }, "application/problem+json");

const server = createServer((req, res) => {
  const url = new URL(req.url, "http://localhost");
  const path = url.pathname;
  if (FILES[path]) {
    const [file, type] = FILES[path];
    return send(res, 200, readFileSync(UI + file), type);
  }
  if (path === "/api/v1/workloads") {
    if (process.env.MOCK_FAIL) return problem(res, 500, "Internal Server Error", "mock failure (MOCK_FAIL is set)");
    return send(res, 200, workloads());
  }
  const m = path.match(/^\/api\/v1\/workloads\/([^/]+)\/(history|forecast|plan)$/);
  if (m) {
    const name = decodeURIComponent(m[1]);
    const ns = url.searchParams.get("namespace") || "default";
    const w = workloads().workloads.find((x) => x.name === name && x.namespace === ns);
    if (!w) return problem(res, 404, "Not Found", `no workload \`${name}\` in namespace \`${ns}\``);
    const forecastable = name === "llama-8b";
    switch (m[2]) {
      case "history": {
        const since = Math.min(+(url.searchParams.get("since") || 3600), 35 * 86400);
        return send(res, 200, history(ns, name, url.searchParams.get("signal") || w.signal, since));
      }
      case "forecast":
        return forecastable
          ? send(res, 200, forecast(ns, name))
          : problem(res, 404, "Not Found", `no forecast for \`${name}\` yet: 42 of 360 points recorded, the models need more`);
      case "plan":
        return send(res, 200, forecastable ? plan(ns, name) : {
          namespace: ns, workload: name, mode: "active", policy: null, desired_replicas: null, reason: null,
          step_secs: 0, replicas: [], placement: null, pools: [],
        });
    }
  }
  problem(res, 404, "Not Found", `no route for ${path}`);
});

const port = +(process.env.PORT || 8099);
server.listen(port, "127.0.0.1", () => console.log(`mock Foresight API on http://127.0.0.1:${port}`));
