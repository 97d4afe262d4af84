"""Execute the notebooks headless (nbclient) against the data in
$FORESIGHT_NB_DATA; write the executed copies there. Exit 1 on any cell error.
Usage: python notebooks/run.py [NOTEBOOK ...]"""
import os, pathlib, sys

import nbformat
from nbclient import NotebookClient

here = pathlib.Path(__file__).resolve().parent
data = pathlib.Path(os.environ.get("FORESIGHT_NB_DATA", here / "out")).resolve()
os.environ["FORESIGHT_NB_DATA"] = str(data)
names = sys.argv[1:] or ["forecast_accuracy.ipynb", "policy_comparison.ipynb"]
for name in names:
    nb = nbformat.read(here / name, as_version=4)
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(here)}}).execute()
    images = sum(1 for c in nb.cells for o in c.get("outputs", []) if "image/png" in o.get("data", {}))
    out = data / name
    nbformat.write(nb, out)
    print(f"{name}: executed, {images} figures -> {out}")
