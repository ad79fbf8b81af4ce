"""The README's sbatch scripts (section "Faults", preemption) against a real SLURM controller: a
private one-node cluster (``slurm_cluster.py``) runs the script with 2 tasks, each a
``python -m shardgnn.torchrun`` agent, and its one-node variant (``shardgnn train --workers 2``);
``scancel --batch --signal=USR1`` (what ``--signal=B:USR1@120`` sends before the time limit)
preempts each mid-training; the script's trap forwards the signal, waits for the checkpoint and
requeues the job; the requeued job resumes and ends bit-identical to the torchrun script run
without a signal. Skipped where SLURM or munge is not installed or its daemons cannot start (CI
installs Debian's ``slurm-wlm`` and ``munge``: ``.ci/run``)."""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path

import pytest

from shardgnn.train.checkpoint import Checkpointer
from slurm_cluster import ClusterUnavailable, SlurmCluster

from conftest import assert_same_weights, final_weights, fixed_port

EPOCHS = 40  # ~0.15 s each (2 workers, 2 cores): the signal lands well before the end

# The README's script (section "Faults"), adapted to one node running 2 agents (--nodes=1
# --ntasks=2; --nnodes $SLURM_NTASKS, --nproc-per-node 1, OMP_NUM_THREADS for one worker per
# task), a free rendezvous port instead of 29500, and a small graph. Everything else is verbatim.
SCRIPT = """\
#!/bin/bash
#SBATCH --nodes=1
#SBATCH --ntasks=2
#SBATCH --cpus-per-task=1
#SBATCH --time=00:10:00
#SBATCH --signal=B:USR1@120
#SBATCH --requeue
#SBATCH --open-mode=append

export OMP_NUM_THREADS=$((SLURM_CPUS_PER_TASK / 1))
requeue() { kill -USR1 "$STEP"; wait "$STEP"; scontrol requeue "$SLURM_JOB_ID"; exit 0; }
trap requeue USR1
srun --kill-on-bad-exit=1 python -m shardgnn.torchrun --nnodes $SLURM_NTASKS --nproc-per-node 1 \\
    --rdzv-id $SLURM_JOB_ID --rdzv-backend c10d \\
    --rdzv-endpoint $(scontrol show hostnames $SLURM_JOB_NODELIST | head -n1):{port} \\
    --shutdown-timeout 100 \\
    -m shardgnn.run train graph:graph --partitions parts --epochs {epochs} \\
    --batch-size 16 --hidden 16 --fanouts 5,5 --seed 3 --overlap off --quiet \\
    --checkpoint-dir ckpt/ --resume &
STEP=$!
wait "$STEP"
"""

# The README's one-node variant ("On one node without torchrun, ..."), as corrected by issue 33:
# `#SBATCH --signal=B:USR1@120` signals the batch shell alone, so `shardgnn train` run in the
# foreground of the script never hears of it (bash dies of the USR1, the job ends FAILED and
# the training runs on, orphaned); the script has to forward it with the same trap.
ONE_NODE_SCRIPT = """\
#!/bin/bash
#SBATCH --nodes=1
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=2
#SBATCH --time=00:10:00
#SBATCH --signal=B:USR1@120
#SBATCH --requeue
#SBATCH --open-mode=append

requeue() { kill -USR1 "$STEP"; wait "$STEP"; scontrol requeue "$SLURM_JOB_ID"; exit 0; }
trap requeue USR1
shardgnn train graph:graph --partitions parts --workers 2 --epochs {epochs} \\
    --batch-size 16 --hidden 16 --fanouts 5,5 --seed 3 --overlap off --quiet \\
    --checkpoint-dir ckpt/ --resume --stop-grace 100 &
STEP=$!
wait "$STEP"
"""


TERMINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"}
STOPPED = re.compile(
    r"^shardgnn train: stopped by SIGUSR1 (in epoch \d+ after batch \d+ of 10|after epoch \d+); "
    r"checkpoint saved in (\S+);",
    re.M,
)
FIRST_EPOCH = re.compile(rf"^epoch +1/{EPOCHS} ", re.M)


@pytest.fixture(scope="module")
def cluster():
    try:
        with SlurmCluster() as started:
            # the job's `python` is this interpreter (sbatch exports the submitting environment)
            started.env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{started.env['PATH']}"
            yield started
    except ClusterUnavailable as exc:
        pytest.skip(f"no SLURM cluster: {exc}")
    # no process of a job outlived the daemons (none had to be killed)
    assert not started.stray, started.stray


@pytest.fixture(scope="module")
def dataset(cluster, tmp_path_factory, checkpoint_graph):
    """``(graph directory, partitions directory)`` of the small graph."""
    from shardgnn.graph.io import save_graph
    from shardgnn.partition.format import write_partitions
    from shardgnn.partition.methods import PartitionConfig, partition_graph

    if cluster.cpus < 2:
        pytest.skip(f"the scripts' 2 workers need 2 CPUs; this node has {cluster.cpus}")
    root = tmp_path_factory.mktemp("slurm-data")
    data, parts = root / "graph", root / "parts"
    save_graph(checkpoint_graph, data)
    result = partition_graph(checkpoint_graph, PartitionConfig(num_parts=2, method="metis", seed=0))
    write_partitions(
        checkpoint_graph, result.assignment, parts, method=result.method, settings=result.settings
    )
    return data, parts


