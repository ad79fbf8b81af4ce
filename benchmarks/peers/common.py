# Runs in the DGL venv built by benchmarks/peers/setup_dgl.sh ($HOME/peers/dglvenv/bin/python);
# imported by the other scripts of benchmarks/peers/ (numpy only).
"""Helpers shared by the benchmark scripts (framework independent)."""

import json
import statistics

import numpy as np


def load_npz(path):
    z = np.load(path)
    return {k: z[k] for k in z.files}


def summarize(name, times, extra=None):
    """Print one JSON line: per-run seconds and their median."""
    rec = {
        "bench": name,
        "runs_s": [round(t, 3) for t in times],
        "median_s": round(statistics.median(times), 3),
    }
    if extra:
        rec.update(extra)
    print("RESULT " + json.dumps(rec), flush=True)
    return rec
