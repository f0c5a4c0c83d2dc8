"""Renderers and cache models are chosen through lazy registries: every entry resolves, and naming
one imports only its own backend."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _resolves(target: str) -> bool:
    module, _, name = target.partition(":")
    return callable(getattr(importlib.import_module(module), name, None))


def test_every_registry_entry_resolves() -> None:
    from prefixplan.render import BACKENDS
    from prefixplan.simulation.models import MODELS

    assert all(_resolves(t) for t in BACKENDS.values())
    assert all(_resolves(t) for t in MODELS.values())


def test_model_kinds() -> None:
    from prefixplan.simulation.models import MODELS, model_kind
    from prefixplan.simulation.spec import AutoPromote, CacheSpec

    kinds = {
        model_kind(CacheSpec("lru")),
        model_kind(CacheSpec("infinite")),
        model_kind(CacheSpec("lru", 1e6)),
        model_kind(CacheSpec("lfu", 1e6)),
        model_kind(CacheSpec("fifo", 1e6, pinned_fraction=0.2, auto_promote=AutoPromote())),
    }
    assert kinds == set(MODELS) - {"lru-nodes"}  # lru-nodes: the stack's fallback for some TTLs


def test_choosing_one_imports_only_its_own() -> None:
    code = (
        "import sys, json\n"
        "from prefixplan.render import load_renderer\n"
        "import prefixplan.simulation.models\n"
        "load_renderer('mistral:nemo')\n"
        "mods = ['transformers', 'prefixplan.render.hf', 'prefixplan.render.tiktoken_backend', 'prefixplan.simulation.generic',\n"
        "        'prefixplan.simulation.lru', 'prefixplan.simulation.nodecache']\n"
        "print(json.dumps([m for m in mods if m in sys.modules]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []
