#!/usr/bin/env bash
# Runs DistDGL (dgl_dist_sage.py, DGL venv $PY, default $PEERS/dglvenv/bin/python; build it with
# benchmarks/peers/setup_dgl.sh) as NUM_MACHINES machines of 1 server + 1 trainer each
# (distdgl_machine.sh). compare.py calls this script for its dist2 and netns comparisons.
#   TRANSPORT=loopback (default): the machines are simulated on this host, each in its own mount
#     namespace with a private /dev/shm, all on the loopback network (127.0.0.1).
#   TRANSPORT=netns: each machine is one "host" of benchmarks/netns_hosts.py (its own network,
#     UTS and mount namespace; 2 hosts joined by a veth pair, addresses $SUBNET.1, $SUBNET.2),
#     so every byte between machines crosses the veth, as shardgnn's netns run does. The
#     namespaces are created for the run and removed afterwards. SG_PY (default python3) runs
#     netns_hosts.py.
#   PY=$PEERS/dglvenv/bin/python PART_CONFIG=$PEERS/parts_metis/synth.json \
#     bash benchmarks/peers/run_distdgl.sh --epochs 3 --fanouts 10,10,10 --batch 1024
# (partition first with dgl_partition.py; pass --classes C when the graph has C != 40 classes)
# Needs root (unshare -m, mount tmpfs; ip netns).
set -u
PEERS=${PEERS:-$HOME/peers}   # scratch folder: venvs, graphs, partitions, logs
HERE=$(cd "$(dirname "$0")" && pwd)
export PY=${PY:-$PEERS/dglvenv/bin/python}
export PART_CONFIG=${PART_CONFIG:?set PART_CONFIG}
export NUM_MACHINES=${NUM_MACHINES:-2}
BASE_PORT=${BASE_PORT:-30050}
export MASTER_PORT=${MASTER_PORT:-29517}
export THREADS=${THREADS:-1}           # OMP threads per trainer and per server
export SHM_SIZE=${SHM_SIZE:-10g}
ISOLATE=${ISOLATE:-1}           # loopback, 0: no private /dev/shm, no machine-id override (shows the clash)
TRANSPORT=${TRANSPORT:-loopback}
SUBNET=${SUBNET:-10.78.0}
export LOGDIR=${LOGDIR:-$PEERS/distdgl_logs}
mkdir -p "$LOGDIR"
export IPC="$LOGDIR/ip_config.txt"
: > "$IPC"
rc=0
if [ "$TRANSPORT" = netns ]; then
  [ "$NUM_MACHINES" = 2 ] || { echo "run_distdgl.sh: TRANSPORT=netns joins exactly 2 machines" >&2; exit 2; }
  for ((m = 0; m < NUM_MACHINES; m++)); do echo "$SUBNET.$((m + 1)) $BASE_PORT" >> "$IPC"; done
  # netns_hosts.py gives each host a private mount namespace (so a private /dev/shm) and
  # substitutes {index}; DGL finds each machine's id from its own interface address.
  MASTER_ADDR=$SUBNET.1 PRIVATE_SHM=1 SIM_MACHINE=0 "${SG_PY:-python3}" "$HERE/../netns_hosts.py" run \
      --prefix sgdgl --subnet "$SUBNET" --fault none --fault-after 0 \
      --deadline "${DEADLINE:-7200}" --logs "$LOGDIR/hosts" --json "$LOGDIR/netns.json" \
      -- bash "$HERE/distdgl_machine.sh" "{index}" "$@" || rc=1
  # the harness exits 0 whatever the hosts did; their exit codes are in its JSON
  "${SG_PY:-python3}" -c 'import json, sys
codes = [h["exit_code"] for h in json.load(open(sys.argv[1]))["hosts"]]
sys.exit(0 if codes and all(c == 0 for c in codes) else 1)' "$LOGDIR/netns.json" || rc=1
elif [ "$TRANSPORT" = loopback ]; then
  for ((m = 0; m < NUM_MACHINES; m++)); do echo "127.0.0.1 $((BASE_PORT + 10 * m))" >> "$IPC"; done
  pids=()
  for ((m = 0; m < NUM_MACHINES; m++)); do
    if [ "$ISOLATE" = 1 ]; then
      MASTER_ADDR=127.0.0.1 PRIVATE_SHM=1 SIM_MACHINE=1 \
          unshare -m --propagation private bash "$HERE/distdgl_machine.sh" "$m" "$@" &
    else
      MASTER_ADDR=127.0.0.1 PRIVATE_SHM=0 SIM_MACHINE=0 bash "$HERE/distdgl_machine.sh" "$m" "$@" &
    fi
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
else
  echo "run_distdgl.sh: TRANSPORT must be loopback or netns, not '$TRANSPORT'" >&2; exit 2
fi
grep -E "^\[rank|^epoch|^RESULT" "$LOGDIR/trainer0.log"; grep -h "^\[rank" "$LOGDIR"/trainer[1-9].log
exit $rc
