#!/usr/bin/env python3
"""Benchmark: how `analyze` scales with workers, and what stays serial, in one run.

    python benchmarks/bench_scale.py [--requests 100000] [--files 32] [--workers 1,2,N] [--inputs one,split]
                                     [--executor local|ray] [--startup]

The log is the pinned generated one (`python scripts/make_logs.py bench`, seed 7, created when
missing) as one gzip file (``one``: the parent decompresses it into line-aligned pieces on disk
that the workers read), as one plain file (``plain``: the workers read byte ranges of it) and cut into
``--files`` gzip files of consecutive lines (``split``: one file per job), under benchmarks/out/. Tokenizer: the real Qwen3 (hf:, scripts/fetch_tokenizers.py).
The documents-first what-if is off and nothing is stored (as in bench_trace.py).

Each run is `analyze` in its own process with ``--workers N`` (default 1, 2 and one per core).
Per run: wall seconds; CPU seconds of every process (the parent's own, from getrusage, plus each
worker's, which the workers report per job); the parent's serial CPU (its own CPU less the jobs
it rendered itself while the workers started); the serial fraction (serial CPU / all CPU) and the
speed-up Amdahl's law gives that fraction on 16 and 64 cores. Every run's record must be the same
(checked). ``--startup``: also a render process's start (imports + Qwen3 renderer loaded, one
request rendered) with and without model frameworks hidden; ``--records N``: ``prefixplan.analyze``
on N in-memory records with one worker and with two, alternating. Not run in CI.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

from pinned import OUT, QWEN3, ensure_qwen3, pinned_log, run_child


def split(log: Path, files: int, folder: Path) -> list[Path]:
    """Cut ``log`` into ``files`` gzip files of consecutive lines (kept when already there)."""
    import gzip

    names = [folder / f"part-{i:03d}.jsonl.gz" for i in range(files)]
    done = folder / ".done"  # hidden: not read as a log
    if done.is_file():
        return names
    folder.mkdir(parents=True, exist_ok=True)
    with gzip.open(log, "rb") as fh:
        total = sum(1 for _ in fh)
    per = -(-total // files)
    with gzip.open(log, "rb") as fh:
        for name in names:
            with gzip.open(name, "wb", compresslevel=6) as out:
                for _ in range(per):
                    line = fh.readline()
                    if not line:
                        break
                    out.write(line)
    done.write_text(f"{total} lines in {files} files\n")
    return names


def child_analyze(inputs: str, executor: str, workers: int) -> dict:
    from prefixplan.analysis.options import AnalyzeOptions
    from prefixplan.api import AnalyzeOutputs, AnalyzeRequest, HeadlineOptions, run_analyze, source_options
    from prefixplan.trace.executors import Executor

    if executor == "ray":
        import ray

        ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
    me = f":{os.getpid()}"
    intake_end = _note_intake_end()
    t0, cpu0 = time.perf_counter(), time.process_time()
    source = source_options(inputs, tokenizer=f"hf:{QWEN3}")
    options = AnalyzeOptions(source=source, executor=Executor(executor, workers), engine="vllm", rag_whatif=False)
    outcome = run_analyze(AnalyzeRequest(options, HeadlineOptions(), AnalyzeOutputs()))
    end_wall, end_cpu = time.perf_counter(), time.process_time()
    seconds, parent_cpu = end_wall - t0, end_cpu - cpu0
    analysis = outcome.analysis
    record = analysis.record.to_json()
    record.pop("created", None)
    record["summary"].pop("elapsed_s", None)
    record["summary"].pop("encoded", None)
    here = [w for k, w in analysis.workers.items() if k.endswith(me)]
    away = [w for k, w in analysis.workers.items() if not k.endswith(me)]
    rendered_here = sum(w["cpu_seconds"] for w in here)
    s = analysis.record.summary
    return {
        "seconds": seconds,
        "parent_cpu": parent_cpu,
        "workers_cpu": sum(w["cpu_seconds"] for w in away),
        "serial_cpu": parent_cpu - rendered_here,
        "tail_cpu": end_cpu - intake_end[0],
        "tail_s": end_wall - intake_end[1],
        "processes": len(away),
        "worker_rss_mb": max((w["peak_rss_mb"] for w in away), default=0.0),
        "requests": s.requests,
        "tokens": s.prompt_tokens,
        "record": json.dumps(record, sort_keys=True),
    }


def _note_intake_end() -> list[float]:
    """Where the parent's CPU and clock stood when the last rendered batch had been taken in:
    what follows (ranking, the headline replay, the shown candidates' ids, the record) is the
    serial tail; what came before overlapped the workers' rendering."""
    from prefixplan.trace import intake

    mark: list[float] = []
    batches = intake.Intake.batches

    def noted(self, columns=True):  # type: ignore[no-untyped-def]
        yield from batches(self, columns)
        mark[:] = [time.process_time(), time.perf_counter()]

    intake.Intake.batches = noted  # type: ignore[method-assign]
    return mark


STARTUP = """
import sys, time
t0 = time.perf_counter()
if sys.argv[2] == "hide":
    from prefixplan.render.frameworks import hide_model_frameworks
    hide_model_frameworks()
from prefixplan.core.types import Request
from prefixplan.render import RenderSet
rs = RenderSet(sys.argv[1])
rs.render_batch([Request(id="1", format="openai-chat", source="s", line_no=1, messages=({"role": "user", "content": "hi"},))])
print(time.perf_counter() - t0, "torch" in sys.modules and sys.modules["torch"] is not None)
"""


def startup(python: str, runs: int = 3) -> list[tuple[str, float, bool]]:
    """Seconds for a fresh process to import, load the Qwen3 renderer and render one request."""
    out = []
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    for mode in ("hide", "show") * runs:
        done = subprocess.run(
            [python, "-c", STARTUP, f"hf:{QWEN3}", mode], capture_output=True, text=True, env=env, check=True
        )
        secs, torch = done.stdout.split()
        out.append((mode, float(secs), torch == "True"))
    return out


def _core(record: str) -> dict:
    """What does not depend on how the input was stored (file names, line numbers, sizes)."""
    doc = json.loads(record)
    summary = {k: v for k, v in doc["summary"].items() if "bytes" not in k and "files" not in k}
    return {
        "summary": summary,
        "candidates": [c.get("token_ids") for c in doc["candidates"]],
        "sim": doc.get("simulation"),
    }


def child_records(log: str, n: int, workers: int) -> dict:
    """``prefixplan.analyze`` on the first ``n`` records of ``log`` given in memory."""
    import gzip
    import itertools

    import prefixplan

    with gzip.open(log, "rt", encoding="utf-8") as fh:
        records = [json.loads(line) for line in itertools.islice(fh, n)]
    t0 = time.perf_counter()
    analysis = prefixplan.analyze(records, tokenizer=f"hf:{QWEN3}", workers=workers, rag_whatif=False, simulate=False)
    return {"seconds": time.perf_counter() - t0, "requests": analysis.record.summary.requests}


def records_figures(log: Path, n: int, rounds: int = 2) -> None:
    """In-memory records, one worker vs two, alternating."""
    times: dict[int, list[float]] = {1: [], 2: []}
    for _ in range(rounds):
        for workers in (1, 2):
            times[workers].append(run_child(__file__, "records", f"{log}:{n}", str(workers))["seconds"])
    one, two = (sorted(times[w]) for w in (1, 2))
    print(
        f"{n:,} in-memory records: workers=1 {' / '.join(f'{t:.1f}' for t in one)} s, "
        f"workers=2 {' / '.join(f'{t:.1f}' for t in two)} s (best: {one[0] / two[0]:.2f}x)"
    )


def amdahl(serial: float, cores: int) -> float:
    return 1.0 / (serial + (1.0 - serial) / cores)


def table(results: dict, inputs: dict, args: argparse.Namespace) -> None:
    """The figures of every run, and whether the records agree."""
    print(
        f"log: {Path(inputs['one']).name} ({args.requests:,} requests); cores: {os.cpu_count()}; executor: {args.executor}"
    )
    head = ["input", "workers", "wall s", "CPU s", "parent s", "serial s", "serial %", "tail s", "tail %"]
    head += ["Amdahl 16", "Amdahl 64", "keeps up"]
    print("".join(f"{h:>10}" for h in head) + f"{'Mtok/s':>8}{'x vs 1':>8}{'parent MB':>10}{'worker MB':>10}")
    for (kind, n), r in results.items():
        cpu = r["parent_cpu"] + r["workers_cpu"]
        serial = r["serial_cpu"] / cpu if cpu else 0.0
        tail = r["tail_cpu"] / cpu if cpu else 0.0
        during = max(1e-9, r["serial_cpu"] - r["tail_cpu"])  # the parent's own work while workers render
        render = cpu - r["serial_cpu"]
        base = results.get((kind, 1))
        speed = base["seconds"] / r["seconds"] if base else float("nan")
        cells = [kind, str(n), f"{r['seconds']:.1f}", f"{cpu:.1f}", f"{r['parent_cpu']:.1f}", f"{r['serial_cpu']:.1f}"]
        cells += [f"{100 * serial:.1f}", f"{r['tail_cpu']:.1f}", f"{100 * tail:.1f}"]
        cells += [f"{amdahl(tail, 16):.1f}", f"{amdahl(tail, 64):.1f}", f"{render / during:.0f}"]
        print(
            "".join(f"{c:>10}" for c in cells)
            + f"{r['tokens'] / r['seconds'] / 1e6:>8.2f}{speed:>8.2f}{r['parent_rss_mb']:>10,.0f}{r['worker_rss_mb']:>10,.0f}"
        )
    print(
        "serial s: the parent's CPU less the jobs it rendered itself, of which tail s came after the last rendered"
        " batch (ranking, headline replay, the shown candidates' ids, the record): the part no worker overlaps."
        " Amdahl N: 1 / (tail + (1 - tail) / N). keeps up: the rendering CPU over the parent's own CPU while the"
        " workers render: the number of busy workers one parent can take in before it, not they, sets the pace"
    )
    for kind in dict.fromkeys(k for k, _ in results):
        same = len({r["record"] for (k, _), r in results.items() if k == kind}) == 1
        print(f"{kind}: records identical for every worker count: {same}")
    cores = {json.dumps(_core(r["record"]), sort_keys=True) for r in results.values()}
    print(f"candidates, summary and simulation identical across inputs: {len(cores) == 1}")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=100_000)
    ap.add_argument("--files", type=int, default=32)
    ap.add_argument("--workers", default=f"1,2,{os.cpu_count()}")
    ap.add_argument("--inputs", default="one,plain,split")
    ap.add_argument("--executor", default="local")
    ap.add_argument("--startup", action="store_true")
    ap.add_argument("--records", type=int, default=0, help="also: N in-memory records, workers=1 vs 2")
    ap.add_argument("--python", default=sys.executable, help="the interpreter for --startup (e.g. one with torch)")
    ap.add_argument("--child", nargs=3)
    args = ap.parse_args()
    if args.child:
        inputs, executor, workers = args.child
        if inputs == "records":
            path, _, n = executor.rpartition(":")
            print(json.dumps(child_records(path, int(n), int(workers))))
            return 0
        res = child_analyze(inputs, executor, int(workers))
        res["parent_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(json.dumps(res))
        return 0
    ensure_qwen3()
    log = pinned_log(args.requests)
    inputs = {"one": str(log)}
    if "plain" in args.inputs:
        plain = OUT / log.name.removesuffix(".gz")
        if not plain.is_file():
            import gzip
            import shutil

            partial = plain.with_suffix(".partial")  # a stopped run leaves no half file behind
            with gzip.open(log, "rb") as src, open(partial, "wb") as dst:
                shutil.copyfileobj(src, dst, 16 * 2**20)
            partial.replace(plain)
        inputs["plain"] = str(plain)
    if "split" in args.inputs:
        folder = OUT / f"{log.name.removesuffix('.jsonl.gz')}-split{args.files}"
        split(log, args.files, folder)
        inputs["split"] = str(folder)
    counts = sorted({int(w) for w in args.workers.split(",")})
    results = {}
    for kind in [k for k in args.inputs.split(",") if k in inputs]:
        for n in counts:
            results[(kind, n)] = r = run_child(__file__, inputs[kind], args.executor, str(n))
            print(f"{kind} x{n}: {r['seconds']:.1f} s", file=sys.stderr)
    if results:
        table(results, inputs, args)
    if args.records:
        records_figures(log, args.records)
    if args.startup:
        times = startup(args.python)
        for mode in ("hide", "show"):
            secs = sorted(t for m, t, _ in times if m == mode)
            torch = any(tt for m, _, tt in times if m == mode)
            label = "frameworks hidden" if mode == "hide" else "frameworks importable"
            print(f"render process start ({label}): {' / '.join(f'{t:.2f}' for t in secs)} s; torch imported: {torch}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
