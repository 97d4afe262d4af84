"""Foresight's `auto` against statsforecast on ~200 real series.

Sources (`../shared/data/bench/README.md`, plus the three NAB series beside it):
ServeGen LLM demand (per-client and per-model, 10 min, 14 days), Huawei
Cloud serverless request counts (5 min, 30 days), NAB tweet volumes and the
three NAB series of `../shared/data` (5 and 30 min). For every series, at
`--origins` rolling origins one day apart at the end of the series, both
horizons (1 h, 4 h) forecast from the same origins:

- Foresight: `foresight backtest --model auto` (its own selection at each
  origin, on that origin's history only), fed the series cut so that its
  splits fall on exactly these origins; it writes the grid, the splits and
  its forecasts with p10/p90.
- statsforecast 2.1: SeasonalNaive and AutoETS with the daily season, MSTL
  with the seasons that have two full cycles, fitted once per origin on the
  same training window (gaps interpolated as Foresight does) for the longer
  horizon, whose first hour is the 1 h forecast. Cached per split.

One MASE function scores everything: mean absolute error over the test
window divided by the in-sample MAE of the daily seasonal naive. Reported
per source and horizon: mean MASE of each method; the geometric mean over
series of Foresight's MASE over the best statsforecast model in hindsight
for that series, and over each single model (a mean MASE below 0.05 counts
as 0.05 on both sides); the worst series; how many are worse than 1.25x
and 2x; p10-p90 coverage of Foresight's intervals.

    python benches/many_series.py --bin target/release/foresight [--quick] [--jobs 2]

Run through scripts/compare-statsforecast.
"""

import argparse
import concurrent.futures as cf
import csv
import json
import math
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np

warnings.filterwarnings("ignore")

DAY = 86_400
HORIZONS = {"1h": 3600, "4h": 4 * 3600}
FLOOR = 0.05  # a mean MASE below this counts as this in every ratio
SF_MODELS = ("SeasonalNaive", "AutoETS", "MSTL")


# ---------------------------------------------------------------- the series


def servegen(data: Path):
    base = data / "bench" / "servegen"
    for model in ("m-small", "m-mid"):
        files = sorted((base / model).glob("chunk-*-trace.csv"), key=lambda p: int(p.name.split("-")[1]))
        for f in files:
            rows = [r for r in csv.reader(open(f)) if r]
            yield f"servegen/{model}/client-{f.name.split('-')[1]}", 600, [(int(r[0]), float(r[1])) for r in rows]
    agg = {}
    for r in csv.DictReader(open(base / "aggregate_rate_10min.csv")):
        agg.setdefault(r["model"], []).append((int(r["t_seconds"]), float(r["rate_req_per_s"])))
    for model, pts in sorted(agg.items()):
        yield f"servegen/{model}/aggregate", 600, pts


def huawei(data: Path):
    from datetime import datetime, timezone

    for f in sorted((data / "bench" / "huawei").glob("datacentre_*.csv")):
        rows = list(csv.reader(open(f)))
        header, body = rows[0], rows[1:]
        times = [int(datetime.strptime(r[0], "%Y-%m-%d %H:%M:%S").replace(tzinfo=timezone.utc).timestamp()) for r in body]
        for j, name in enumerate(header[1:], start=1):
            pts = [(t, float(r[j])) for t, r in zip(times, body) if r[j] != ""]
            yield f"huawei/{f.stem}/{name.split('---')[0]}", 300, pts


