#!/bin/bash
# BENCHMARKS 32q: the crowded-step probe's run-to-run spread. ROUNDS (5) times, interleaved: the
# probe (fullgraph.rates.measure_crowded_step, 2 cores, latency 0) of the tree before and this one
# at 2, 3 and 4 workers, on the workload `shardgnn plan` calibrates for 32o's table (synthetic
# 20,000 nodes, half of them training nodes, GraphSAGE hidden 256, fanouts 10,10, batch 512).
#   git worktree add /tmp/before <commit before>
#   BEFORE_SRC=/tmp/before/src bash benchmarks/crowded_step_spread.sh > out.txt
set -euo pipefail
cd "$(dirname "$0")/.."
before=${BEFORE_SRC:?set BEFORE_SRC to the src folder of the tree before}
probe='import sys
from shardgnn.fullgraph.config import PlanConfig
from shardgnn.fullgraph.plan import workload
from shardgnn.fullgraph.rates import measure_crowded_step
from shardgnn.graph.datasets import load_dataset
if __name__ == "__main__":
    graph = load_dataset("synthetic:nodes=20000,train=0.5")
    plan = PlanConfig(workers=(2, 3, 4), model="sage", hidden=256, layers=2, fanouts=(10, 10),
                      batch_size=512, calibrate=True, workers_per_host=4)
    print(round(measure_crowded_step(workload(graph, plan, 512), int(sys.argv[1]), 2, 0.0, 1e10), 2))'
for i in $(seq "${ROUNDS:-5}"); do
  for workers in 2 3 4; do
    for tree in before after; do
      src=$PWD/src
      [ $tree = before ] && src=$before
      echo "$tree P=$workers $i $(PYTHONPATH=$src python -c "$probe" "$workers" 2>/dev/null | tail -1)"
    done
  done
done
