#!/usr/bin/env bash
# The GPU check: on a machine with one NVIDIA GPU and no network, install the project, run the GPU
# benchmarks (bench_gpu.py, bench_bulk.py, bench_ladies.py) and then the `gpu` test tier (last, so
# that no test's process is still running while a benchmark is timed), and print their tables.
# Wheels the machine lacks (pymetis) travel in .whl/ (see benchmarks/README.md). Under 8 minutes.
#
#   bash benchmarks/gpu_check.sh                       # results in $OUT (default benchmarks/out)
#   GPU_CHECK_PARTS="bench tests" bash benchmarks/gpu_check.sh   # some parts only
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-benchmarks/out}
PARTS=" ${GPU_CHECK_PARTS:-bench bulk ladies tests} "
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
SITE=""
if compgen -G ".whl/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
        .whl/*.whl && SITE=/tmp/site
fi
export PYTHONPATH="$PWD/src${SITE:+:$SITE}"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c "import torch, shardgnn; print('torch', torch.__version__, 'cuda', torch.version.cuda, \
torch.cuda.get_device_name(0))" || exit 1
if [[ $PARTS == *" bench "* ]]; then
    echo "== benchmarks"
    timeout "${GPU_BENCH_TIMEOUT:-200}" python3 benchmarks/bench_gpu.py --out "$OUT/gpu.json" \
        --md "$OUT/gpu.md" --deadline "${GPU_BENCH_DEADLINE:-170}" 2>&1 | grep -v "^epoch " \
        | tee "$OUT/gpu_bench.log" | tail -40
fi
if [[ $PARTS == *" bulk "* ]]; then
    echo "== bulk sampling (k batches per hop against one at a time)"
    timeout "${GPU_BULK_TIMEOUT:-60}" python3 benchmarks/bench_bulk.py --device cuda --batches 64 \
        --ks 8,64 --out "$OUT/bulk_sampling_gpu.json" 2>&1 | tail -8
fi
if [[ $PARTS == *" ladies "* ]]; then
    echo "== LADIES sampling on the GPU (one batch, and 16 per call) against node-wise"
    timeout "${GPU_LADIES_TIMEOUT:-60}" python3 benchmarks/bench_ladies.py --device cuda \
        --no-training --graphs synthetic:nodes=200000 --batches 32 --out "$OUT/ladies_gpu.json" \
        2>&1 | tail -8
fi
if [[ $PARTS == *" tests "* ]]; then
    echo "== gpu test tier"
    # xdist workers share the one GPU (the tests are small; the machine has 16 cores); each test's
    # outcome is printed as it ends (-v) and a failure's traceback at once (tests/conftest.py), so
    # a tier cut off by its timeout still says what failed and why. Each worker gets its share of
    # the cores: left to torch, 8 workers ran 16 threads each, and the tests' CPU halves took
    # over 10x their time (measured on an H200 machine: 7 tests past their 120 s limit)
    workers=${GPU_TESTS_WORKERS:-6}
    threads=$(( $(nproc) / workers )); (( threads < 1 )) && threads=1
    OMP_NUM_THREADS=${OMP_NUM_THREADS:-$threads} SHARDGNN_STREAM_FAILURES=1 \
        timeout "${GPU_TESTS_TIMEOUT:-280}" python3 -m pytest -v -m gpu \
        -p no:cacheprovider -o addopts="" -rfEs --tb=short --durations=15 \
        --timeout "${GPU_TEST_TIMEOUT:-120}" \
        -n "$workers" ${GPU_TESTS:-tests/test_gpu.py tests/test_gpu_distributed.py} \
        > "$OUT/gpu_tests.log" 2>&1
    grep -E "^=== FAILED|^E  |passed|failed|Timeout" "$OUT/gpu_tests.log" | tail -40
fi
