#!/bin/bash
# BENCHMARKS 32c, 32f, 32g and 32p (TRAIN_ARGS="--mode full"), two workers: DATASET (coauthor-physics) in 2 METIS parts, TASK
# (node; link: the partitions hold the training graph and the split), 1 epoch with TRAIN_ARGS
# (none; 32g, 32i: a cache), the tree before and this one in turn, ROUNDS (3) times; per run the
# wall time, the epoch's stages, each worker's peak RSS, the test metric (accuracy; link
# prediction's AUC), the cache's hit rate and bytes per worker (and how it holds its rows), and
# the MB the workers received fetching features (fetch, eval, cache_setup).
#   git worktree add /tmp/before <commit before>
#   BEFORE_SRC=/tmp/before/src bash benchmarks/sparse_input_workers.sh > out.txt
#   BEFORE_SRC=/tmp/before/src DATASET=coauthor-cs TASK=link ROUNDS=2 \
#       bash benchmarks/sparse_input_workers.sh > out.txt
#   BEFORE_SRC=/tmp/before/src DATASET=coauthor-cs TRAIN_ARGS="--host-sharing off \
#       --cache-policy presample --cache-size 25%" bash benchmarks/sparse_input_workers.sh
#   BEFORE_SRC=/tmp/before/src TRAIN_ARGS="--host-sharing off --fetch-bits 8 --error-feedback" \
#       ROUNDS=2 bash benchmarks/sparse_input_workers.sh
#   BEFORE_SRC=/tmp/before/src TRAIN_ARGS="--mode full" bash benchmarks/sparse_input_workers.sh
set -euo pipefail
cd "$(dirname "$0")/.."
before=${BEFORE_SRC:?set BEFORE_SRC to the src folder of the tree before}
data=${DATA_DIR:-../shared/data}
dataset=${DATASET:-coauthor-physics}
task=${TASK:-node}
read -r -a train_args <<< "${TRAIN_ARGS:-}"
out=${OUT_DIR:-/tmp/sparse-input-workers}/$dataset-$task
mkdir -p "$out"
[ -d "$out/cp2" ] || shardgnn partition "$dataset" --parts 2 --task "$task" --out "$out/cp2" \
    --data-dir "$data" > /dev/null
for i in $(seq "${ROUNDS:-3}"); do
  for tree in before after; do
    src=$PWD/src
    [ $tree = before ] && src=$before
    start=$(date +%s.%N)
    PYTHONPATH=$src shardgnn train --partitions "$out/cp2" --task "$task" --epochs 1 --quiet \
        "${train_args[@]}" --results "$out/$tree-$i.json" > "$out/$tree-$i.log" 2>&1
    end=$(date +%s.%N)
    python - "$out/$tree-$i.json" "$tree" "$i" "$start" "$end" <<'PY'
import json, sys
path, tree, i, start, end = sys.argv[1:]
r = json.load(open(path))
e = r["epochs"][0]
cache = r.get("cache", {})  # full-graph training has none
stages = {k: round(v, 2) for k, v in e["stages"].items()}
print(tree, i, "wall", round(float(end) - float(start), 1), "epoch", round(e["time_s"], 2),
      "stages", stages, "peak", r["peak_memory_mb"], "test", r["test_acc"],
      "hit", cache.get("hit_rate"), "sparse workers", cache.get("sparse_batch_workers"),
      "cache MB/worker", round(cache.get("capacity_mb", 0.0), 1), cache.get("cache_layout"),
      "residual MB", round(r.get("residual_mb", 0.0), 1),
      "MB received", {k: round(v["bytes_recv"] / 1e6, 1) for k, v in r.get("comm", {}).items()
                      if k in ("fetch", "eval", "cache_setup", "spmm")})
PY
  done
done
