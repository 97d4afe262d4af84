"""Foresight's forecasters against statsforecast on exactly the same splits.

Reads what `foresight backtest --out DIR` wrote (series.csv, splits.csv,
forecasts.csv, summary.json), fits statsforecast's SeasonalNaive, AutoETS and
MSTL at every split on the same training window, and scores every forecast,
Foresight's and statsforecast's, with one MASE function, so the comparison
cannot drift with two implementations of the metric.

    python benches/statsforecast_compare.py --json out.json DIR [DIR ...]

Run through scripts/compare-statsforecast, which makes the directories.
"""

import argparse
import csv
import json
import math
import sys
import time
import warnings
from pathlib import Path

import numpy as np

warnings.filterwarnings("ignore")

import statsforecast  # noqa: E402
from statsforecast.models import MSTL, AutoETS, SeasonalNaive  # noqa: E402


def read_dir(d: Path):
    summary = json.loads((d / "summary.json").read_text())
    with open(d / "series.csv") as f:
        values = np.array([float(r["value"]) if r["value"] else np.nan for r in csv.DictReader(f)])
    with open(d / "splits.csv") as f:
        splits = [(int(r["train_start"]), int(r["origin"]), int(r["test_end"])) for r in csv.DictReader(f)]
    foresight = {}
    with open(d / "forecasts.csv") as f:
        for r in csv.DictReader(f):
            foresight.setdefault(r["model"], {}).setdefault(int(r["split"]), []).append(float(r["forecast"]))
    return summary, values, splits, foresight


def fill_gaps(y: np.ndarray) -> np.ndarray:
    """Linear interpolation, edges held: what Foresight fits on too."""
    ok = np.isfinite(y)
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


def mase(values, splits, forecasts, m):
    """Mean over splits of MAE / in-sample seasonal-naive MAE; None if any split is missing."""
    scores = []
    for i, (start, origin, end) in enumerate(splits):
        f = forecasts.get(i)
        if f is None:
            return None
        actual = values[origin:end]
        ok = np.isfinite(actual)
        if not ok.any():
            continue
        err = np.abs(actual[ok] - np.asarray(f)[ok]).mean()
        scores.append(err / mase_scale(values[start:origin], m))
    return float(np.mean(scores)) if scores else None


def statsforecast_models(periods, n_train):
    day = periods[0]
    usable = [p for p in periods if n_train >= 2 * p]
    return {
        "SeasonalNaive": SeasonalNaive(season_length=day),
        "AutoETS": AutoETS(season_length=day),
        # MSTL with the same seasons Foresight uses (those with two full cycles); trend by its default AutoETS.
        "MSTL": MSTL(season_length=usable or [day]),
    }


