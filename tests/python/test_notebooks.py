"""The notebooks execute headless from a clean checkout, on what the CLI
writes: a small backtest and a small simulator run, made here."""

import json
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
DATA = ROOT.parent / "shared" / "data"


def foresight(*args):
    bin_ = os.environ.get("FORESIGHT_BIN", str(ROOT / "target" / "debug" / "foresight"))
    subprocess.run([bin_, *args], check=True, capture_output=True, timeout=600)


def test_notebooks_execute_on_the_cli_output(tmp_path):
    elb = DATA / "nab_elb_request_count_5min.csv"
    series = str(elb) if elb.exists() else None
    if series is None:  # outside this workspace: a synthetic series in the same format
        series = str(tmp_path / "series.csv")
        with open(series, "w") as f:
            f.write("timestamp,value\n")
            for i in range(12 * 24 * 4):
                f.write(f"{1_700_000_000 + 300 * i},{100 + 50 * ((i % 288) / 288)}\n")
    foresight("backtest", "--csv", series, "--horizon", "1h", "--origins", "3",
              "--model", "snaive-day,holt-winters", "--out", str(tmp_path / "backtest" / "small"))
    foresight("simulate", "--synthetic", "--days", "2", "--warmup", "1d",
              "--out", str(tmp_path / "simulate" / "synthetic"))
    env = dict(os.environ, FORESIGHT_NB_DATA=str(tmp_path))
    out = subprocess.run([sys.executable, str(ROOT / "notebooks" / "run.py")], env=env,
                         capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout + out.stderr
    for name, figures in [("forecast_accuracy.ipynb", 2), ("policy_comparison.ipynb", 2)]:
        nb = json.loads((tmp_path / name).read_text())
        errors = [o for c in nb["cells"] for o in c.get("outputs", []) if o.get("output_type") == "error"]
        assert not errors, errors
        images = sum(1 for c in nb["cells"] for o in c.get("outputs", []) if "image/png" in o.get("data", {}))
        assert images >= figures, f"{name}: {images} figures"
        text = "".join("".join(o.get("text", "")) for c in nb["cells"] for o in c.get("outputs", []))
        assert ("predictive" in text) if name.startswith("policy") else ("holt-winters" in text), text