def nab(data: Path):
    from datetime import datetime, timezone

    files = [(data / "nab_nyc_taxi_30min.csv", 1800), (data / "nab_elb_request_count_5min.csv", 300),
             (data / "nab_twitter_volume_amzn_5min.csv", 300)]
    files += [(f, 300) for f in sorted((data / "bench" / "nab_tweets").glob("*.csv"))]
    for f, step in files:
        pts = []
        for r in csv.DictReader(open(f)):
            t = datetime.strptime(r["timestamp"], "%Y-%m-%d %H:%M:%S").replace(tzinfo=timezone.utc).timestamp()
            pts.append((int(t) // step * step, float(r["value"])))
        yield f"nab/{f.stem.removeprefix('nab_').removeprefix('Twitter_volume_').lower()}", step, pts


SOURCES = {"servegen": servegen, "huawei": huawei, "nab": nab}


def on_grid(step: int, pts):
    """Values on a regular grid from the first to the last timestamp; NaN where none."""
    t0, t1 = min(t for t, _ in pts), max(t for t, _ in pts)
    n = (t1 - t0) // step + 1
    v = np.full(n, np.nan)
    for t, x in pts:
        v[(t - t0) // step] = x
    return t0, v


def quick_subset(names):
    """Every eighth series of each source, and every aggregate: a fixed, spread-out sample."""
    return [n for i, n in enumerate(names) if i % 8 == 0 or n.endswith("/aggregate")]


# ---------------------------------------------------------------- scoring


def fill_gaps(y: np.ndarray) -> np.ndarray:
    """Linear interpolation, edges held: what Foresight fits on too."""
    ok = np.isfinite(y)
    if not ok.any():
        return np.zeros_like(y)
    idx = np.arange(len(y))
    return np.interp(idx, idx[ok], y[ok])


def mase_scale(train: np.ndarray, m: int) -> float:
    """In-sample MAE of seasonal naive (lag m, or 1 if the history is shorter)."""
    for lag in ([m] if len(train) > m else []) + [1]:
        d = np.abs(train[lag:] - train[:-lag])
        d = d[np.isfinite(d)]
        if len(d) and d.mean() > 0:
            return float(d.mean())
    return 1.0


def split_mase(values, split, forecast, h, m):
    start, origin = split
    actual = values[origin:origin + h]
    ok = np.isfinite(actual)
    if not ok.any():
        return None
    err = np.abs(actual[ok] - np.asarray(forecast[:h])[ok]).mean()
    return float(err / mase_scale(values[start:origin], m))


# ---------------------------------------------------------------- running


def run_foresight(bin_path: str, csv_path: Path, out: Path, horizon: str, origins: int, step: int):
    cmd = [bin_path, "backtest", "--csv", str(csv_path), "--horizon", horizon, "--origins", str(origins),
           "--step", "1d", "--model", "auto", "--freq", f"{step}s", "--out", str(out)]
    t = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}\n{r.stdout}{r.stderr}")
    return time.perf_counter() - t


def read_foresight(d: Path):
    summary = json.loads((d / "summary.json").read_text())
    with open(d / "series.csv") as f:
        values = np.array([float(r["value"]) if r["value"] else np.nan for r in csv.DictReader(f)])
    with open(d / "splits.csv") as f:
        splits = [(int(r["train_start"]), int(r["origin"])) for r in csv.DictReader(f)]
    point, lo, hi = {}, {}, {}
    with open(d / "forecasts.csv") as f:
        for r in csv.DictReader(f):
            if r["model"] != "auto":
                continue
            i = int(r["split"])
            point.setdefault(i, []).append(float(r["forecast"]))
            lo.setdefault(i, []).append(float(r["p10"]) if r["p10"] else np.nan)
            hi.setdefault(i, []).append(float(r["p90"]) if r["p90"] else np.nan)
    return summary, values, splits, point, lo, hi


def statsforecast_split(values, split, seasons, h):
    """Every statsforecast model's forecast at one split: {model: list | error string}."""
    from statsforecast.models import MSTL, AutoETS, SeasonalNaive

    start, origin = split
    train = fill_gaps(values[start:origin])
    day = seasons[0]
    usable = [p for p in seasons if len(train) >= 2 * p] or [day]
    models = {"SeasonalNaive": SeasonalNaive(season_length=day), "AutoETS": AutoETS(season_length=day),
              "MSTL": MSTL(season_length=usable)}
    out = {}
    for name, model in models.items():
        t = time.perf_counter()
        try:
            f = model.forecast(y=train, h=h)["mean"]
            out[name] = {"forecast": [float(x) for x in f], "secs": time.perf_counter() - t}
        except Exception as e:  # a model that cannot fit a split is reported, not hidden
            out[name] = {"error": str(e)[:200]}
    return out


def statsforecast_cached(cache: Path, values, splits, seasons, h):
    import statsforecast

    key = {"splits": [list(s) for s in splits], "h": h, "seasons": seasons, "version": statsforecast.__version__,
           "n": int(np.isfinite(values).sum()), "sum": float(np.nansum(values))}
    done = {}
    if cache.exists():
        c = json.loads(cache.read_text())
        if c.get("key") == key:
            done = {int(i): v for i, v in c["splits"].items()}
    for i, s in enumerate(splits):
        if i not in done:
            done[i] = statsforecast_split(values, s, seasons, h)
            cache.write_text(json.dumps({"key": key, "splits": done}))
    return [done[i] for i in range(len(splits))]


def one_series(job):
    """Both horizons of one series: Foresight's runs, statsforecast's (cached), per-split scores."""
    name, step, t0, values, args = job
    root = Path(args["out"]) / name
    root.mkdir(parents=True, exist_ok=True)
    steps = {h: secs // step for h, secs in HORIZONS.items()}
    longest = max(steps.values())
    result = {"name": name, "source": name.split("/")[0], "step": step, "points": len(values), "horizons": {}}
    secs = {}
    runs = {}
    for h, k in steps.items():
        # Cut so that the last origin sits `longest` steps before the end for every horizon.
        n = len(values) - longest + k
        path = root / f"input-{h}.csv"
        with open(path, "w") as f:
            f.write("timestamp,value\n")
            for i in range(n):
                f.write(f"{t0 + i * step},{'' if math.isnan(values[i]) else repr(float(values[i]))}\n")
        done = (root / f"foresight-{h}" / "forecasts.csv").exists()
        if not (args["reuse_foresight"] and done):
            secs[h] = run_foresight(args["bin"], path, root / f"foresight-{h}", h, args["origins"], step)
        runs[h] = read_foresight(root / f"foresight-{h}")
    summary, grid, splits, _, _, _ = runs["4h"]
    seasons = summary["seasons"]["0"] if isinstance(summary["seasons"], dict) else summary["seasons"]
    sf = statsforecast_cached(root / "statsforecast.json", grid, splits, seasons, longest)
    m = seasons[0]
    for h, k in steps.items():
        _, vals, sp, point, lo, hi = runs[h]
        assert sp == splits, f"{name}: {h} splits differ from 4h splits"
        row = {"foresight_secs": secs.get(h), "splits": len(sp)}
        scores = {"foresight": [split_mase(vals, s, point.get(i, []), k, m) if i in point else None
                                for i, s in enumerate(sp)]}
        for model in SF_MODELS:
            scores[model] = [split_mase(vals, s, sf[i][model]["forecast"], k, m) if "forecast" in sf[i][model] else None
                             for i, s in enumerate(sp)]
        row["mase"] = {meth: (float(np.mean([x for x in v if x is not None]))
                              if v and all(x is not None for x in v) else None) for meth, v in scores.items()}
        inside = total = 0
        for i, (_, origin) in enumerate(sp):
            a = vals[origin:origin + k]
            for j, x in enumerate(a):
                if np.isfinite(x) and i in lo and np.isfinite(lo[i][j]) and np.isfinite(hi[i][j]):
                    total += 1
                    inside += lo[i][j] <= x <= hi[i][j]
        row["coverage"] = [inside, total]
        result["horizons"][h] = row
    return result


# ---------------------------------------------------------------- report


def geomean(xs):
    return float(np.exp(np.mean(np.log(xs)))) if xs else float("nan")


def report(results, out=sys.stdout):
    lines = []
    say = lambda s="": lines.append(s)  # noqa: E731
    verdicts = []
    for src in sorted({r["source"] for r in results}):
        for h in HORIZONS:
            rows = [r for r in results if r["source"] == src]
            scored = [(r["name"], r["horizons"][h]["mase"]) for r in rows]
            scored = [(n, s) for n, s in scored if s["foresight"] is not None and any(s[m] is not None for m in SF_MODELS)]
            if not scored:
                continue
            means = {meth: np.mean([s[meth] for _, s in scored if s[meth] is not None]) for meth in ("foresight",) + SF_MODELS}
            fl = lambda x: max(x, FLOOR)  # noqa: E731
            ratios = []
            for n, s in scored:
                best = min(s[m] for m in SF_MODELS if s[m] is not None)
                ratios.append((fl(s["foresight"]) / fl(best), n))
            vs_best = geomean([r for r, _ in ratios])
            vs_single = {m: geomean([fl(s["foresight"]) / fl(s[m]) for _, s in scored if s[m] is not None])
                         for m in SF_MODELS}
            worst = max(ratios)
            over125 = sum(r > 1.25 for r, _ in ratios)
            over2 = sum(r > 2.0 for r, _ in ratios)
            inside = sum(r["horizons"][h]["coverage"][0] for r in rows)
            total = sum(r["horizons"][h]["coverage"][1] for r in rows)
            cov = inside / total if total else float("nan")
            say(f"== {src} {h}: {len(scored)} series")
            say("   mean MASE: " + ", ".join(f"{m} {means[m]:.3f}" for m in ("foresight",) + SF_MODELS))
            say(f"   Foresight / best statsforecast in hindsight (geomean): {vs_best:.3f}   [goal <= 0.95]")
            say("   Foresight / each: " + ", ".join(f"{m} {v:.3f}" for m, v in vs_single.items()) + "   [goal <= 0.85]")
            say(f"   worst: {worst[1]} {worst[0]:.2f}x; worse than 1.25x: {over125} ({100 * over125 / len(ratios):.1f}%), "
                f"than 2x: {over2}   [goal <= 5%, none]")
            say(f"   p10-p90 coverage: {100 * cov:.1f}%   [goal 75-85%]")
            ok = (vs_best <= 0.95 and all(v <= 0.85 for v in vs_single.values()) and over125 <= 0.05 * len(ratios)
                  and over2 == 0 and 0.75 <= cov <= 0.85)
            verdicts.append((src, h, ok, {"series": len(scored), "mean_mase": means, "vs_best": vs_best,
                                           "vs_single": vs_single, "worst": worst, "over_1_25": over125,
                                           "over_2": over2, "coverage": cov}))
    say()
    say("goals met: " + ", ".join(f"{s} {h} {'yes' if ok else 'NO'}" for s, h, ok, _ in verdicts))
    print("\n".join(lines), file=out)
    return verdicts


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--data", default=os.environ.get("FORESIGHT_DATA", "../shared/data"))
    ap.add_argument("--out", default=".bench/many")
    ap.add_argument("--origins", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="a fixed eighth of the series (and the aggregates)")
    ap.add_argument("--only", default="", help="comma-separated substrings: only series whose name has one")
    ap.add_argument("--json", default=None, help="write every series' scores here")
    ap.add_argument("--reuse-foresight", action="store_true",
                    help="keep Foresight's forecasts from an earlier run (to fill statsforecast's cache)")
    args = ap.parse_args()
    data = Path(args.data)
    series = [s for src in SOURCES.values() for s in src(data)]
    names = [n for n, _, _ in series]
    keep = set(quick_subset(names)) if args.quick else set(names)
    if args.only:
        keep = {n for n in keep if any(p in n for p in args.only.split(","))}
    jobs = []
    for name, step, pts in series:
        if name in keep:
            t0, v = on_grid(step, pts)
            jobs.append((name, step, t0, v, {"bin": args.bin, "out": args.out, "origins": args.origins,
                                              "reuse_foresight": args.reuse_foresight}))
    # Shortest first: statsforecast's seasonal AutoETS takes minutes per fit on long 5-minute series.
    jobs.sort(key=lambda j: len(j[3]))
    print(f"{len(jobs)} series, {args.origins} origins one day apart, horizons {', '.join(HORIZONS)}", file=sys.stderr)
    results, t = [], time.perf_counter()
    with cf.ProcessPoolExecutor(max_workers=args.jobs) as pool:
        futures = {pool.submit(one_series, j): j[0] for j in jobs}
        for k, f in enumerate(cf.as_completed(futures), 1):
            try:
                results.append(f.result())
            except Exception as e:
                print(f"{futures[f]}: {e}", file=sys.stderr)
                raise
            print(f"[{k}/{len(jobs)} {time.perf_counter() - t:.0f}s] {futures[f]}", file=sys.stderr, flush=True)
    results.sort(key=lambda r: r["name"])
    verdicts = report(results)
    if args.json:
        Path(args.json).write_text(json.dumps({"series": results, "verdicts": verdicts}, indent=1, default=float))


if __name__ == "__main__":
    main()
