"""statsforecast's fit + forecast time on the series `cargo bench --bench forecast_fit` used.

    python benches/statsforecast_fit.py DIR

DIR holds series.csv and foresight.json from that bench (FORESIGHT_FIT_OUT).
Prints both tools' median times and the ratios; writes DIR/compare.json.
"""

import csv
import json
import statistics
import sys
import time
import warnings
from pathlib import Path

import numpy as np

warnings.filterwarnings("ignore")

from statsforecast.models import MSTL, SeasonalNaive  # noqa: E402


def median_ms(runs, fn, warm=True):
    if warm:
        fn()  # warm-up
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def main():
    d = Path(sys.argv[1])
    ours = json.loads((d / "foresight.json").read_text())
    with open(d / "series.csv") as f:
        y = np.array([float(r["value"]) if r["value"] else np.nan for r in csv.DictReader(f)])
    ok = np.isfinite(y)
    y = np.interp(np.arange(len(y)), np.arange(len(y))[ok], y[ok])
    h, (day, week) = ours["horizon"], ours["seasons"][:2]
    # MSTL takes minutes here: one timed run (the imports are already done).
    # AutoETS with a 1440-step season is left out: it had not finished after
    # fifteen minutes on this series.
    theirs = {}
    theirs["SeasonalNaive"] = median_ms(ours["runs"], lambda: SeasonalNaive(season_length=day).forecast(y=y, h=h))
    print(f"statsforecast SeasonalNaive: {theirs['SeasonalNaive']:.2f} ms", flush=True)
    theirs["MSTL"] = median_ms(1, lambda: MSTL(season_length=[day, week]).forecast(y=y, h=h), warm=False)
    print(f"statsforecast MSTL: {theirs['MSTL']:.0f} ms", flush=True)
    fs = ours["median_ms"]
    print(f"{len(y)} points, horizon {h}, seasons {day} and {week}")
    print(f"{'':34} {'median ms':>10}")
    for name, ms in fs.items():
        print(f"  foresight {name:<23} {ms:>10.2f}")
    for name, ms in theirs.items():
        print(f"  statsforecast {name:<19} {ms:>10.2f}")
    pairs = [("mstl", "MSTL"), ("auto-refit", "MSTL"), ("auto", "MSTL"), ("snaive-week", "SeasonalNaive")]
    print()
    for a, b in pairs:
        print(f"  statsforecast {b} / foresight {a}: {theirs[b] / fs[a]:.1f}x")
    (d / "compare.json").write_text(json.dumps({"foresight_ms": fs, "statsforecast_ms": theirs}, indent=2))


if __name__ == "__main__":
    main()
