"""calibrate (fit recovers known coefficients; YAML profile), keepalive (bounded, no overlap,
clean SIGTERM stop) and status (hit rate from counters, verdict, keys from the store)."""

from __future__ import annotations

import json
import os
import random
import signal
import threading
import time
from pathlib import Path

import pytest
from fake_engine import FakeEngine, VirtualClock, free_port_url

from prefixplan.cli.app import main
from prefixplan.core.durations import parse_duration
from prefixplan.engines.endpoint import Endpoint
from prefixplan.errors import ExitCode, InputError, UsageError
from prefixplan.savings.prefill import load_profile
from prefixplan.store import resolve_profile
from prefixplan.warming.calibrate import (
    TimingSample,
    calibrate_endpoint,
    fit_prefill,
    save_profile,
)
from prefixplan.warming.keepalive import keepalive
from prefixplan.warming.status import replica_status


def synthetic(a: float, b: float, c: float, noise: float = 0.0, seed: int = 1) -> list[TimingSample]:
    rng = random.Random(seed)
    out = []
    for n in (256, 512, 1024, 2048, 4096, 8192):
        for f in (0.0, 0.25, 0.5, 0.9):
            cached = int(n * f) // 16 * 16
            new = n - cached
            t = a + b * new + c * new * (cached + new / 2)
            out.append(TimingSample(new, cached, t * (1 + rng.gauss(0, noise)) if noise else t))
    return out


def test_fit_recovers_known_coefficients_exactly_and_with_noise() -> None:
    a, b, c = 0.012, 4.0e-5, 3.0e-9
    fit = fit_prefill(synthetic(a, b, c))
    assert fit.a_s == pytest.approx(a, rel=1e-6) and fit.b_s_per_token == pytest.approx(b, rel=1e-6)
    assert fit.c_s_per_token2 == pytest.approx(c, rel=1e-6) and fit.r2 == pytest.approx(1.0) and fit.rmse_s < 1e-9
    assert fit.attention_measurable
    noisy = fit_prefill(synthetic(a, b, c, noise=0.01))
    assert noisy.b_s_per_token == pytest.approx(b, rel=0.1) and noisy.c_s_per_token2 == pytest.approx(c, rel=0.15)
    flat = fit_prefill(synthetic(a, b, 0.0, noise=0.02))
    assert not flat.attention_measurable or flat.c_s_per_token2 < 1e-10


def test_fit_needs_enough_distinct_samples() -> None:
    with pytest.raises(UsageError):
        fit_prefill([TimingSample(10, 0, 0.1)] * 2)
    with pytest.raises(UsageError, match="separate"):
        fit_prefill([TimingSample(10, 0, 0.1)] * 5)


def test_profile_yaml_round_trip_and_plan_formula(tmp_path: Path) -> None:
    from prefixplan.warming.calibrate import Profile

    fit = fit_prefill(synthetic(0.01, 5e-5, 2e-9))
    path = save_profile(
        Profile(
            fit=fit,
            endpoint="http://h:1",
            engine="vllm",
            model="m",
            block_size=16,
            samples=tuple(synthetic(0.01, 5e-5, 2e-9)[:3]),
        ),
        tmp_path / "p.yaml",
    )
    import yaml

    raw = yaml.safe_load(path.read_text())
    assert raw["kind"] == "prefixplan/prefill-profile" and raw["model"] == "m" and len(raw["samples"]) == 3
    prof = load_profile(path)
    assert prof.model == "m" and not prof.assumed
    assert prof.seconds(1000, 500) == pytest.approx(0.01 + 5e-5 * 1000 + 2e-9 * 1000 * 1000, rel=1e-6)
    (tmp_path / "bad.yaml").write_text("a_s: 1\n")
    with pytest.raises(InputError, match="b_s_per_token"):
        load_profile(tmp_path / "bad.yaml")


