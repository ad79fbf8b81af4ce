"""Run a function on N local gloo ranks, for multi-process tests (a helper module, not a test file).

    from distributed_helpers import run_workers

    def _sum_ranks(ctx, offset):            # module-level: workers are spawned, fn is pickled
        t = torch.tensor([ctx.rank + offset])
        dist.all_reduce(t)
        return t.item()

    @pytest.mark.multiprocess
    def test_sum():
        assert run_workers(_sum_ranks, 3, 10) == [33, 33, 33]

Every worker builds its context with ``init_distributed(device="cpu", timeout_s=timeout_s)``, so a
rank that dies turns its peers' pending collectives into errors within ``timeout_s`` at worst (with
gloo usually at once: "Connection closed by peer"), and a worker that raises makes ``run_workers``
raise :class:`~shardgnn.distributed.launch.WorkerFailedError` naming the rank and the error.
"""

from __future__ import annotations

from typing import Any, Callable

from shardgnn.distributed.context import DistContext, init_distributed, shutdown
from shardgnn.distributed.launch import launch_local


def run_workers(
    fn: Callable[..., Any],
    world_size: int,
    *args: Any,
    timeout_s: float = 120.0,
    start_method: str | None = None,
) -> list[Any]:
    """Run ``fn(ctx, *args)`` on ``world_size`` local processes; return each rank's result, rank
    order.

    ``fn`` must be a module-level function; ``args`` and the results must be picklable.
    ``timeout_s`` is the collective timeout inside the workers; the whole run is killed after
    ``2 * timeout_s + 60`` s (start-up of workers on a busy 2-core machine can take seconds),
    so a worker that hangs outside any collective cannot hang the test either. ``start_method``:
    :func:`~shardgnn.distributed.launch.launch_local`'s (None: this platform's default).
    """
    results = launch_local(
        _run_in_context,
        (fn, timeout_s, args),
        world_size,
        timeout_s=2 * timeout_s + 60,
        start_method=start_method,
    )
    return [results[rank] for rank in range(world_size)]


def run_workers_each(
    fn: Callable[..., Any], world_size: int, runs: list[tuple], *, timeout_s: float = 120.0
) -> list[list[Any]]:
    """``fn(ctx, *args)`` for every ``args`` of ``runs`` in turn, in one job of ``world_size``
    processes (a launch costs a worker start-up each); per run, each rank's result in rank
    order. For runs that share nothing but the job: ``fn`` must leave no state behind that the
    next run reads."""
    per_rank = run_workers(
        _each, world_size, fn, [tuple(args) for args in runs], timeout_s=timeout_s
    )
    return [list(ranks) for ranks in zip(*per_rank, strict=True)]


def _each(ctx: DistContext, fn: Callable[..., Any], runs: list[tuple]) -> list[Any]:
    return [fn(ctx, *args) for args in runs]


def _run_in_context(fn: Callable[..., Any], timeout_s: float, args: tuple) -> Any:
    """Worker side: join the job, run ``fn``, leave the job.

    When ``fn`` raises, the process exits without leaving the job first: its connections to the
    peers close only when it is gone, after the launcher has heard that this rank failed, so the
    failure report names this rank first and the peers' "Connection closed" errors after it.
    """
    ctx: DistContext = init_distributed(device="cpu", timeout_s=timeout_s)
    result = fn(ctx, *args)
    shutdown()
    return result
