// Foresight's built-in page: one uPlot chart for the chosen workload, drawn
// from the JSON API (history, forecast with its quantile band, planned
// replicas on a right-hand axis). Plain JS, no build step; refreshes every 10 s.
//
// For tests, #chart carries data-state (loading | ready | empty | error) and,
// once drawn, data-history-points / data-forecast-points / data-replica-points.
"use strict";

const REFRESH_MS = 10000;
const HISTORY_SECS = 3600;

const chartEl = document.getElementById("chart");
const select = document.getElementById("workload");
const statusEl = document.getElementById("status");
let plot = null;
let plotKey = "";
let workloads = [];
let generation = 0; // drops results of a refresh overtaken by a newer one

const secs = (rfc3339) => Date.parse(rfc3339) / 1000;

async function getJson(url) {
  const res = await fetch(url, { headers: { accept: "application/json" } });
  const body = await res.json().catch(() => ({}));
  if (!res.ok) throw new Error(body.detail || body.title || `${url}: HTTP ${res.status}`);
  return body;
}

function el(tag, text) {
  const e = document.createElement(tag);
  if (text != null) e.textContent = text;
  return e;
}

function facts(rows) {
  const dl = document.getElementById("facts");
  dl.replaceChildren(...rows.flatMap(([k, v]) => [el("dt", k), el("dd", v)]));
}

function poolsTable(pools) {
  const t = document.getElementById("pools");
  t.replaceChildren();
  if (!pools.length) return;
  t.createCaption().textContent = "Node pools";
  const head = t.createTHead().insertRow();
  for (const h of ["Pool", "Warm nodes", "Placeholder nodes", "Why"]) head.append(el("th", h));
  const body = t.createTBody();
  for (const p of pools) {
    const r = body.insertRow();
    for (const v of [p.name, p.warm_nodes, p.buffer_nodes, p.reason]) r.insertCell().textContent = v == null ? "" : String(v);
  }
}

// Merge series that have their own timestamps onto one sorted x axis. Where a
// series has no sample the cell is `undefined` (uPlot draws across it); a
// null from the API stays null (uPlot leaves a gap there).
function align(series) {
  const xs = [...new Set(series.flatMap((s) => s.map(([t]) => t)))].sort((a, b) => a - b);
  const index = new Map(xs.map((t, i) => [t, i]));
  const cols = series.map((s) => {
    const col = new Array(xs.length).fill(undefined);
    for (const [t, v] of s) col[index.get(t)] = v;
    return col;
  });
  return [xs, ...cols];
}

const fmt = (v, digits, none = "n/a") => (v == null || Number.isNaN(v) ? none : Number(v).toFixed(digits));
const qLabel = (q) => `p${+(q * 100).toFixed(1)}`;

function chartOptions(signal, model, qs) {
  const band = qs.length > 1;
  const lo = qs[0], hi = qs[qs.length - 1];
  return {
    width: Math.max(320, chartEl.clientWidth || 1000),
    height: 380,
    scales: {
      x: { time: true },
      y: { range: (u, min, max) => [Math.min(0, min ?? 0), Math.max(1, (max ?? 1) * 1.1)] },
      replicas: { range: (u, min, max) => [0, Math.max(1, Math.ceil((max ?? 1) * 1.25))] },
    },
    series: [
      {},
      { label: `actual ${signal}`, stroke: "#1f5fbf", width: 2, value: (u, v) => fmt(v, 2, "--") },
      { label: model ? `forecast (${model})` : "forecast", stroke: "#d9731a", width: 2, dash: [8, 4], value: (u, v) => fmt(v, 2, "--") },
      { label: band ? `${qLabel(hi)}` : "upper", stroke: "rgba(217,115,26,0.45)", width: 1, show: band, value: (u, v) => fmt(v, 2, "--") },
      { label: band ? `${qLabel(lo)}` : "lower", stroke: "rgba(217,115,26,0.45)", width: 1, show: band, value: (u, v) => fmt(v, 2, "--") },
      {
        label: "planned replicas", stroke: "#2e8540", width: 2, scale: "replicas",
        paths: uPlot.paths.stepped({ align: 1 }), value: (u, v) => (v == null ? "--" : String(v)),
      },
    ],
    bands: band ? [{ series: [3, 4], fill: "rgba(217,115,26,0.15)" }] : [],
    axes: [
      {},
      { label: signal, size: 60 },
      { side: 1, scale: "replicas", label: "replicas", grid: { show: false }, size: 50, incrs: [1, 2, 5, 10, 20, 50, 100] },
    ],
  };
}

