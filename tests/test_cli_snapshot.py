"""The command line keeps its contract: every ``--help`` and the ``--json`` of analyze, simulate
(a sweep and a fleet) and formats on the bundled example equal the recorded snapshots
(tests/cli_snapshot.py; timings, dates and paths excepted). A deliberate change re-records them
with ``python tests/cli_snapshot.py --write`` and shows in the diff."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
import cli_snapshot  # noqa: E402

pytestmark = pytest.mark.heavy  # help layout depends on the rich/typer release: current versions only


@pytest.fixture(scope="module")
def recorded() -> dict[str, str]:
    return {str(p.relative_to(cli_snapshot.SNAPSHOTS)): p.read_text() for p in cli_snapshot.SNAPSHOTS.rglob("*.*")}


def test_every_help_is_as_recorded(recorded: dict[str, str]) -> None:
    now = cli_snapshot.helps()
    assert sorted(now) == sorted(k for k in recorded if k.startswith("help/"))
    for name, text in now.items():
        assert text == recorded[name], name


def test_every_json_is_as_recorded(recorded: dict[str, str]) -> None:
    now = cli_snapshot.jsons()
    assert sorted(now) == sorted(k for k in recorded if k.startswith("json/"))
    for name, text in now.items():
        assert text == recorded[name], name
