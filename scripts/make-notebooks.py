#!/usr/bin/env python3
"""Writes notebooks/*.ipynb from the cells below (outputs empty), so the
notebooks' source is reviewable as plain Python in one place.
Run: python3 scripts/make-notebooks.py"""
import json, pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent / "notebooks"

COMMON = '''import csv, json, os, pathlib
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
%matplotlib inline
# Where `scripts/notebooks` (or the test) wrote the CLI's output.
DATA = pathlib.Path(os.environ.get("FORESIGHT_NB_DATA", "out"))
print("reading", DATA.resolve())'''

ACCURACY = [
    ("md", """# Forecast accuracy per model

Reads what `foresight backtest --out DIR` wrote for each trace (`DIR/summary.json`,
`DIR/forecasts.csv`): rolling-origin splits, every model and the automatic choice,
scored by MASE (below 1 beats the in-sample seasonal naive), sMAPE, pinball loss
at p90 and the coverage of the p10-p90 interval. `scripts/notebooks` makes the data."""),
    ("code", COMMON),
    ("code", '''runs = sorted(p.parent for p in (DATA / "backtest").glob("*/summary.json"))
assert runs, f"no backtest output under {DATA / 'backtest'}: run scripts/notebooks first"
tables = {}
for run in runs:
    s = json.loads((run / "summary.json").read_text())
    tables[run.name] = s
    print(f"\\n{run.name}: {s['points']} points of {s['step_secs']} s, horizon {s['horizon']} steps, "
          f"{len(s['splits']['list'])} origins")
    print(f"{'model':<24}{'MASE':>8}{'sMAPE':>8}{'pinball90':>11}{'cover':>7}{'fit ms':>9}")
    for r in sorted(s["results"], key=lambda r: r["mase"] if r["mase"] is not None else 1e9):
        f = lambda v, d=3: "-" if v is None else f"{v:.{d}f}"
        print(f"{r['model']:<24}{f(r['mase']):>8}{f(r['smape'],1):>8}{f(r['pinball_p90']):>11}"
              f"{f(r['coverage_p10_p90'],2):>7}{f(r['fit_ms'],1):>9}")'''),
    ("code", '''fig, axes = plt.subplots(1, len(tables), figsize=(5 * len(tables), 3.5), squeeze=False)
for ax, (name, s) in zip(axes[0], tables.items()):
    rs = [r for r in s["results"] if r["mase"] is not None]
    rs.sort(key=lambda r: r["mase"])
    ax.barh([r["model"] for r in rs], [r["mase"] for r in rs],
            color=["tab:orange" if r["model"] == "auto" else "tab:blue" for r in rs])
    ax.axvline(1.0, color="grey", lw=0.8, ls="--")
    ax.set_title(name); ax.set_xlabel("MASE (lower is better)")
fig.tight_layout()'''),
    ("code", '''# The automatic choice's forecasts against the actuals, with its p10-p90 band, on the last origins.
fig, axes = plt.subplots(len(tables), 1, figsize=(11, 3 * len(tables)), squeeze=False)
for ax, name in zip(axes[:, 0], tables):
    rows = [r for r in csv.DictReader(open(DATA / "backtest" / name / "forecasts.csv")) if r["model"] == "auto"]
    xs = range(len(rows))
    num = lambda v: float(v) if v not in ("", None) else float("nan")
    ax.plot(xs, [num(r["actual"]) for r in rows], label="actual", color="black", lw=1)
    ax.plot(xs, [num(r["forecast"]) for r in rows], label="auto forecast", color="tab:orange")
    ax.fill_between(xs, [num(r["p10"]) for r in rows], [num(r["p90"]) for r in rows],
                    color="tab:orange", alpha=0.2, label="p10-p90")
    ax.set_title(f"{name}: backtest forecasts, origins end to end"); ax.legend(loc="upper left")
fig.tight_layout()'''),
]

