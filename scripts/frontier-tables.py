#!/usr/bin/env python3
"""Markdown tables of docs/simulator.md from what scripts/frontiers wrote.

    python3 scripts/frontier-tables.py [notebooks/out/frontiers]
"""
import json
import pathlib
import sys

OUT = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "notebooks/out/frontiers")
ORDER = ["nyc_taxi", "twitter_amzn", "elb", "m-small", "m-mid"]


def pct(v):
    return "-" if v is None else f"{100 * v:+.1f}%"


def x(v):
    return "-" if v is None else f"{v:.2f}"


runs = sorted((p.parent for p in OUT.glob("*/summary.json")),
              key=lambda d: (ORDER.index(d.name.rsplit("-", 1)[0]) if d.name.rsplit("-", 1)[0] in ORDER else 99,
                             int(d.name.rsplit("-", 1)[1].rstrip("s"))))
summaries = [(d, json.loads((d / "summary.json").read_text())) for d in runs]
print("| trace, pod start | policy | GPU-h x oracle | held x oracle | minutes met | requests met | dropped | p99 wait 5 min (median / p95) | cold starts |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
for d, s in summaries:
    o = next(r for r in s["reports"] if r["policy"] == "oracle")
    first = True
    for r in s["reports"]:
        label = f"{d.name} (cap {s['max_replicas']})" if first else ""
        first = False
        print(f"| {label} | {r['policy']} | {r['gpu_hours'] / o['gpu_hours']:.2f} | "
              f"{r['held_gpu_hours'] / o['held_gpu_hours']:.2f} | {100 * r['minutes_met']:.2f}% | "
              f"{100 * r['slo_attainment']:.3f}% | {r['dropped']:,.0f} | "
              f"{r['wait_p99_5min'][0]:.2f} / {r['wait_p99_5min'][1]:.2f} s | {r['cold_starts']:,} |")
print()
print("| trace, pod start | predictive | minutes met | saving vs reactive frontier (node GPU-h / held) | x yardstick (node / held) | dominated by |")
print("|---|---|---:|---:|---:|---|")
for d, s in summaries:
    held = {j["policy"]: j for j in s["reading_held"]["predictive"]}
    for i, j in enumerate(s["reading"]["predictive"]):
        h = held[j["policy"]]
        dom = ", ".join(p.replace("reactive", "r").replace("concurrency", "c") for p in j["dominated_by"]) or "none"
        print(f"| {d.name if i == 0 else ''} | {j['policy'].split(',')[0].replace('predictive(', '')} | "
              f"{100 * j['minutes_met']:.2f}% | {pct(j['saving_vs_reactive'])} / {pct(h['saving_vs_reactive'])} | "
              f"{x(j['vs_yardstick'])} / {x(h['vs_yardstick'])} | {dom} |")
print()
print("| trace, pod start | minutes met | reactive | static | predictive | yardstick |")
print("|---|---|---:|---:|---:|---:|")
# Each family's cheapest run meeting at least the level (as `simulate` prints it), over the oracle's.
for d, s in summaries:
    o = next(r for r in s["reports"] if r["policy"] == "oracle")["gpu_hours"]
    for i, level in enumerate([0.99, 0.995, 0.999]):
        def cheapest(family):
            costs = [r["gpu_hours"] for r in s["reports"]
                     if r["policy"].split("(")[0] == family and r["minutes_met"] >= level]
            return "-" if not costs else f"{min(costs) / o:.2f}"
        print(f"| {d.name if i == 0 else ''} | {100 * level:.1f}% | {cheapest('reactive')} | "
              f"{cheapest('static')} | {cheapest('predictive')} | {cheapest('yardstick')} |")
