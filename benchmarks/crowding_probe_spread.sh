#!/bin/bash
# BENCHMARKS 32n: the crowding probe's run-to-run spread. ROUNDS (5) times, interleaved: the probe
# (fullgraph.rates.measure_crowding, 2 cores, latency 0) of the tree before and this one, at 2
# and 4 workers; per run, each burst's ms -> the ms each collective call costs beyond the burst.
#   git worktree add /tmp/before <commit before>
#   BEFORE_SRC=/tmp/before/src bash benchmarks/crowding_probe_spread.sh > out.txt
set -euo pipefail
cd "$(dirname "$0")/.."
before=${BEFORE_SRC:?set BEFORE_SRC to the src folder of the tree before}
probe='import json, sys
from shardgnn.fullgraph.rates import measure_crowding
if __name__ == "__main__":
    got = measure_crowding(int(sys.argv[1]), 2, 0.0)
    print(json.dumps({f"{b * 1e3:.1f}": round(v * 1e3, 2) for b, v in got.items()}))'
for i in $(seq "${ROUNDS:-5}"); do
  for workers in 2 4; do
    for tree in before after; do
      src=$PWD/src
      [ $tree = before ] && src=$before
      echo "$tree P=$workers $i $(PYTHONPATH=$src python -c "$probe" "$workers" 2>/dev/null | tail -1)"
    done
  done
done
