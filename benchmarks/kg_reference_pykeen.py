"""Reference DistMult link-prediction numbers from PyKEEN (benchmark only).

Standalone: run it with the separate PyKEEN venv's python, never with the
project's environment; it does not import shardgnn.

    /work/venvs/pykeen/bin/python benchmarks/kg_reference_pykeen.py \
        --dataset-dir ../shared/data/kg/umls --out out/kg_ref_umls.json

The dataset folder holds train.txt, valid.txt and test.txt, one
``head<TAB>relation<TAB>tail`` triple a line. Training defaults to PyKEEN's
LCWA (1-vs-all) loop with reciprocal (inverse) relations so both head and tail
prediction are trained; sLCWA with ``--num-negs`` negatives per positive is
available via ``--loop slcwa``. Evaluation is PyKEEN's RankBasedEvaluator,
filtered with train+valid+test, "both" sides, "realistic" ranks.

Setting up the venv (torch must come from the system, never from pip):

    python -m venv --system-site-packages /work/venvs/pykeen
    echo 'torch==2.13.0' > /tmp/c.txt
    /work/venvs/pykeen/bin/pip install -c /tmp/c.txt pykeen
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import pathlib
import sys
import tempfile
import time
import types
import warnings
from importlib.metadata import version as dist_version

import torch
from pykeen.evaluation import RankBasedEvaluator
from pykeen.models import DistMult
from pykeen.regularizers import LpRegularizer
from pykeen.training import LCWATrainingLoop, SLCWATrainingLoop
from pykeen.training.callbacks import TrainingCallback
from pykeen.triples import TriplesFactory

METRICS = {
    "mrr": "both.realistic.inverse_harmonic_mean_rank",
    "hits@1": "both.realistic.hits_at_1",
    "hits@3": "both.realistic.hits_at_3",
    "hits@10": "both.realistic.hits_at_10",
}


def evaluate(model, triples, filter_triples, batch_size=1024) -> dict:
    """Filtered both-sides realistic MRR/Hits@k of ``model`` on ``triples``."""
    evaluator = RankBasedEvaluator(filtered=True)
    res = evaluator.evaluate(
        model,
        triples,
        additional_filter_triples=filter_triples,
        batch_size=batch_size,
        use_tqdm=False,
    )
    return {k: float(res.get_metric(m)) for k, m in METRICS.items()}


class ValidCurve(TrainingCallback):
    """Evaluate validation MRR every ``every`` epochs (time kept apart)."""

    def __init__(self, every, valid, filter_triples):
        super().__init__()
        self.every = every
        self.valid = valid
        self.filter_triples = filter_triples
        self.curve: list[dict] = []
        self.eval_seconds = 0.0

    def post_epoch(self, epoch, epoch_loss, **kwargs):
        if self.every <= 0 or epoch % self.every:
            return
        t0 = time.perf_counter()
        m = evaluate(self.model, self.valid, self.filter_triples)
        self.eval_seconds += time.perf_counter() - t0
        self.curve.append({"epoch": epoch, "loss": float(epoch_loss), **m})
        print(
            f"  epoch {epoch:4d} loss {epoch_loss:.4f} valid mrr {m['mrr']:.4f} "
            f"h@10 {m['hits@10']:.4f}",
            file=sys.stderr,
            flush=True,
        )


def write_json_atomic(path: pathlib.Path, obj) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(obj, f, indent=2)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dataset-dir", required=True, type=pathlib.Path)
    p.add_argument("--dim", type=int, default=256)
    p.add_argument("--epochs", type=int, default=200)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument(
        "--batch-size",
        type=int,
        default=256,
        help="LCWA: (h,r) pairs per batch; sLCWA: positive triples per batch",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--num-negs", type=int, default=32, help="negatives per positive (sLCWA only)")
    p.add_argument("--loop", choices=["lcwa", "slcwa"], default="lcwa")
    p.add_argument(
        "--loss",
        default="crossentropy",
        help="pykeen loss name: crossentropy, softplus, bcewithlogits, marginranking, nssa",
    )
    p.add_argument(
        "--no-inverse",
        action="store_true",
        help="do not add reciprocal relations (LCWA then trains tail prediction only)",
    )
    p.add_argument(
        "--entity-norm",
        action="store_true",
        help="keep PyKEEN's default unit-L2 entity constraint (off by default)",
    )
    p.add_argument(
        "--reg-weight",
        type=float,
        default=0.0,
        help="L2 regularizer weight on relation embeddings (PyKEEN's DistMult default: 0.1); "
        "0 = none",
    )
    p.add_argument("--label-smoothing", type=float, default=0.0, help="LCWA only")
    p.add_argument(
        "--eval-every",
        type=int,
        default=0,
        help="also log validation MRR every N epochs (time excluded from train_seconds)",
    )
    p.add_argument("--threads", type=int, default=1)
    p.add_argument(
        "--keep-epoch-gc",
        action="store_true",
        help="keep PyKEEN's unconditional gc.collect() after every epoch (~0.5 s each "
        "here; pure overhead, no effect on results); skipped by default",
    )
    p.add_argument("--out", type=pathlib.Path, default=None)
    args = p.parse_args(argv)

    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")
    logging.getLogger("torch_max_mem").setLevel(logging.ERROR)
    logging.getLogger("pykeen").setLevel(logging.ERROR)
    if not args.keep_epoch_gc:
        import pykeen.training.training_loop as _tl

        _tl.gc = types.SimpleNamespace(collect=lambda *a, **k: 0)
    d = args.dataset_dir
    inverse = not args.no_inverse
    train = TriplesFactory.from_path(d / "train.txt", create_inverse_triples=inverse)
    valid = TriplesFactory.from_path(
        d / "valid.txt",
        entity_to_id=train.entity_to_id,
        relation_to_id=train.relation_to_id,
        create_inverse_triples=inverse,
    )
    test = TriplesFactory.from_path(
        d / "test.txt",
        entity_to_id=train.entity_to_id,
        relation_to_id=train.relation_to_id,
        create_inverse_triples=inverse,
    )
    all_true = [train.mapped_triples, valid.mapped_triples, test.mapped_triples]

    model = DistMult(
        triples_factory=train,
        embedding_dim=args.dim,
        loss=args.loss,
        entity_constrainer=torch.nn.functional.normalize if args.entity_norm else None,
        regularizer=LpRegularizer if args.reg_weight > 0 else None,
        regularizer_kwargs=(
            dict(weight=args.reg_weight, p=2.0, normalize=True) if args.reg_weight > 0 else None
        ),
        random_seed=args.seed,
    )
    optimizer = torch.optim.Adam(model.get_grad_params(), lr=args.lr)
    if args.loop == "lcwa":
        loop = LCWATrainingLoop(model=model, triples_factory=train, optimizer=optimizer)
        extra = dict(label_smoothing=args.label_smoothing)
    else:
        loop = SLCWATrainingLoop(
            model=model,
            triples_factory=train,
            optimizer=optimizer,
            negative_sampler="basic",
            negative_sampler_kwargs=dict(num_negs_per_pos=args.num_negs),
        )
        extra = {}

    curve_cb = ValidCurve(
        args.eval_every, valid.mapped_triples, [train.mapped_triples, test.mapped_triples]
    )
    t0 = time.perf_counter()
    losses = loop.train(
        triples_factory=train,
        num_epochs=args.epochs,
        batch_size=args.batch_size,
        use_tqdm=False,
        use_tqdm_batch=False,
        callbacks=[curve_cb],
        **extra,
    )
    train_seconds = time.perf_counter() - t0 - curve_cb.eval_seconds

    # Filter set is train+valid+test in both cases (the evaluated split is
    # added by the evaluator itself).
    valid_m = evaluate(model, valid.mapped_triples, [all_true[0], all_true[2]])
    test_m = evaluate(model, test.mapped_triples, [all_true[0], all_true[1]])

    settings = {
        "dim": args.dim,
        "epochs": args.epochs,
        "lr": args.lr,
        "batch_size": args.batch_size,
        "seed": args.seed,
        "loop": args.loop,
        "loss": args.loss,
        "optimizer": "adam",
        "num_negs": args.num_negs if args.loop == "slcwa" else None,
        "inverse_triples": inverse,
        "entity_norm": args.entity_norm,
        "relation_l2_reg_weight": args.reg_weight,
        "label_smoothing": args.label_smoothing,
        "threads": args.threads,
        "epoch_gc_collect": args.keep_epoch_gc,
        "evaluation": "filtered(train+valid+test), both sides, realistic rank",
        "num_entities": train.num_entities,
        "num_relations": train.real_num_relations,
        "num_train": int(train.num_triples),
        "num_valid": int(valid.num_triples),
        "num_test": int(test.num_triples),
    }
    result = {
        "dataset": d.resolve().name,
        "model": "DistMult",
        "pykeen_version": dist_version("pykeen"),
        "torch_version": torch.__version__,
        "settings": settings,
        "test": test_m,
        "valid": valid_m,
        "train_seconds": round(train_seconds, 2),
        "final_loss": float(losses[-1]) if losses else None,
    }
    if curve_cb.curve:
        result["valid_curve"] = curve_cb.curve
    if args.out is not None:
        write_json_atomic(args.out, result)
    print(
        f"{result['dataset']} DistMult seed={args.seed} dim={args.dim} ep={args.epochs} "
        f"lr={args.lr} {args.loop}/{args.loss} | valid mrr {valid_m['mrr']:.4f} | "
        f"test mrr {test_m['mrr']:.4f} h@1 {test_m['hits@1']:.4f} h@3 {test_m['hits@3']:.4f} "
        f"h@10 {test_m['hits@10']:.4f} | train {train_seconds:.1f}s",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
