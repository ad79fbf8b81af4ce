"""What each way of forming the time encoding's argument ``w * dt + b`` costs (issue 31, TGAT,
TGN and JODIE export): the epoch time of TGN and TGAT with the encoder as it is (``two``: float32,
a multiply then an add, as ONNX Runtime computes it) against the same run with another variant
patched in: ``fused`` (float32 ``addcmul``, one rounding on AVX2/AVX-512 kernels: the encoder
before ONNX export was built) or ``float64`` (formed and brought into [-pi, pi] in float64, cos
in float32). In turns (paired: each round runs every variant, rotating which goes first), with
the largest difference between the float64 and float32 encodings over gaps up to this stream's
span and a month of seconds.

    python benchmarks/bench_time_encoding.py --rounds 4 --epochs 4 --variants two,fused
    python benchmarks/bench_time_encoding.py --rounds 4 --epochs 4 --variants two,float64

Writes ``benchmarks/out/time_encoding.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

from machine import write_report  # noqa: E402
from shardgnn.train.progress import format_table

REPO = Path(__file__).resolve().parents[1]
GRAPH = "synthetic-temporal:nodes=2000,events=40000"


def fused_forward(self, dt: torch.Tensor) -> torch.Tensor:
    """The argument by ``addcmul`` in float32 (one rounding where the kernel fuses)."""
    dt = dt.to(self.lin.weight.dtype).unsqueeze(-1)
    return torch.cos(torch.addcmul(self.lin.bias, dt, self.lin.weight.view(-1)))


TWO_PI_HI = float(np.float32(2.0 * math.pi))
TWO_PI_LO = float(np.float32(2.0 * math.pi - TWO_PI_HI))


def float64_forward(self, dt: torch.Tensor) -> torch.Tensor:
    """The argument in float64, whole turns taken off (2 pi in two float32-exact parts, so an
    ONNX file's constants are the same numbers), then cos in float32: a function of dt alone."""
    weight = self.lin.weight.view(-1).to(torch.float64)
    arg = torch.addcmul(self.lin.bias.to(torch.float64), dt.to(torch.float64)[..., None], weight)
    turns = torch.round(arg.detach() * (0.5 / math.pi))
    return torch.cos(((arg - turns * TWO_PI_HI) - turns * TWO_PI_LO).to(self.lin.weight.dtype))


def child(model: str, variant: str, epochs: int, out: str) -> None:
    """One training run (in its own process, so a patched encoder stays in it)."""
    from shardgnn.cli import main
    from shardgnn.nn import temporal

    patched = {"float64": float64_forward, "fused": fused_forward}.get(variant)
    if patched is not None:
        temporal.TimeEncoder.forward = patched
    argv = ["train", GRAPH, "--model", model, "--epochs", str(epochs), "--quiet"]
    raise SystemExit(main([*argv, "--results", out]))


def encoding_difference(span: float) -> float:
    """The largest |float64 encoding - float32 encoding| of an encoder of width 100 (weights
    as initialised, seed 0) over 10,000 gaps spread over ``[0, span]``."""
    from shardgnn.nn.temporal import TimeEncoder

    torch.manual_seed(0)
    encoder = TimeEncoder(100)
    dt = torch.linspace(0.0, span, 10_000, dtype=torch.float64)
    with torch.no_grad():
        return float((float64_forward(encoder, dt) - encoder(dt)).abs().max())


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--models", default="tgn,tgat")
    parser.add_argument("--variants", default="two,fused", help="the first is the ratios' base")
    parser.add_argument("--child", nargs=3, metavar=("MODEL", "VARIANT", "OUT"))
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "out" / "time_encoding.json"))
    args = parser.parse_args(argv)
    variants = args.variants.split(",")
    if not set(variants) <= {"two", "fused", "float64"} or len(variants) < 2:
        parser.error(f"--variants {args.variants}: two or more of two, fused, float64")
    if args.child:
        child(args.child[0], args.child[1], args.epochs, args.child[2])
    times: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for model in args.models.split(","):
            for r in range(args.rounds):
                order = variants[r % len(variants) :] + variants[: r % len(variants)]
                for variant in order:
                    out = str(Path(tmp) / "r.json")
                    cmd = [sys.executable, __file__, "--epochs", str(args.epochs)]
                    child_cmd = [*cmd, "--child", model, variant, out]
                    subprocess.run(child_cmd, check=True, stdout=subprocess.DEVNULL)
                    epochs = json.loads(Path(out).read_text())["epochs"][1:]  # after warm-up
                    times.setdefault((model, variant), []).append(
                        float(np.mean([e["time_s"] for e in epochs]))
                    )
    rows = []
    base, *others = variants
    for model in args.models.split(","):
        for other in others:
            b, o = np.array(times[(model, base)]), np.array(times[(model, other)])
            ratios = o / b
            row = [model, other, f"{b.mean():.3f}", f"{o.mean():.3f}"]
            rows.append(row + [" / ".join(f"{x:.3f}" for x in ratios), f"{ratios.mean():.3f}"])
    header = ["model", "variant", f"{base} s/epoch", "variant s/epoch", "ratio per round",
              "mean ratio"]  # fmt: skip
    table = format_table(header, rows)
    from shardgnn.graph.datasets import load_temporal_dataset

    g = load_temporal_dataset(GRAPH)
    spans = {"this stream": float(g.t[-1] - g.t[0]), "a month of Unix seconds": 2.6e6}
    diff = {name: encoding_difference(span) for name, span in spans.items()}
    note = "; ".join(
        f"gaps up to {span:,.0f} ({name}): largest |float64 - float32| encoding {diff[name]:.3g}"
        for name, span in spans.items()
    )
    print(table + "\n" + note)
    md = str(Path(args.out).with_suffix(".md"))
    write_report(args.out, md, f"Time encoding variants against {base} on {GRAPH}", table
                 + "\n\n" + note, times={f"{m} {v}": t for (m, v), t in times.items()},
                 encoding_difference=diff)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