def oracles(values, splits, summary):
    """Forecasts that see the test windows: not rivals, but how low MASE can go.

    - oracle-profile: a time-of-day (and, with two weeks, time-of-week) profile,
      10 and 6 Fourier pairs on log(1 + y), fitted on the whole series, test
      windows included: the best any fixed seasonal shape can do.
    - oracle-median-1h: the median of the actual values in the hour centred on
      each point: knows the local level, only the noise around it is left.
    """
    y = fill_gaps(values)
    step, n = summary["step_secs"], len(y)
    cols = [np.ones(n)]
    for period, k in zip(summary["seasons"], (10, 6)):
        if n >= 2 * period:
            ph = 2 * np.pi * (np.arange(n) % period) / period
            cols += [f(j * ph) for j in range(1, k + 1) for f in (np.sin, np.cos)]
    x = np.column_stack(cols)
    beta = np.linalg.lstsq(x, np.log1p(np.maximum(y, 0)), rcond=None)[0]
    profile = np.expm1(x @ beta)
    half = max(1, 1800 // step)
    med = np.array([np.nanmedian(values[max(0, i - half):i + half + 1]) for i in range(n)])
    return {
        "oracle-profile": {i: profile[o:e] for i, (_, o, e) in enumerate(splits)},
        "oracle-median-1h": {i: med[o:e] for i, (_, o, e) in enumerate(splits)},
    }


def run_dir(d: Path):
    summary, values, splits, foresight = read_dir(d)
    periods = summary["seasons"]
    h = summary["horizon"]
    # statsforecast's forecasts depend only on the series and the splits:
    # kept beside them, so re-scoring after a Foresight change takes seconds.
    cache = d / "statsforecast_cache.json"
    key = {"splits": [list(s) for s in splits], "horizon": h, "seasons": periods, "version": statsforecast.__version__}
    sf_forecasts, sf_secs = {}, {}
    if cache.exists():
        cached = json.loads(cache.read_text())
        if cached["key"] == key:
            sf_forecasts = {m: {int(i): f for i, f in fs.items()} for m, fs in cached["forecasts"].items()}
            sf_secs = cached["secs"]
    # Written after every split, so an interrupted run resumes where it stopped
    # (statsforecast takes minutes per split on the 5-minute traces).
    for i, (start, origin, end) in enumerate(splits):
        train = fill_gaps(values[start:origin])
        for name, model in statsforecast_models(periods, len(train)).items():
            if i in sf_forecasts.get(name, {}):
                continue
            t0 = time.perf_counter()
            try:
                f = model.forecast(y=train, h=h)["mean"]
            except Exception as e:  # a model that cannot fit a split is reported, not hidden
                print(f"{d.name}: statsforecast {name} failed at split {i}: {e}", file=sys.stderr)
                continue
            sf_secs.setdefault(name, []).append(time.perf_counter() - t0)
            sf_forecasts.setdefault(name, {})[i] = [float(x) for x in f]
            cache.write_text(json.dumps({"key": key, "forecasts": sf_forecasts, "secs": sf_secs}))
        print(f"{d.name}: statsforecast split {i + 1}/{len(splits)} done", file=sys.stderr, flush=True)
    return score_dir(d, summary, values, splits, foresight, sf_forecasts, sf_secs)


def score_dir(d, summary, values, splits, foresight, sf_forecasts, sf_secs):
    periods, h = summary["seasons"], summary["horizon"]
    day = periods[0]
    rows = []
    for name, f in foresight.items():
        rows.append({"tool": "foresight", "model": name, "mase": mase(values, splits, f, day)})
    for name, f in sf_forecasts.items():
        secs = sf_secs[name]
        rows.append({"tool": "statsforecast", "model": name, "mase": mase(values, splits, f, day),
                     "fit_ms": 1e3 * sum(secs) / len(secs)})
    for name, f in oracles(values, splits, summary).items():
        rows.append({"tool": "oracle", "model": name, "mase": mase(values, splits, f, day)})
    # Foresight's own MASE for `auto` must agree with ours: same metric, same splits.
    own = {r["model"]: r["mase"] for r in summary["results"]}
    ours = next(r["mase"] for r in rows if r["tool"] == "foresight" and r["model"] == "auto")
    assert ours is not None and math.isclose(own["auto"], ours, rel_tol=1e-6), (own["auto"], ours)
    return {"name": d.name, "points": summary["points"], "step_secs": summary["step_secs"], "horizon": h,
            "seasons": periods, "origins": len(splits), "rows": rows}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dirs", nargs="+", type=Path)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    results = [run_dir(d) for d in args.dirs]
    print(f"{'series / horizon':<28} {'auto':>7} {'best Foresight single':>28} {'best statsforecast':>26} {'auto / best sf':>15}")
    ok = True
    for r in results:
        fs = [x for x in r["rows"] if x["tool"] == "foresight" and x["mase"] is not None]
        sf = [x for x in r["rows"] if x["tool"] == "statsforecast" and x["mase"] is not None]
        auto = next(x["mase"] for x in fs if x["model"] == "auto")
        best_single = min((x for x in fs if x["model"] != "auto"), key=lambda x: x["mase"])
        best_sf = min(sf, key=lambda x: x["mase"])
        ratio = auto / best_sf["mase"]
        r["auto_mase"], r["best_statsforecast"], r["ratio"] = auto, best_sf, ratio
        ok &= ratio <= 0.9
        single = "%s %.3f" % (best_single["model"], best_single["mase"])
        sfbest = "%s %.3f" % (best_sf["model"], best_sf["mase"])
        print(f"{r['name']:<28} {auto:>7.3f} {single:>28} {sfbest:>26} {ratio:>15.3f}")
    print()
    for r in results:
        cells = ", ".join(f"{x['tool'][:2]}:{x['model']}={x['mase']:.3f}" for x in sorted(
            (x for x in r["rows"] if x["mase"] is not None), key=lambda x: x["mase"]))
        print(f"{r['name']}: {cells}")
    print(f"\ngoal auto <= 0.9 x best statsforecast on every series: {'met' if ok else 'NOT met'}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