@pytest.fixture(scope="module")
def straight(cluster, dataset, tmp_path_factory):
    """The torchrun script, never signalled: submitted first (it runs while the node is free), its
    final weights read when a test needs them."""
    directory = tmp_path_factory.mktemp("slurm-straight")
    job = _submit(cluster, directory / "job", SCRIPT, *dataset)
    done = {}

    def weights():
        if not done:
            out = directory / "job" / "job.out"
            state = _wait(lambda: _finished(cluster, job), 180, "the uninterrupted job", out)
            assert state["JobState"] == "COMPLETED" and state["Restarts"] == "0", state
            done["weights"] = final_weights(directory / "job" / "ckpt")
        return done["weights"]

    return weights


def _wait(predicate, timeout_s: float, what: str, log: Path | None = None):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    tail = log.read_text(errors="replace")[-3000:] if log and log.exists() else ""
    raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}\n{tail}")


def _submit(cluster: SlurmCluster, directory: Path, script: str, data: Path, parts: Path) -> str:
    """``script`` run in ``directory`` (its working directory: ``graph``, ``parts``, ``ckpt/``)."""
    directory.mkdir()
    (directory / "graph").symlink_to(data)
    (directory / "parts").symlink_to(parts)
    path = directory / "job.sh"
    path.write_text(script.replace("{port}", str(fixed_port())).replace("{epochs}", str(EPOCHS)))
    return cluster.sbatch(path, f"--output={directory / 'job.out'}", cwd=directory)


def _finished(cluster: SlurmCluster, job: str) -> dict[str, str] | None:
    state = cluster.job(job)
    return state if state.get("JobState") in TERMINAL else None


def _preempt(cluster: SlurmCluster, directory: Path, script: str, dataset) -> str:
    """Submit ``script``, send its batch shell SIGUSR1 once epoch 1 is done, and check that the
    job was requeued once and its second run resumed from the checkpoint of the first and
    finished; the job's output (both runs)."""
    job = _submit(cluster, directory, script, *dataset)
    out = directory / "job.out"

    def first_epoch_done():
        assert not _finished(cluster, job), f"job {job} ended early:\n{out.read_text()[-3000:]}"
        return out.exists() and FIRST_EPOCH.search(out.read_text())

    _wait(first_epoch_done, 180, "epoch 1", out)
    # what `#SBATCH --signal=B:USR1@120` sends 120 s before the time limit: USR1 to the batch
    # shell alone; its trap forwards it, waits for the save and requeues the job
    cluster.cli("scancel", "--batch", "--signal=USR1", job)
    state = _wait(lambda: _finished(cluster, job), 180, f"job {job} to end", out)
    log = out.read_text()  # --open-mode=append: both runs
    assert state["JobState"] == "COMPLETED" and state["ExitCode"] == "0:0", (state, log[-3000:])
    assert state["Restarts"] == "1", state  # requeued once, by the script's `scontrol requeue`
    stopped = STOPPED.search(log)
    assert stopped, log[-3000:]
    # the requeued run resumed from that checkpoint: epoch 1 ran once, the last epoch ran
    assert f"resumed from {stopped.group(2)} " in log, log[-3000:]
    assert len(FIRST_EPOCH.findall(log)) == 1, log[-3000:]
    assert re.search(rf"^epoch +{EPOCHS}/{EPOCHS} ", log, re.M), log[-3000:]
    assert Checkpointer(directory / "ckpt").complete()[-1].name == f"epoch-{EPOCHS:06d}"
    return log


@pytest.mark.slow
@pytest.mark.multiprocess
def test_readme_sbatch_script_is_preempted_requeued_and_resumes_bit_exact(
    tmp_path, cluster, dataset, straight
):
    log = _preempt(cluster, tmp_path / "preempted", SCRIPT, dataset)
    # srun forwarded the trap's SIGUSR1 to both tasks (torch elastic's line, one per agent), and
    # an agent saw its workers exit 75 (EX_TEMPFAIL) after the save
    assert log.count("Received 10 death signal, shutting down workers") == 2, log[-3000:]
    assert "shardgnn.torchrun: stopped by SIGUSR1; every worker saved its checkpoint" in log, log
    assert_same_weights(straight(), final_weights(tmp_path / "preempted" / "ckpt"))


@pytest.mark.slow
@pytest.mark.multiprocess
def test_readme_one_node_script_is_preempted_requeued_and_resumes_bit_exact(
    tmp_path, cluster, dataset, straight
):
    """`shardgnn train --workers 2` in the script instead of srun + torchrun: the same trap, the
    same weights as the uninterrupted torchrun job."""
    _preempt(cluster, tmp_path / "preempted", ONE_NODE_SCRIPT, dataset)
    assert_same_weights(straight(), final_weights(tmp_path / "preempted" / "ckpt"))