async function draw(gen, w) {
  const q = `?namespace=${encodeURIComponent(w.namespace)}`;
  const base = `/api/v1/workloads/${encodeURIComponent(w.name)}`;
  const signal = w.signal ? `&signal=${encodeURIComponent(w.signal)}` : "";
  const [history, forecast, plan] = await Promise.all([
    getJson(`${base}/history${q}${signal}&since=${HISTORY_SECS}`),
    getJson(`${base}/forecast${q}`).catch((e) => ({ error: e.message, points: [] })),
    getJson(`${base}/plan${q}`).catch((e) => ({ error: e.message, replicas: [], pools: [] })),
  ]);
  if (gen !== generation) return; // a newer refresh (or another workload) took over

  const notes = [];
  if (forecast.error) notes.push(`No forecast: ${forecast.error}`);
  if (plan.error) notes.push(`No plan: ${plan.error}`);
  statusEl.className = "";
  statusEl.textContent = notes.join(" · ");

  const hpts = history.points || [];
  const hist = hpts.map((p) => [secs(p.time), p.value]);
  const fp = forecast.points || [];
  const fpts = fp.map((p) => [secs(p.time), p.value]);
  // The band spans the lowest and highest quantile present in the points.
  const qs = [...new Set(fp.flatMap((p) => Object.keys(p.quantiles || {})))].map(Number).sort((a, b) => a - b);
  const quant = (qv) => fp
    .map((p) => [secs(p.time), Object.entries(p.quantiles || {}).find(([k]) => +k === qv)?.[1]])
    .filter(([, v]) => v != null);
  const hi = qs.length ? quant(qs[qs.length - 1]) : [];
  const lo = qs.length ? quant(qs[0]) : [];
  const reps = (plan.replicas || []).map((p) => [secs(p.time), p.replicas]);
  // Hold the last planned value for one more step (or to the forecast's end)
  // so that a one-point plan still shows as a line.
  const repsDrawn = reps.slice();
  if (reps.length) {
    const [t, r] = reps[reps.length - 1];
    const end = plan.step_secs > 0 ? t + plan.step_secs : (fpts.length ? fpts[fpts.length - 1][0] : t);
    if (end > t) repsDrawn.push([end, r]);
  }
  const data = align([hist, fpts, hi, lo, repsDrawn]);

  const sig = history.signal || w.signal || "signal";
  const key = JSON.stringify([w.namespace, w.name, sig, forecast.model || "", qs]);
  if (plot && key === plotKey) {
    plot.setData(data);
  } else {
    if (plot) plot.destroy();
    chartEl.replaceChildren();
    plot = new uPlot(chartOptions(sig, forecast.model, qs), data, chartEl);
    plotKey = key;
  }

  const d = w.decision || {};
  const policy = plan.policy || d.policy;
  facts([
    ["Model", forecast.model ? `${forecast.model} (regime: ${forecast.regime || "n/a"})` : "none yet"],
    ["Backtest MASE", forecast.model ? fmt(forecast.backtest_mase, 3) : "n/a"],
    ["Forecast fitted", forecast.fitted_at ? new Date(forecast.fitted_at).toLocaleString() : "n/a"],
    ["Desired replicas", String(plan.desired_replicas ?? d.desired_replicas ?? "none yet")],
    ["Policy", `${policy || "none yet"}${plan.mode === "shadow" ? " (shadow: KEDA gets the reactive answer)" : ""}`],
    ["Why", plan.reason || d.reason || w.error || ""],
  ]);
  poolsTable(plan.pools || []);

  chartEl.dataset.historyPoints = String(hist.filter(([, v]) => v != null).length);
  chartEl.dataset.forecastPoints = String(fpts.length);
  chartEl.dataset.replicaPoints = String(reps.length);
  chartEl.dataset.state = "ready";
}

function fillSelector(list) {
  const keys = list.map((w) => `${w.namespace}/${w.name}`);
  if ([...select.options].map((o) => o.value).join("\n") === keys.join("\n")) return;
  // `/ui?workload=namespace/name` opens on that workload; otherwise the first.
  const wanted = select.value || new URLSearchParams(location.search).get("workload");
  select.replaceChildren(...keys.map((k) => { const o = el("option", k); o.value = k; return o; }));
  if (keys.includes(wanted)) select.value = wanted;
}

async function refresh() {
  const gen = ++generation;
  try {
    const list = await getJson("/api/v1/workloads");
    if (gen !== generation) return;
    workloads = list.workloads || [];
    fillSelector(workloads);
    const w = workloads.find((x) => `${x.namespace}/${x.name}` === select.value);
    if (!w) {
      chartEl.dataset.state = "empty";
      statusEl.className = "";
      statusEl.textContent = "No workloads are configured.";
      return;
    }
    await draw(gen, w);
  } catch (e) {
    if (gen !== generation) return;
    chartEl.dataset.state = "error";
    statusEl.className = "error";
    statusEl.textContent = `Error: ${e.message}`;
  }
}

select.addEventListener("change", refresh);
window.addEventListener("resize", () => plot && plot.setSize({ width: Math.max(320, chartEl.clientWidth), height: 380 }));
refresh();
setInterval(refresh, REFRESH_MS);
