#!/usr/bin/env bash
# Builds the DGL venv ($PEERS/dglvenv, default $HOME/peers/dglvenv) that every other script in
# benchmarks/peers/ except compare.py runs in (compare.py runs with the project's Python and
# calls the DGL scripts with $PEERS/dglvenv/bin/python).
# These are the commands that were run on the 2-core / 24 GiB CPU machine
# (Python 3.11.7, pip pointed at the registry and the local CPU torch wheel).
#   bash benchmarks/peers/setup_dgl.sh   (about 5 min: downloads torch 2.2.1 with its CUDA
#   wheels, ~5 GB venv; needs a python3 that is CPython 3.11: the dgl wheel is cp311)
set -eux
PEERS=${PEERS:-$HOME/peers}
mkdir -p "$PEERS/dl" "$PEERS/wheels"
cd "$PEERS"
what=${*:-dgl pyg}

if [[ " $what " == *" dgl "* ]]; then
  # dgl 2.1.0 (newest on PyPI) ships tensoradapter/graphbolt/dgl_sparse libs for
  # torch 2.0.0 2.0.1 2.1.0 2.1.1 2.1.2 2.2.0 2.2.1 only -> torch 2.2.1 (PyPI build is
  # CUDA 12.1: pulls ~2.7 GB of nvidia-* wheels; venv ends at ~5 GB).
  # torchdata must still have datapipes (<=0.7.1; 0.7.0 pins torch==2.1.0).
  # pandas / pyyaml / pydantic are imported by dgl.graphbolt at `import dgl` but are
  # not in the wheel's Requires-Dist.
  python3 -m venv dglvenv
  pip download dgl==2.1.0 --no-deps -d dl
  dglvenv/bin/pip install "torch==2.2.1" "torchdata==0.7.1" "numpy<2" dl/dgl-2.1.0-cp311-cp311-manylinux1_x86_64.whl
  dglvenv/bin/pip install "pandas<2.3" pyyaml pydantic "numpy<2"
  dglvenv/bin/python -c "import dgl, torch; print(dgl.__version__, torch.__version__)"
fi

echo "DGL venv ready in $PEERS/dglvenv"