def test_calibrate_against_fake_with_known_timing(tmp_path: Path) -> None:
    # The fake advances a virtual clock by a + b*new + c*new*(cached+new/2) and the adapter reads that
    # clock: the timings are exact whatever the machine's load, so the fit must recover the model.
    clock = VirtualClock()
    a, b, c = 0.002, 1.0e-4, 2.0e-8
    with FakeEngine("vllm", block_size=16, ttft_model=(a, b, c), clock=clock) as fake:
        profile, path = calibrate_endpoint(
            fake.url,
            lengths=[64, 256, 512, 1024],
            fractions=[0.0, 0.5, 0.9],
            repeats=2,
            out=tmp_path / "prof.yaml",
            clock=clock,
        )
        sent = [b for _, p, b, _ in fake.requests if p == "/v1/completions"]
    assert path is not None and path.is_file() and profile.fit.n_samples == 24
    assert all(x["max_tokens"] == 1 for x in sent)
    cached = [s.cached for s in profile.samples][:6]
    assert cached == [0, 32, 48, 0, 128, 224]  # reported by the server, block-aligned
    fit = profile.fit
    assert fit.a_s == pytest.approx(a, rel=1e-6) and fit.b_s_per_token == pytest.approx(b, rel=1e-6)
    assert fit.c_s_per_token2 == pytest.approx(c, rel=1e-6) and fit.separable and not fit.clamped
    prof = profile.prefill_profile()
    for new, cached_ in ((512, 0), (256, 256), (64, 0)):
        assert prof.seconds(new, cached_) == pytest.approx(a + b * new + c * new * (cached_ + new / 2), rel=1e-6)


def test_a_second_calibration_of_the_same_server_sends_new_ids(tmp_path: Path) -> None:
    # The first run's prompts stay in the server's prefix cache: a second run with the same ids
    # would time warm prefills as cold ones. Without --seed every run draws new ids.
    clock = VirtualClock()
    with FakeEngine("vllm", block_size=16, ttft_model=(0.002, 1.0e-4, 0.0), clock=clock) as fake:
        runs = [
            calibrate_endpoint(fake.url, lengths=[64, 256, 512], fractions=[0.0], repeats=1, clock=clock)[0]
            for _ in range(2)
        ]
        sent = [tuple(b["prompt"]) for _, p, b, _ in fake.requests if p == "/v1/completions"]
    assert [s.cached for r in runs for s in r.samples] == [0] * 6
    assert len(set(sent)) == len(sent) == 6


def test_fit_never_returns_a_negative_cost_and_says_what_it_cannot_separate() -> None:
    # Timings whose best unconstrained fit has b < 0 (a noisy, attention-heavy range).
    samples = [TimingSample(n, 0, 0.01 + 1e-8 * n * n / 2 - 2e-6 * n) for n in (128, 256, 512, 1024, 2048)]
    fit = fit_prefill(samples)
    assert fit.b_s_per_token >= 0 and fit.c_s_per_token2 >= 0 and fit.a_s >= 0
    assert "b_s_per_token" in fit.clamped or fit.b_s_per_token > 0
    # Only cold prompts of lengths so close that new and new^2/2 are collinear: no split.
    close = [TimingSample(n, 0, 0.005 + 1e-4 * n) for n in (1000, 1001, 1002, 1003)]
    fit = fit_prefill(close)
    assert not fit.separable and not fit.attention_measurable
    assert any("cannot separate" in note for note in fit.notes)


def test_cli_calibrate_unreachable_exit_4(tmp_path: Path) -> None:
    assert (
        main(["calibrate", "--endpoint", free_port_url(), "--out", str(tmp_path / "p.yaml"), "--timeout", "1"])
        == ExitCode.ENDPOINT
    )
    assert main(["calibrate", "--endpoint", "http://x:1", "--fractions", "1.5"]) == ExitCode.USAGE


def test_parse_duration() -> None:
    assert [parse_duration(x) for x in ("90", "90s", "5m", "1h", "0.5s")] == [90, 90, 300, 3600, 0.5]
    for bad in ("x", "-1s", "0"):
        with pytest.raises(UsageError):
            parse_duration(bad)


