#!/usr/bin/env bash
# Runs dgl_dist_sage.py in the DGL venv ($PY, default $PEERS/dglvenv/bin/python; build it with
# benchmarks/peers/setup_dgl.sh). compare.py calls this script for its dist2 comparison.
# DistDGL on ONE host as NUM_MACHINES simulated machines, each = 1 server + 1 trainer.
# Each simulated machine gets its own mount namespace with a private /dev/shm
# (DGL servers put their partition in shared memory under fixed names, so two
# servers on one /dev/shm would clash); all share the loopback network.
#   PY=$PEERS/dglvenv/bin/python PART_CONFIG=$PEERS/parts_metis/synth.json \
#     bash benchmarks/peers/run_distdgl.sh --epochs 3 --fanouts 10,10,10 --batch 1024
# (partition first with dgl_partition.py; pass --classes C when the graph has C != 40 classes)
# Needs root (unshare -m, mount tmpfs).
set -u
PEERS=${PEERS:-$HOME/peers}   # scratch folder: venvs, graphs, partitions, logs
HERE=$(cd "$(dirname "$0")" && pwd)
PY=${PY:-$PEERS/dglvenv/bin/python}
PART_CONFIG=${PART_CONFIG:?set PART_CONFIG}
NUM_MACHINES=${NUM_MACHINES:-2}
BASE_PORT=${BASE_PORT:-30050}
MASTER_PORT=${MASTER_PORT:-29517}
THREADS=${THREADS:-1}           # OMP threads per trainer and per server
SHM_SIZE=${SHM_SIZE:-10g}
ISOLATE=${ISOLATE:-1}           # 0: no private /dev/shm, no machine-id override (shows the clash)
LOGDIR=${LOGDIR:-$PEERS/distdgl_logs}
mkdir -p "$LOGDIR"
IPC="$LOGDIR/ip_config.txt"
: > "$IPC"
for ((m = 0; m < NUM_MACHINES; m++)); do echo "127.0.0.1 $((BASE_PORT + 10 * m))" >> "$IPC"; done
COMMON="DGL_DIST_MODE=distributed DGL_NUM_SERVER=1 DGL_NUM_CLIENT=$NUM_MACHINES DGL_CONF_PATH=$PART_CONFIG DGL_IP_CONFIG=$IPC DGL_GRAPH_FORMAT=csc OMP_NUM_THREADS=$THREADS"
ARGS="--ip-config $IPC --part-config $PART_CONFIG $*"
pids=()
for ((m = 0; m < NUM_MACHINES; m++)); do
  if [ "$ISOLATE" = 1 ]; then NS="unshare -m --propagation private"; MNT="mount -t tmpfs -o size=$SHM_SIZE tmpfs /dev/shm || exit 1"; SIM="SIM_MACHINE_ID=$m"
  else NS=""; MNT=":"; SIM=""; fi
  $NS bash -c "
    $MNT
    env $COMMON DGL_ROLE=server DGL_SERVER_ID=$m $PY $HERE/dgl_dist_sage.py $ARGS > $LOGDIR/server$m.log 2>&1 &
    env $COMMON DGL_ROLE=client DGL_NUM_SAMPLER=0 DGL_GROUP_ID=0 $SIM \
        RANK=$m WORLD_SIZE=$NUM_MACHINES MASTER_ADDR=127.0.0.1 MASTER_PORT=$MASTER_PORT \
        $PY $HERE/dgl_dist_sage.py $ARGS > $LOGDIR/trainer$m.log 2>&1
    rc=\$?
    wait
    exit \$rc
  " &
  pids+=($!)
done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=1; done
cat "$LOGDIR"/trainer0.log | grep -E "^\[rank|^epoch|^RESULT" ; grep -h "^\[rank" "$LOGDIR"/trainer[1-9].log
exit $rc
