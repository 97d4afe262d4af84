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

Reads what `foresight simulate --out DIR` wrote for each trace (`DIR/summary.json`,
`DIR/timeline.csv`): static at peak, reactive (KEDA threshold through the HPA),
Foresight's predictive sizing and the oracle with perfect foresight, replayed
on the same arrivals. `scripts/notebooks` makes the data."""),
    ("code", COMMON),
    ("code", '''runs = sorted(p.parent for p in (DATA / "simulate").glob("*/summary.json"))
assert runs, f"no simulator output under {DATA / 'simulate'}: run scripts/notebooks first"
summaries = {r.name: json.loads((r / "summary.json").read_text()) for r in runs}
for name, s in summaries.items():
    oracle = next((r["gpu_hours"] for r in s["reports"] if r["policy"] == "oracle"), None)
    print(f"\\n{name} ({s['trace']}), {s['reports'][0]['minutes'] / 1440:.1f} days")
    print(f"{'policy':<28}{'GPU-h':>9}{'x oracle':>9}{'SLO met':>9}{'min met':>9}{'viol min':>9}{'cold st':>8}")
    for r in s["reports"]:
        x = f"{r['gpu_hours'] / oracle:.2f}" if oracle else "-"
        met = 100 * (1 - r["violation_minutes"] / r["minutes"])
        print(f"{r['policy']:<28}{r['gpu_hours']:>9.0f}{x:>9}{100 * r['slo_attainment']:>8.2f}%"
              f"{met:>8.2f}%{r['violation_minutes']:>9}{r['cold_starts']:>8}")'''),
    ("code", '''# The frontier, one panel per trace: GPU-hours (relative to the oracle) against the share of
# minutes meeting the SLO (99% of a minute's requests within the TTFT target). Up and left is
# better; the dotted lines are the goal (>= 99% of minutes at <= 1.15x the oracle).
fig, axes = plt.subplots(1, len(summaries), figsize=(5.5 * len(summaries), 4), squeeze=False)
colours = {"static": "tab:grey", "reactive": "tab:red", "predictive": "tab:blue", "oracle": "tab:green"}
markers = {"static": "s", "reactive": "^", "predictive": "o", "oracle": "*"}
for ax, (name, s) in zip(axes[0], summaries.items()):
    oracle = next(r["gpu_hours"] for r in s["reports"] if r["policy"] == "oracle")
    for r in s["reports"]:
        kind = r["policy"].split("(")[0]
        x, y = r["gpu_hours"] / oracle, 100 * (1 - r["violation_minutes"] / r["minutes"])
        ax.scatter(x, y, marker=markers.get(kind, "x"), color=colours.get(kind, "black"), s=70)
        ax.annotate(r["policy"].replace("concurrency", "c"), (x, y), fontsize=7,
                    xytext=(4, -10 if kind == "reactive" else 4), textcoords="offset points")
    ax.axhline(99, ls=":", color="black", lw=0.8); ax.axvline(1.15, ls=":", color="black", lw=0.8)
    ax.set_title(name); ax.set_xlabel("GPU-hours / oracle"); ax.set_ylabel("minutes meeting the SLO (%)")
    ax.grid(alpha=0.3)
fig.tight_layout()'''),
    ("code", '''# Replicas over time against demand, per trace (first two days of the window).
for name in summaries:
    rows = list(csv.DictReader(open(DATA / "simulate" / name / "timeline.csv")))
    policies = list(dict.fromkeys(r["policy"] for r in rows))
    fig, ax = plt.subplots(figsize=(12, 3.5))
    ax2 = ax.twinx()
    first = [r for r in rows if r["policy"] == policies[0]][: 2 * 1440]
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