def test_keepalive_bounded_no_overlap_and_skips_missed_ticks() -> None:
    active = []
    starts: list[float] = []

    def round_(i: int) -> int:
        active.append(1)
        assert len(active) == 1  # never overlapping
        starts.append(time.monotonic())
        time.sleep(0.12 if i == 0 else 0.01)  # first round overruns two ticks
        active.pop()
        return i

    t0 = time.monotonic()
    out = keepalive(round_, 0.05, max_duration_s=0.4, install_signals=False)
    assert time.monotonic() - t0 < 0.6 and out == list(range(len(out))) and 3 <= len(out) <= 7
    assert starts[1] - t0 >= 0.14  # next grid tick after the overrun (0.15), no catch-up burst
    assert keepalive(lambda i: i, 0.01, max_rounds=3, install_signals=False) == [0, 1, 2]


def test_keepalive_stops_cleanly_on_sigterm() -> None:
    timer = threading.Timer(0.15, lambda: os.kill(os.getpid(), signal.SIGTERM))
    before = signal.getsignal(signal.SIGTERM)
    timer.start()
    t0 = time.monotonic()
    out = keepalive(lambda i: i, 10.0, max_duration_s=30)
    assert time.monotonic() - t0 < 2 and out == [0]
    assert signal.getsignal(signal.SIGTERM) is before


