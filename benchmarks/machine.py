"""What every benchmark records about the machine it ran on, and how it writes its report
(imported by the bench_* scripts)."""

from __future__ import annotations

import importlib
import os
import platform
import subprocess
import sys


def machine_info() -> dict:
    """Cores, platform, and the versions of the numeric stack (absent packages are ``None``)."""
    info = {
        "nproc": os.cpu_count(),
        "affinity_cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "platform": platform.platform(),
        "processor": platform.processor(),
        "python": sys.version.split()[0],
        "loadavg": list(os.getloadavg()),
    }
    for name in ("torch", "numpy", "scipy", "numba", "pymetis"):
        try:
            module = importlib.import_module(name)
            info[name] = str(getattr(module, "__version__", getattr(module, "version", None)))
        except Exception:  # noqa: BLE001 - informational only
            info[name] = None
    try:
        import numba
        import torch

        info["numba_threads_max"] = numba.config.NUMBA_NUM_THREADS
        info["numba_threading_layer"] = numba.config.THREADING_LAYER
        info["torch_parallel_info"] = torch.__config__.parallel_info().splitlines()[:6]
    except Exception:  # noqa: BLE001
        pass
    return info


def write_report(json_path: str, md_path: str, header: str, table: str, **data) -> None:
    """The benchmark's JSON (the command, this machine, ``data``) and its Markdown (``header``,
    then ``table``), each written atomically."""
    import sys

    from shardgnn.atomic import atomic_open, save_json

    report = {"command": " ".join([sys.executable, *sys.argv]), "machine": machine_info(), **data}
    save_json(json_path, report)
    with atomic_open(md_path, "w") as fh:
        fh.write(f"{header}\n\n{table}\n")


def publish(
    json_path: str, md_path: str, header: str, columns: list[str], rows: list, **data
) -> int:
    """Print the table of ``columns`` x ``rows`` and write the reports (:func:`write_report`);
    returns 0, the script's exit code."""
    from shardgnn.train.progress import format_table

    table = format_table(columns, rows)
    print(table)
    write_report(json_path, md_path, header, table, **data)
    return 0


def shardgnn(*args: str) -> None:
    """Run the ``shardgnn`` command line in a child process (this interpreter); fail loudly."""
    subprocess.run([sys.executable, "-m", "shardgnn", *args], check=True)


def run_logged(cmd: list[str], log) -> None:
    """Run ``cmd`` with its output in the file ``log``; on failure print the log's tail and
    end the benchmark with the command (a benchmark never goes on from a failed run)."""
    from pathlib import Path

    log = Path(log)
    with log.open("w") as fh:
        done = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT)
    if done.returncode:
        print(log.read_text()[-3000:], file=sys.stderr)
        raise SystemExit(f"failed: {' '.join(cmd)}")
