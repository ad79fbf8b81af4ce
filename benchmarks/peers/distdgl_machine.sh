#!/usr/bin/env bash
# One DistDGL machine: 1 server + 1 trainer of dgl_dist_sage.py (DGL venv). Called by
# run_distdgl.sh, once per machine, either inside a private mount namespace on this host
# (TRANSPORT=loopback) or on one network-namespace "host" of benchmarks/netns_hosts.py
# (TRANSPORT=netns). Usage: distdgl_machine.sh MACHINE_ID [dgl_dist_sage.py args...]
# Environment (set by run_distdgl.sh): PY PART_CONFIG IPC NUM_MACHINES MASTER_ADDR MASTER_PORT
# THREADS SHM_SIZE LOGDIR; PRIVATE_SHM=1 mounts a private tmpfs on /dev/shm (the caller must
# already be in a private mount namespace: DGL servers put their partition in /dev/shm under
# fixed names, so two servers on one /dev/shm would clash); SIM_MACHINE=1 tells the trainer its
# machine id (DGL finds it by matching interface IPs against ip_config, which cannot tell two
# machines on 127.0.0.1 apart; on separate network namespaces it finds it by itself).
set -u
m=$1; shift
HERE=$(cd "$(dirname "$0")" && pwd)
if [ "${PRIVATE_SHM:-1}" = 1 ]; then mount -t tmpfs -o size="$SHM_SIZE" tmpfs /dev/shm || exit 1; fi
SIM=""; if [ "${SIM_MACHINE:-1}" = 1 ]; then SIM="SIM_MACHINE_ID=$m"; fi
COMMON="DGL_DIST_MODE=distributed DGL_NUM_SERVER=1 DGL_NUM_CLIENT=$NUM_MACHINES DGL_CONF_PATH=$PART_CONFIG DGL_IP_CONFIG=$IPC DGL_GRAPH_FORMAT=csc OMP_NUM_THREADS=$THREADS"
ARGS=(--ip-config "$IPC" --part-config "$PART_CONFIG" "$@")
env $COMMON DGL_ROLE=server DGL_SERVER_ID="$m" "$PY" "$HERE/dgl_dist_sage.py" "${ARGS[@]}" \
    > "$LOGDIR/server$m.log" 2>&1 &
env $COMMON DGL_ROLE=client DGL_NUM_SAMPLER=0 DGL_GROUP_ID=0 $SIM \
    RANK="$m" WORLD_SIZE="$NUM_MACHINES" MASTER_ADDR="$MASTER_ADDR" MASTER_PORT="$MASTER_PORT" \
    "$PY" "$HERE/dgl_dist_sage.py" "${ARGS[@]}" > "$LOGDIR/trainer$m.log" 2>&1
rc=$?
wait
exit $rc