POLICIES = [
    ("md", """# Scaling policies compared: cost against SLO

Reads what `foresight simulate --out DIR` wrote for each trace and pod start
(`DIR/summary.json`, `DIR/timeline.csv`): static fleets sized on the warm-up,
reactive KEDA thresholds under several HPA behaviours, Foresight's own engine
(predictive) at several quantiles, the arrival-blind yardstick at several
headrooms, and the oracle, replayed on the same arrivals under one replica
cap. `scripts/frontiers` makes the data (`scripts/notebooks` runs it)."""),
    ("code", COMMON),
    ("code", '''runs = sorted(p.parent for p in (DATA / "simulate").glob("*/summary.json"))
assert runs, f"no simulator output under {DATA / 'simulate'}: run scripts/notebooks first"
summaries = {r.name: json.loads((r / "summary.json").read_text()) for r in runs}
for name, s in summaries.items():
    oracle = next((r["gpu_hours"] for r in s["reports"] if r["policy"] == "oracle"), None)
    print(f"\\n{name} ({s['trace']}), {s['reports'][0]['minutes'] / 1440:.1f} days, cap {s['max_replicas']}")
    print(f"{'policy':<42}{'GPU-h':>9}{'x oracle':>9}{'min met':>9}{'req met':>9}{'dropped':>10}")
    for r in s["reports"]:
        x = f"{r['gpu_hours'] / oracle:.2f}" if oracle else "-"
        print(f"{r['policy']:<42}{r['gpu_hours']:>9.0f}{x:>9}{100 * r['minutes_met']:>8.2f}%"
              f"{100 * r['slo_attainment']:>8.2f}%{r['dropped']:>10.0f}")
    for j in s["reading"]["predictive"]:
        sv = j["saving_vs_reactive"]
        print(f"  {j['policy']}: saves {'-' if sv is None else f'{100 * sv:+.1f}%'} against the reactive frontier")'''),
    ("code", '''# The frontiers, one panel per trace and pod start: GPU-hours (relative to the oracle) against
# the share of minutes meeting the SLO (99% of a minute's requests within the TTFT target).
# Each family's points are joined along its frontier (the cheapest run reaching each SLO).
cols = 2
rows_ = (len(summaries) + cols - 1) // cols
fig, axes = plt.subplots(rows_, cols, figsize=(7 * cols, 4.2 * rows_), squeeze=False)
colours = {"static": "tab:grey", "reactive": "tab:red", "predictive": "tab:blue",
           "yardstick": "tab:purple", "oracle": "tab:green"}
markers = {"static": "s", "reactive": "^", "predictive": "o", "yardstick": "D", "oracle": "*"}
for ax, (name, s) in zip(axes.flat, summaries.items()):
    oracle = next(r["gpu_hours"] for r in s["reports"] if r["policy"] == "oracle")
    for kind in colours:
        pts = sorted((100 * r["minutes_met"], r["gpu_hours"] / oracle) for r in s["reports"]
                     if r["policy"].split("(")[0] == kind)
        if not pts:
            continue
        ax.scatter([p[1] for p in pts], [p[0] for p in pts], marker=markers[kind], color=colours[kind],
                   s=50, label=kind)
        edge, best = [], float("inf")
        for m, g in sorted(pts, key=lambda p: -p[0]):
            if g < best:
                edge.append((m, g)); best = g
        ax.plot([p[1] for p in edge], [p[0] for p in edge], color=colours[kind], lw=1)
    ax.set_ylim(max(90, ax.get_ylim()[0]), 100.2)
    ax.set_title(name); ax.set_xlabel("GPU-hours / oracle"); ax.set_ylabel("minutes meeting the SLO (%)")
    ax.grid(alpha=0.3); ax.legend(fontsize=7, loc="lower right")
for ax in list(axes.flat)[len(summaries):]:
    ax.axis("off")
fig.tight_layout()'''),
    ("code", '''# Replicas over time against demand (first two days), oracle, best reactive and predictive p90.
for name, s in summaries.items():
    rows = list(csv.DictReader(open(DATA / "simulate" / name / "timeline.csv")))
    keep = {"oracle", "predictive(p90, learned capacity)", "reactive(concurrency>32, down 300s)"}
    policies = [p for p in dict.fromkeys(r["policy"] for r in rows) if p in keep]
    fig, ax = plt.subplots(figsize=(12, 3.5))
    ax2 = ax.twinx()
    first = [r for r in rows if r["policy"] == "oracle"][: 2 * 1440]
    ax2.plot([int(r["minute"]) / 60 for r in first], [float(r["demand_rps"]) for r in first],
             color="lightgrey", lw=0.8, label="demand (req/s)")
    for p in policies:
        sel = [r for r in rows if r["policy"] == p][: 2 * 1440]
        ax.plot([int(r["minute"]) / 60 for r in sel], [int(r["ready_replicas"]) for r in sel], lw=1, label=p)
    ax.set_xlabel("hours into the window"); ax.set_ylabel("ready replicas"); ax2.set_ylabel("req/s")
    ax.set_title(name); ax.legend(fontsize=7, loc="upper left")
    ax.set_zorder(ax2.get_zorder() + 1); ax.patch.set_visible(False)'''),
]


def notebook(cells):
    out = []
    for i, (kind, src) in enumerate(cells):
        cell = {"cell_type": "markdown" if kind == "md" else "code", "id": f"cell-{i}", "metadata": {},
                "source": src.splitlines(True)}
        if kind == "code":
            cell.update(execution_count=None, outputs=[])
        out.append(cell)
    return {
        "cells": out,
        "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
                     "language_info": {"name": "python"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }


for name, cells in [("forecast_accuracy", ACCURACY), ("policy_comparison", POLICIES)]:
    (ROOT / f"{name}.ipynb").write_text(json.dumps(notebook(cells), indent=1) + "\n")
    print("wrote", ROOT / f"{name}.ipynb")
