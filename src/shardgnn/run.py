r"""Worker entry point for runs on several machines: ``python -m shardgnn.run train ...`` under
torchrun.

On one machine, ``shardgnn train --workers N ...`` starts its N workers by itself
(:func:`shardgnn.distributed.launch.launch_local` running :func:`shardgnn.train.worker.train_worker`
with the resolved config). On several machines, start one ``torchrun`` per machine. The torchrun
agents meet at a rendezvous endpoint (a port on any one of the machines), agree on ranks, and each
starts ``--nproc-per-node`` workers running this module, which takes the same arguments as
``shardgnn train``:

    # on every machine (same command, same --rdzv-id):
    python -m shardgnn.torchrun --nnodes 2 --nproc-per-node 4 \
        --rdzv-backend c10d --rdzv-endpoint node0.cluster:29500 --rdzv-id products-run1 \
        -m shardgnn.run train ogbn-products --partitions parts/products-8 --epochs 10

``--rdzv-endpoint`` is HOST:PORT of one of the machines; PORT must be free there and reachable from
the others; the agent on that machine hosts the rendezvous store. ``--nnodes 2:4`` would accept
between 2 and 4 machines. torchrun sets ``OMP_NUM_THREADS=1`` when it is unset and
``--nproc-per-node`` > 1; set it yourself to cores-per-machine / nproc-per-node.

SLURM: one torchrun per node, started by ``srun``; the first node of the allocation hosts the
rendezvous. No SSH, no lists of addresses:

    #!/bin/bash
    #SBATCH --job-name=shardgnn
    #SBATCH --nodes=4
    #SBATCH --ntasks-per-node=1          # one torchrun agent per node; it starts the workers
    #SBATCH --cpus-per-task=32
    #SBATCH --time=04:00:00

    #SBATCH --signal=B:USR1@120          # preemption warning: USR1 120 s before the limit
    #SBATCH --requeue

    export OMP_NUM_THREADS=$((SLURM_CPUS_PER_TASK / 4))
    # On USR1: pass it on (srun -> torchrun -> workers: they finish the step, save, exit 75),
    # wait for the save, requeue; the requeued job resumes from that step.
    requeue() { kill -USR1 "$STEP"; wait "$STEP"; scontrol requeue "$SLURM_JOB_ID"; exit 0; }
    trap requeue USR1
    # --kill-on-bad-exit: if one node's torchrun fails, SLURM ends the others at once.
    # shardgnn.torchrun: torchrun bounded on faults (network partitions, stalls; SIGUSR1 handled)
    srun --kill-on-bad-exit=1 python -m shardgnn.torchrun --nnodes $SLURM_NNODES \
        --nproc-per-node 4 --rdzv-id $SLURM_JOB_ID --rdzv-backend c10d \
        --rdzv-endpoint $(scontrol show hostnames $SLURM_JOB_NODELIST | head -n1):29500 \
        --shutdown-timeout 100 \
        -m shardgnn.run train ogbn-products --partitions parts/products-16 --epochs 10 \
        --checkpoint-dir ckpt/ --resume &
    STEP=$!
    wait "$STEP"

When a worker dies, its torchrun agent stops the other workers on that machine and exits non-zero
(``--max-restarts K`` would restart the whole group up to K times instead); workers on the other
machines fail their next collective within the collective timeout and their agents exit too. The
``@record`` decorator on :func:`main` writes the worker's exception and traceback to the error file
torchrun names in ``TORCHELASTIC_ERROR_FILE`` (atomically, first:
:func:`~shardgnn.distributed.launch.record_elastic_error`), so torchrun's failure summary shows the
root cause.
"""

from __future__ import annotations

import sys

from torch.distributed.elastic.multiprocessing.errors import record

from shardgnn.errors import REQUEUE_EXIT_CODE, ConfigError, Preempted, ShardgnnError


def worker_config(argv: list[str]):
    """The resolved :class:`~shardgnn.train.config.TrainConfig` of a ``train ...`` command line, as
    every worker under torchrun builds it (the same flags, checks and dataset resolution as
    ``shardgnn train --workers N``)."""
    from shardgnn.cli import build_parser
    from shardgnn.cli.train import preflight, split_settings_given, train_config

    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command != "train":
        parser.error(
            f"python -m shardgnn.run only runs `train` (got `{args.command}`); "
            f"use `shardgnn {args.command}` instead"
        )
    config = train_config(args)
    if config.run.partitions is None:
        raise ConfigError(
            "every worker needs the same partition directory: partition once with "
            "`shardgnn partition SPEC --parts N --out DIR`, then pass --partitions DIR"
        )
    return preflight(
        config, dataset_given=args.dataset_arg is not None, split_given=split_settings_given(args)
    )[0]


@record
def main(argv: list[str] | None = None) -> int:
    """``python -m shardgnn.run train ...`` under torchrun: build the config like ``shardgnn train``
    and run this process's share of the job.

    Returns the exit status: 0, or 2 for a user error (one ``shardgnn train: error: ... (rank R)``
    line, as the CLI prints), 75 when a stop signal (SIGTERM, SIGUSR1, forwarded by torchrun
    with ``--signals-to-handle``) ended the run after a checkpoint, 130 on Ctrl-C. Other
    exceptions propagate to ``@record``, which hands them to torchrun's failure report.
    """
    import os

    from shardgnn.distributed.comm import CollectiveError
    from shardgnn.train.worker import run_worker

    try:
        run_worker(worker_config(sys.argv[1:] if argv is None else list(argv)))
        return 0
    except Preempted as exc:
        if os.environ.get("RANK", "0") == "0":  # every rank stopped alike; one line says so
            print(f"shardgnn train: {exc}", file=sys.stderr)
        return REQUEUE_EXIT_CODE
    except ShardgnnError as exc:
        # RANK is torchrun's; read here only to label the message (the context owns it otherwise;
        # unset: run outside torchrun, one process, no rank to name).
        rank = os.environ.get("RANK")
        print(f"shardgnn train: error: {exc}{f' (rank {rank})' if rank else ''}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except CollectiveError as exc:
        # A peer died or stalled (a lost machine): one line; the agent stops this machine's
        # workers, or with --max-restarts meets the others again and restarts on who is left.
        from shardgnn.distributed.launch import record_elastic_error

        print(f"shardgnn train: {exc}", file=sys.stderr)
        record_elastic_error(exc)
        return 1
    except BaseException as exc:
        from shardgnn.distributed.launch import record_elastic_error

        record_elastic_error(exc)
        raise


def cli() -> None:
    """Run :func:`main` and end the process with its status without the interpreter's teardown
    (as a failed local worker ends, :func:`~shardgnn.distributed.launch.exit_without_teardown`): the
    worker's threads (gloo's, the prefetcher's pool) are still alive at exit, and destroying
    C++ objects under them aborted a worker now and then after a run that had finished and
    written everything (SIGABRT, exit status -6: torchrun then reports the job as failed). An
    exception :func:`main` does not handle goes to torchrun's report as before; a run that
    finished still runs the ``atexit`` hooks."""
    from shardgnn.distributed.launch import exit_without_teardown

    code = main()
    exit_without_teardown(code, run_exit_hooks=code == 0)


if __name__ == "__main__":
    cli()
