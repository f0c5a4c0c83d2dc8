"""``--executor ray``: the input files rendered by a pool of Ray actors (Ray Data).

The driver makes one :class:`~prefixplan.trace.shards.ShardJob` per input file; Ray Data maps
them over a pool of actors (``map_batches`` with a callable class, one file per call, order
preserved), each of which loads the tokenizers once and reads its file itself with prefixplan's
own readers — local paths on a shared file system, or ``s3://``/``gs://``/``az://``/``https://``
through fsspec with the credentials of the node's environment. What comes back per file is the
compact :class:`~prefixplan.trace.shards.ShardResult` (trace rows, line errors, text partials),
merged on the driver in input order exactly as local workers' results are.

Without ``ray`` installed the executor is a usage error naming the extra (``prefixplan[ray]``).
"""

from __future__ import annotations

import logging
import pickle
import warnings
from collections.abc import Iterable, Iterator
from typing import Any

from prefixplan.core.extras import require
from prefixplan.trace.executors import Run
from prefixplan.trace.shards import ShardJob, ShardResult, render_shard


class _ShardActor:
    """A Ray Data actor: renders the files of its batches (tokenizers stay loaded between them)."""

    def __init__(self) -> None:
        from prefixplan.render.frameworks import hide_model_frameworks
        from prefixplan.trace.gcpolicy import relax_for_process

        hide_model_frameworks()  # a tokenizer needs no torch (transformers would import it)
        relax_for_process()  # the actor's process renders logs and nothing else

    def __call__(self, batch: dict[str, Any]) -> dict[str, Any]:
        import numpy as np

        out = [pickle.dumps(render_shard(pickle.loads(job)), protocol=5) for job in batch["job"]]
        return {"result": np.array(out, dtype=object)}


def _connect(address: str | None) -> tuple[Any, bool]:
    """The ``ray`` module, connected; True when this call started the connection."""
    ray = require("ray", "ray")
    require("ray.data", "ray")
    if ray.is_initialized():
        return ray, False
    from prefixplan.errors import UsageError

    kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False, "logging_level": logging.ERROR}
    try:
        ray.init(address=address, **kwargs)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise UsageError(
            f"cannot join the Ray cluster at {address or 'RAY_ADDRESS / a new local cluster'}: {str(exc)[:300]}",
            hint="start one with `ray start --head`, or pass --ray-address auto | ray://HOST:10001",
        ) from None
    return ray, True


def cluster_cpus(ray: Any) -> int:
    """CPUs of the cluster (at least 1)."""
    return max(1, int(ray.cluster_resources().get("CPU", 1)))


def run_ray(jobs: Iterable[ShardJob], run: Run) -> Iterator[ShardResult]:
    """Shard results in job order from a pool of ``--workers`` actors (None: one per cluster
    CPU, at most one per file) on the cluster at ``--ray-address``."""
    workers = run.executor.workers
    ray, started = _connect(run.executor.ray_address)
    try:
        import ray.data as rd

        ctx = rd.DataContext.get_current()
        ctx.execution_options.preserve_order = True  # results in input order, whatever finishes first
        logging.getLogger("ray.data").setLevel(logging.ERROR)
        ctx.enable_progress_bars = False  # the driver shows prefixplan's own progress
        items = [{"job": pickle.dumps(job, protocol=5)} for job in jobs]
        pool = max(1, min(workers or cluster_cpus(ray), len(items)))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # how Ray spells per-actor options moves
            ds = rd.from_items(items, override_num_blocks=len(items)).map_batches(
                _ShardActor,
                batch_size=1,
                compute=rd.ActorPoolStrategy(size=pool),
                num_cpus=1,
                max_restarts=0,  # a failed file is an error here, not a silent retry with a lost argument
            )
        for row in ds.iter_rows():
            yield pickle.loads(row["result"])
    finally:
        if started:
            ray.shutdown()