def test_status_hit_rate_window_verdict_and_keys(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from prefixplan.store import open_store

    with FakeEngine("vllm", block_size=16) as fake, FakeEngine("sglang", block_size=1) as sg:
        ep = Endpoint(fake.url)
        from prefixplan.engines.vllm import VLLMAdapter

        with VLLMAdapter(ep) as a:
            ids = list(range(100, 164))
            a.complete_ids(ids + [1])
            a.complete_ids(ids + [2])  # 64 of 65 cached
        with open_store() as s:
            s.record_warm_run(endpoint=fake.url, key="sys@v1", version=1, tokens=64, status="verified")
            s.record_warm_run(endpoint=fake.url, key="sys@v1", version=1, tokens=64, status="failed")

        def traffic(_: float) -> None:  # during the window: one fully-cold request on the vLLM fake
            with VLLMAdapter(ep) as a:
                a.complete_ids(list(range(5000, 5032)))

        rows = replica_status([ep, Endpoint(sg.url), Endpoint(free_port_url())], window_s=1.0, sleep=traffic, timeout=2)
        vl, sgl, dead = rows
        assert vl.engine == "vllm" and vl.hit_rate == pytest.approx(64 / (65 + 65 + 32))
        assert vl.window_hit_rate == 0.0 and vl.window_queries == 32 and vl.verdict == "below-target"
        assert vl.keys[0].key == "sys@v1" and vl.keys[0].last_verified and vl.keys[0].last_status == "failed"
        assert sgl.engine == "sglang" and sgl.verdict == "no-traffic"
        assert dead.verdict == "unreachable" and "connection refused" in (dead.error or "")
        code = main(["status", "--endpoint", fake.url, "--target", "0.3", "--json", "-"])
        data = json.loads(capsys.readouterr().out)
        assert code == ExitCode.OK and data["replicas"][0]["verdict"] == "ok"
        assert main(["status", "--endpoint", fake.url, "--target", "0.9"]) == ExitCode.FINDINGS


def test_stop_event_skips_remaining_prefixes() -> None:
    from records import plan_from_record

    from prefixplan.warming.run import WarmOptions, run_warm

    rec = {
        "granularity": {"block_size": 16},
        "candidates": [
            {
                "rank": r,
                "name": f"p{r}",
                "length": 32,
                "token_ids": list(range(r * 100, r * 100 + 32)),
                "marginal_tokens": 10,
                "parent": None,
            }
            for r in (1, 2, 3)
        ],
    }
    stop = threading.Event()
    seen = []

    def progress(res) -> None:
        seen.append(res.status)
        stop.set()  # "SIGTERM" after the first prefix

    with FakeEngine("vllm") as fake:
        rep = run_warm(
            plan_from_record(rec, top=3), [Endpoint(fake.url)], WarmOptions(retries=0), progress=progress, stop=stop
        )
    assert [r.status for r in rep.results] == ["verified", "skipped", "skipped"]
    assert rep.results[1].error == "stopped (SIGTERM/SIGINT)" and rep.exit_code == ExitCode.FINDINGS


def test_calibrate_stores_profile_and_simulate_profile_name_finds_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from prefixplan.store import open_store, resolve_db_path

    # Before any store exists an unknown name is an error and creates no store file.
    with pytest.raises(UsageError, match="unknown prefill profile"):
        resolve_profile("fake-prof")
    assert not resolve_db_path().exists()
    with FakeEngine("vllm", block_size=16, ttft_model=(0.002, 1.0e-4, 0.0)) as fake:
        code = main(
            [
                "calibrate",
                "--endpoint",
                fake.url,
                "--lengths",
                "64,256,512",
                "--fractions",
                "0,0.5",
                "--repeats",
                "1",
                "-o",
                str(tmp_path / "p.yaml"),
                "--name",
                "fake-prof",
                "--json",
                "-",
            ]
        )
        data = json.loads(capsys.readouterr().out)
        url = fake.url
    assert code == 0 and data["stored_as"] == "fake-prof"
    with open_store() as s:
        row = s.get_profile("fake-prof")
        assert [p["name"] for p in s.profiles()] == ["fake-prof"]
    assert row is not None and (row["a_s"], row["b_s_per_token"], row["c_s_per_token2"]) == (
        data["a_s"],
        data["b_s_per_token"],
        data["c_s_per_token2"],
    )
    assert row["endpoint"] == url and row["model"] == "fake-model" and len(row["samples"]) == 6
    assert row["rmse_s"] == data["fit"]["rmse_s"] and row["r2"] == data["fit"]["r2"]
    prof = resolve_profile("fake-prof")  # simulate, warm and calibrate resolve --profile NAME this one way
    assert (prof.a, prof.b, prof.c) == (row["a_s"], row["b_s_per_token"], row["c_s_per_token2"])
    assert not prof.assumed and prof.name == "fake-prof"
    with pytest.raises(UsageError, match="unknown prefill profile"):
        load_profile("fake-prof")  # without the store lookup a name is only a built-in
    log = tmp_path / "log.jsonl"
    log.write_text(
        "".join(
            json.dumps(
                {
                    "model": "m",
                    "user": f"u{i % 3}",
                    "messages": [
                        {"role": "system", "content": "You are a careful assistant. " * 20},
                        {"role": "user", "content": f"q{i}"},
                    ],
                }
            )
            + "\n"
            for i in range(6)
        )
    )
    code = main(["simulate", str(log), "--profile", "fake-prof", "--json", str(tmp_path / "sim.json")])
    assert code == 0 and "fake-prof" in (tmp_path / "sim.json").read_text()
    # Recalibrating under the same name replaces the stored profile.
    with open_store() as s:
        s.save_profile("fake-prof", a_s=1.0, b_s_per_token=2.0, c_s_per_token2=0.0)
    assert resolve_profile("fake-prof").a == 1.0


def test_profiles_migration_upgrades_an_existing_store(tmp_path: Path) -> None:
    import sqlite3

    from prefixplan.store import open_store

    db = tmp_path / "old.db"
    with open_store(db) as s:
        s.record_warm_run(endpoint="e", key="k@v1", version=1, tokens=1, status="verified")
    conn = sqlite3.connect(db)  # make it a store written before the profiles migration
    conn.execute("DROP TABLE profiles")
    conn.execute("DELETE FROM _sqlite_migrations WHERE name = '002_profiles'")
    conn.commit()
    conn.close()
    with open_store(db) as s:
        assert s.get_profile("x") is None and len(s.warm_runs()) == 1
        s.save_profile("x", a_s=0.01, b_s_per_token=1e-5, c_s_per_token2=0.0, samples=[[1, 0, 0.01]])
        assert s.get_profile("x")["samples"] == [[1, 0, 0.01]]
