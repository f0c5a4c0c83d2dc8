"""The collector runs less often while a log is rendered, and as before afterwards."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path

import pytest

from prefixplan.trace import gcpolicy
from prefixplan.trace.gcpolicy import relaxed_gc


@pytest.fixture(autouse=True)
def _thresholds() -> Iterator[None]:
    saved = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    yield
    gc.set_threshold(*saved)


def test_a_scope_relaxes_the_thresholds_and_puts_them_back() -> None:
    relaxed = (gcpolicy.YOUNG_THRESHOLD, gcpolicy.MIDDLE_THRESHOLD, gcpolicy.OLD_THRESHOLD)
    with relaxed_gc():
        assert gc.get_threshold() == relaxed
        with relaxed_gc():  # nested: the outer scope's end puts them back
            assert gc.get_threshold() == relaxed
        assert gc.get_threshold() == relaxed
    assert gc.get_threshold() == (700, 10, 10)


def test_the_scopes_may_end_in_any_order() -> None:
    outer, inner = relaxed_gc(), relaxed_gc()
    outer.__enter__()
    inner.__enter__()
    outer.__exit__(None, None, None)
    assert gc.get_threshold()[0] == gcpolicy.YOUNG_THRESHOLD  # one scope is still open
    inner.__exit__(None, None, None)
    assert gc.get_threshold() == (700, 10, 10)


def test_higher_thresholds_and_a_disabled_collector_are_kept() -> None:
    gc.set_threshold(10**6, 5, 500)
    with relaxed_gc():
        assert gc.get_threshold() == (10**6, gcpolicy.MIDDLE_THRESHOLD, 500)
    gc.set_threshold(0, 10, 10)
    with relaxed_gc():
        assert gc.get_threshold() == (0, 10, 10)
    assert gc.get_threshold() == (0, 10, 10)


def test_rendering_runs_relaxed_and_restores_on_an_early_stop(tmp_path: Path) -> None:
    import json

    from prefixplan.api import source_options
    from prefixplan.trace.executors import Executor
    from prefixplan.trace.intake import Intake, IntakePlan

    log = tmp_path / "log.jsonl"
    messages = [{"role": "system", "content": "S"}]
    log.write_text(
        "".join(
            json.dumps({"model": "m", "messages": [*messages, {"role": "user", "content": f"q{i}"}]}) + "\n"
            for i in range(5)
        )
    )
    source = source_options(str(log))
    seen = []
    plan = IntakePlan(source, Executor(workers=1), 4)
    rendered = Intake(plan).rows()
    for _ in rendered:
        seen.append(gc.get_threshold()[0])
        break
    rendered.close()
    assert seen == [gcpolicy.YOUNG_THRESHOLD]
    assert gc.get_threshold() == (700, 10, 10)
    rows = list(Intake(plan).rows())
    assert len(rows) == 5 and gc.get_threshold() == (700, 10, 10)
