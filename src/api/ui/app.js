// Foresight's built-in page: one chart per chosen workload, drawn with uPlot
// from the JSON API. Refreshes every 10 s.
"use strict";

const chartEl = document.getElementById("chart");
const select = document.getElementById("workload");
const statusEl = document.getElementById("status");
let plot = null;

const secs = (rfc3339) => Date.parse(rfc3339) / 1000;

async function getJson(url) {
  const res = await fetch(url);
  const body = await res.json().catch(() => ({}));
  if (!res.ok) throw new Error(body.detail || `${url}: HTTP ${res.status}`);
  return body;
}

function text(el, s) { el.textContent = s; return el; }

function facts(rows) {
  const dl = document.getElementById("facts");
  dl.replaceChildren();
  for (const [k, v] of rows) {
    dl.append(text(document.createElement("dt"), k), text(document.createElement("dd"), v));
  }
}

function poolsTable(pools) {
  const t = document.getElementById("pools");
  t.replaceChildren();
  if (!pools.length) return;
  const head = t.insertRow();
  for (const h of ["Pool", "Warm nodes", "Placeholders", "Why"]) head.append(text(document.createElement("th"), h));
  for (const p of pools) {
    const r = t.insertRow();
    for (const v of [p.name, p.warm_nodes, p.buffer_nodes, p.reason]) text(r.insertCell(), String(v));
  }
}

// Merge series with their own timestamps onto one sorted x axis (nulls elsewhere).
function align(series) {
  const xs = [...new Set(series.flatMap((s) => s.map(([t]) => t)))].sort((a, b) => a - b);
  const index = new Map(xs.map((t, i) => [t, i]));
  const cols = series.map((s) => {
    const col = new Array(xs.length).fill(null);
    for (const [t, v] of s) col[index.get(t)] = v;
    return col;
  });
  return [xs, ...cols];
}

async function draw(ns, name) {
  const q = `?namespace=${encodeURIComponent(ns)}`;
  const base = `/api/v1/workloads/${encodeURIComponent(name)}`;
  const [history, forecast, plan] = await Promise.all([
    getJson(`${base}/history${q}&since=3600`),
    getJson(`${base}/forecast${q}`).catch((e) => ({ error: e.message, points: [] })),
    getJson(`${base}/plan${q}`).catch(() => ({ replicas: [], pools: [] })),
  ]);
  statusEl.textContent = forecast.error ? `No forecast: ${forecast.error}` : "";

  const hist = history.points.filter((p) => p.value !== null).map((p) => [secs(p.time), p.value]);
  const fpts = forecast.points.map((p) => [secs(p.time), p.value]);
  const qs = forecast.points.length ? Object.keys(forecast.points[0].quantiles).sort((a, b) => a - b) : [];
  const lo = qs.length ? forecast.points.map((p) => [secs(p.time), p.quantiles[qs[0]]]) : [];
  const hi = qs.length ? forecast.points.map((p) => [secs(p.time), p.quantiles[qs[qs.length - 1]]]) : [];
  const reps = plan.replicas.map((p) => [secs(p.time), p.replicas]);
  const data = align([hist, fpts, hi, lo, reps]);

  const width = Math.max(600, chartEl.clientWidth || 1000);
  const opts = {
    width, height: 380,
    scales: { x: { time: true }, replicas: { range: (u, min, max) => [0, Math.max(1, max + 1)] } },
    series: [
      {},
      { label: `actual ${history.signal}`, stroke: "#1f5fbf", width: 2 },
      { label: `forecast (${forecast.model || "none"})`, stroke: "#d9731a", width: 2, dash: [8, 4] },
      { label: qs.length ? `p${Math.round(qs[qs.length - 1] * 100)}` : "upper", stroke: "rgba(217,115,26,0.4)", width: 1 },
      { label: qs.length ? `p${Math.round(qs[0] * 100)}` : "lower", stroke: "rgba(217,115,26,0.4)", width: 1 },
      { label: "planned replicas", stroke: "#2e8540", width: 2, scale: "replicas", paths: uPlot.paths.stepped({ align: 1 }) },
    ],
    bands: qs.length > 1 ? [{ series: [3, 4], fill: "rgba(217,115,26,0.15)" }] : [],
    axes: [{}, { label: history.signal }, { side: 1, scale: "replicas", label: "replicas", grid: { show: false } }],
  };
  if (plot) plot.destroy();
  plot = new uPlot(opts, data, chartEl);

  facts([
    ["Model", forecast.model ? `${forecast.model} (${forecast.regime})` : "none yet"],
    ["Backtest MASE", forecast.backtest_mase == null ? "n/a" : forecast.backtest_mase.toFixed(3)],
    ["Desired replicas", plan.desired_replicas == null ? "none yet" : String(plan.desired_replicas)],
    ["Policy", `${plan.policy || "none"}${plan.mode === "shadow" ? " (shadow: KEDA gets the reactive answer)" : ""}`],
    ["Why", plan.reason || ""],
  ]);
  poolsTable(plan.pools || []);
  chartEl.dataset.historyPoints = String(hist.length);
  chartEl.dataset.forecastPoints = String(fpts.length);
  chartEl.dataset.replicaPoints = String(reps.length);
  chartEl.dataset.state = "ready";
}

async function refresh() {
  try {
    const list = await getJson("/api/v1/workloads");
    const keys = list.workloads.map((w) => `${w.namespace}/${w.name}`);
    // `/ui?workload=namespace/name` opens on that workload.
    const chosen = select.value || new URLSearchParams(location.search).get("workload");
    if ([...select.options].map((o) => o.value).join() !== keys.join()) {
      select.replaceChildren(...keys.map((k) => { const o = document.createElement("option"); o.value = o.textContent = k; return o; }));
      if (keys.includes(chosen)) select.value = chosen;
    }
    if (!select.value) { statusEl.textContent = "No workloads are configured."; return; }
    const [ns, name] = select.value.split("/");
    await draw(ns, name);
  } catch (e) {
    chartEl.dataset.state = "error";
    statusEl.textContent = `Error: ${e.message}`;
  }
}

select.addEventListener("change", refresh);
refresh();
setInterval(refresh, 10000);
