"""A script that asks for workers without an ``if __name__ == "__main__":`` guard gets its result
(rendered in its own process) and a warning that says what to add; a guarded one uses workers."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

BODY = """import json
import prefixplan
system = {"role": "system", "content": "you are a terse assistant. " * 30}
records = [{"model": "m", "messages": [system, {"role": "user", "content": f"question {i}"}]} for i in range(300)]
"""
CALL = "a = prefixplan.analyze(records, workers=2, rag_whatif=False, simulate=False)\n"
SHOW = (
    "import os\n"
    "pids = {int(w.rsplit(':', 1)[1]) for w in a.workers}\n"
    "print(json.dumps({'requests': a.record.summary.requests, 'elsewhere': len(pids - {os.getpid()})}))\n"
)


def _run(script: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=600)


def test_a_script_without_a_main_guard_gets_its_result_and_the_fix(tmp_path: Path) -> None:
    import json

    script = tmp_path / "noguard.py"
    script.write_text(BODY + CALL + SHOW)
    done = _run(script)
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out == {"requests": 300, "elsewhere": 0}  # rendered in the script's own process
    assert f"{script}:5: prefixplan renders in this process, not in 2 workers" in done.stderr
    assert 'if __name__ == "__main__":' in done.stderr


def test_a_guarded_script_starts_workers_without_a_warning(tmp_path: Path) -> None:
    import json

    script = tmp_path / "guarded.py"
    indented = "".join("    " + line + "\n" for line in (CALL + SHOW).splitlines())
    script.write_text(BODY + 'if __name__ == "__main__":\n' + indented)
    done = _run(script)
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["requests"] == 300  # how many jobs the workers took depends on how soon they start
    assert "prefixplan renders in this process" not in done.stderr


def test_code_a_guarded_script_runs_with_exec_is_guarded_and_unguarded_exec_is_not(tmp_path: Path) -> None:
    """exec()'d code shares the script's globals but its line numbers are its own: the exec
    statement's line in the script decides."""
    inner = tmp_path / "inner.py"
    inner.write_text("from prefixplan.trace.mainguard import unguarded_call\n\n\n\nprint(unguarded_call())\n")
    guarded = tmp_path / "guarded_exec.py"
    guarded.write_text(f'if __name__ == "__main__":\n    exec(open({str(inner)!r}).read())\n')
    unguarded = tmp_path / "unguarded_exec.py"
    unguarded.write_text(f"import sys\n\nexec(open({str(inner)!r}).read())\n")
    assert _run(guarded).stdout.strip() == "None"
    assert _run(unguarded).stdout.strip() == f"{unguarded}:3"
