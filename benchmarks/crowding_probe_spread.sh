#!/bin/bash
# The run-to-run spread of a `shardgnn plan --calibrate` probe. ROUNDS (5) times, interleaved, the
# tree before and this one, 2 cores, latency 0:
#   PROBE=crowding (BENCHMARKS 32n)  fullgraph.rates.measure_crowding at 2 and 4 workers; per
#       run, each burst's ms -> the ms each collective call costs beyond the burst
#   PROBE=step (BENCHMARKS 32q, 32s)  fullgraph.rates.measure_crowded_step at 2, 3 and 4 workers:
#       the factor, on the workload `shardgnn plan` calibrates for 32o's table (synthetic 20,000
#       nodes, half of them training nodes, GraphSAGE hidden 256, fanouts 10,10, batch 512)
#   git worktree add /tmp/before <commit before>
#   BEFORE_SRC=/tmp/before/src PROBE=step bash benchmarks/crowding_probe_spread.sh > out.txt
set -euo pipefail
cd "$(dirname "$0")/.."
before=${BEFORE_SRC:?set BEFORE_SRC to the src folder of the tree before}
case "${PROBE:-crowding}" in
  crowding)
    runs="2 4"
    probe='import json, sys
from shardgnn.fullgraph.rates import measure_crowding
if __name__ == "__main__":
    got = measure_crowding(int(sys.argv[1]), 2, 0.0)
    print(json.dumps({f"{b * 1e3:.1f}": round(v * 1e3, 2) for b, v in got.items()}))' ;;
  step)
    runs="2 3 4"
    probe='import sys
from shardgnn.fullgraph.config import PlanConfig
from shardgnn.fullgraph.plan import workload
from shardgnn.fullgraph.rates import measure_crowded_step
from shardgnn.graph.datasets import load_dataset
if __name__ == "__main__":
    graph = load_dataset("synthetic:nodes=20000,train=0.5")
    plan = PlanConfig(workers=(2, 3, 4), model="sage", hidden=256, layers=2, fanouts=(10, 10),
                      batch_size=512, calibrate=True, workers_per_host=4)
    print(round(measure_crowded_step(workload(graph, plan, 512), int(sys.argv[1]), 2, 0.0, 1e10), 2))' ;;
  *) echo "PROBE is crowding or step, not ${PROBE}" >&2; exit 2 ;;
esac
for i in $(seq "${ROUNDS:-5}"); do
  for workers in $runs; do
    for tree in before after; do
      src=$PWD/src
      [ $tree = before ] && src=$before
      echo "$tree P=$workers $i $(PYTHONPATH=$src python -c "$probe" "$workers" 2>/dev/null | tail -1)"
    done
  done
done
