"""Readiness that stays true: key residency from KV events (tracker), the bounded re-warm schedule
(injected clock), and a gateway in front of two fake replicas whose KV events come from real ZMQ
publishers: ready while the index holds the key's blocks, ``evicted`` after a ``BlockRemoved``,
affinity no longer counting on it, re-warmed, ready again, shown in ``/v1/prefix_keys`` and
``/metrics``."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import httpx
import pytest

pytest.importorskip("zmq")
pytest.importorskip("starlette")
openai = pytest.importorskip("openai")

from prefixplan.engines.endpoint import Endpoint  # noqa: E402
from prefixplan.gateway.config import GatewayConfig  # noqa: E402
from prefixplan.gateway.keyresidency import EVICTED, PENDING, READY, KeyResidency  # noqa: E402
from prefixplan.gateway.rewarm import RewarmConfig, RewarmSchedule  # noqa: E402
from prefixplan.gateway.warm import WarmOutcome  # noqa: E402
from prefixplan.residency.decode import decode_batch  # noqa: E402
from prefixplan.residency.index import ResidencyIndex  # noqa: E402
from prefixplan.residency.subscriber import source_for_engine  # noqa: E402
from prefixplan.routing.policies import RouterConfig  # noqa: E402
from prefixplan.store.gateway_tables import FLEET  # noqa: E402
from tests.kv_event_cases import Publisher, cleared, join, pack, tagged_removed, tagged_stored  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from fake_engine import FakeEngine  # noqa: E402
from gateway_harness import gateway_of, running_gateway, wait_for  # noqa: E402

BS = 4
IDS = list(range(500, 514))  # 14 tokens: 3 full blocks of 4
MODEL = "fake-model"


class Clock:
    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def _live_index(*replicas: str) -> ResidencyIndex:
    index = ResidencyIndex()
    for r in replicas:
        index.add_replica(r, source="test", model=MODEL)
        index.mark_live(r, 0.0)
    return index


def _store(ids=IDS, hashes=(1, 2, 3)) -> bytes:
    return pack([tagged_stored(list(hashes), None, ids[: BS * len(hashes)], BS)])


# --- the tracker --------------------------------------------------------------------------------


def test_a_key_is_ready_while_its_blocks_are_held_and_evicted_within_the_removing_batch() -> None:
    index = _live_index("r0", "r1")
    seen: list[tuple[str, str, str]] = []
    clock = Clock()
    keys = KeyResidency(index, ["r0", "r1"], clock=clock, on_change=lambda *a: seen.append(a))
    keys.track("bot@v1", IDS, {"r0": BS, "r1": BS})
    assert keys.counts("bot@v1", "r0") is False and keys.state("bot@v1", "r0").state == PENDING
    index.apply("r0", decode_batch(_store(hashes=(1, 2))))  # two of its three blocks
    assert keys.counts("bot@v1", "r0") is False and keys.resident_tokens("bot@v1", "r0") == 2 * BS
    index.apply("r0", decode_batch(pack([tagged_stored([3], 2, IDS[8:12], BS)])))
    assert keys.counts("bot@v1", "r0") is True and seen == [("bot@v1", "r0", READY)]
    assert keys.state("bot@v1", "r0").last_verified == clock.t
    clock.t += 5
    index.apply("r0", decode_batch(pack([tagged_removed([2])])))  # the middle block: the head stays
    rec = keys.state("bot@v1", "r0")
    assert (rec.state, rec.resident, rec.evictions) == (EVICTED, 1, 1)
    assert seen[-1] == ("bot@v1", "r0", EVICTED) and keys.counts("bot@v1", "r0") is False
    assert keys.counts("bot@v1", "r1") is False  # never seen there
    index.apply("r0", decode_batch(pack([tagged_stored([7, 8], 1, IDS[4:12], BS)])))  # re-warmed
    assert keys.counts("bot@v1", "r0") is True and keys.state("bot@v1", "r0").last_verified == clock.t
    index.apply("r0", decode_batch(pack([cleared()])))  # AllBlocksCleared
    assert keys.state("bot@v1", "r0").state == EVICTED and keys.state("bot@v1", "r0").evictions == 2


def test_a_replica_without_events_has_no_view_and_a_salted_key_is_its_own() -> None:
    index = _live_index("r0")
    index.add_replica("r1")  # no source: events off
    keys = KeyResidency(index, ["r0", "r1"])
    keys.track("acme/bot@v1", IDS, {"r0": BS, "r1": BS}, salt="acme-salt")
    index.apply("r0", decode_batch(_store()))  # unsalted blocks: another namespace
    assert keys.counts("acme/bot@v1", "r0") is False
    assert keys.counts("acme/bot@v1", "r1") is None and keys.view("acme/bot@v1").keys() == {"r0"}
    salted = tagged_stored([11, 12, 13], None, IDS[:12], BS, extra_keys=[["acme-salt"], None, None])
    index.apply("r0", decode_batch(pack([salted])))
    assert keys.counts("acme/bot@v1", "r0") is True


# --- the re-warm schedule ------------------------------------------------------------------------


def test_rewarms_back_off_and_respect_the_per_minute_limit() -> None:
    clock = Clock(0.0)
    s = RewarmSchedule(RewarmConfig(backoff_s=5, max_backoff_s=20, per_minute=100, stable_s=100), clock)
    s.evicted("k", "r0")
    assert s.take() == [("k", "r0")]  # the first at once
    assert s.take() == []  # in flight: nothing more
    for attempt, wait in ((2, 5.0), (3, 10.0), (4, 20.0), (5, 20.0)):  # 5, 10, 20, capped at 20
        clock.t += 1
        s.evicted("k", "r0")  # thrashing: evicted again right after the re-warm
        clock.t += wait - 1.5
        assert s.take() == [], f"attempt {attempt} before its back-off"
        clock.t += 0.5
        assert s.take() == [("k", "r0")], f"attempt {attempt} after {wait} s"
    # resident for stable_s: the back-off starts over
    s.resident("k", "r0")
    clock.t += 100
    s.evicted("k", "r0")
    assert s.take() == [("k", "r0")]
    # the per-minute limit across keys: 3 in any 60 s, the rest stay due
    s = RewarmSchedule(RewarmConfig(backoff_s=5, per_minute=3), clock)
    for i in range(5):
        s.evicted(f"x{i}", "r1")
    assert len(s.take()) == 3 and s.deferred == 2 and s.pending() == 2
    clock.t += 30
    assert s.take() == [] and s.pending() == 2
    clock.t += 31
    assert sorted(s.take()) == [("x3", "r1"), ("x4", "r1")]
    # a failed re-warm is due again after its back-off
    s.failed("x3", "r1")
    clock.t += 4.9
    assert s.take() == []
    clock.t += 0.2
    assert s.take() == [("x3", "r1")]


def test_rewarm_config_is_checked() -> None:
    from prefixplan.errors import UsageError

    with pytest.raises(UsageError):
        RewarmConfig(keys="some")
    with pytest.raises(UsageError):
        RewarmConfig(per_minute=0)


# --- a gateway following its replicas' KV events --------------------------------------------------

SYSTEM = {"role": "system", "content": "You are the Acme support bot.\n" * 8}


def _chat(url: str, content: str, key: str, system: bool = False):
    messages = ([SYSTEM] if system else []) + [{"role": "user", "content": content}]
    client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
    return client.chat.completions.with_raw_response.create(
        model=MODEL, messages=messages, max_tokens=2, extra_body={"prefix_key": key}
    )


def test_the_gateway_follows_evictions_and_rewarms(tmp_path: Path) -> None:
    calls: list[tuple[str, tuple[str, ...]]] = []

    def warm_fn(kv, endpoints, options, **kw) -> WarmOutcome:
        labels = tuple(e.label for e in endpoints)
        calls.append((kv.label, labels))
        return WarmOutcome({FLEET: "ready", **dict.fromkeys(labels, "verified")}, tuple(IDS), dict.fromkeys(labels, BS))

    ends = {r: (f"ipc://{tmp_path}/{r}.pub", f"ipc://{tmp_path}/{r}.replay") for r in ("r0", "r1")}
    pubs = {r: Publisher(*ends[r]) for r in ends}
    try:
        with FakeEngine() as a, FakeEngine() as b:
            eps = (Endpoint(a.url, name="r0"), Endpoint(b.url, name="r1"))
            sources = tuple(
                source_for_engine(r, ends[r][0], host="127.0.0.1", replay_endpoint=ends[r][1], model=MODEL)
                for r in ends
            )
            config = GatewayConfig(
                endpoints=eps,
                db=str(tmp_path / "gw.db"),
                router=RouterConfig(policy="round-robin"),
                kv_events=sources,
                rewarm=RewarmConfig(keys="all", backoff_s=1.0, per_minute=10),
            )
            with running_gateway(config, warm_fn=warm_fn) as (url, app):
                g = gateway_of(app)
                index = g.events.index
                _chat(url, "hello", "bot@v1", system=True)  # registers and warms
                wait_for(lambda: g.events.keys.tracked("bot@v1"), "the warm's ids tracked")
                state = httpx.get(url + "/v1/prefix_keys/bot@v1").json()
                assert state["status"] == "ready"  # verified by the warm, but the events say nothing yet:
                assert {r: v["state"] for r, v in state["residency"].items()} == {"r0": "pending", "r1": "pending"}
                assert g.router.ready_replicas("bot@v1") == frozenset()  # routing does not count on it
                for r in ("r0", "r1"):
                    join(pubs[r], index, r, _store())
                wait_for(lambda: g.router.ready_replicas("bot@v1") == frozenset({0, 1}), "ready on both")
                picks = {_chat(url, f"q{i}", "bot").headers["x-prefixplan-replica"] for i in range(4)}
                assert picks == {"r0", "r1"}

                pubs["r1"].publish(pack([tagged_removed([3])]))  # the engine evicted its last block
                wait_for(lambda: g.router.ready_replicas("bot@v1") == frozenset({0}), "evicted on r1")
                res = httpx.get(url + "/v1/prefix_keys/bot@v1").json()["residency"]
                assert res["r1"]["state"] == "evicted" and res["r1"]["resident_blocks"] == 2
                assert res["r1"]["evictions"] == 1 and res["r0"]["state"] == "ready"
                for i in range(3):
                    r = _chat(url, f"after{i}", "bot")
                    assert (r.headers["x-prefixplan-replica"], r.headers["x-prefixplan-route"]) == ("r0", "affinity")

                wait_for(lambda: ("bot@v1", ("r1",)) in calls, "the re-warm of r1")
                pubs["r1"].publish(pack([tagged_stored([9], 2, IDS[8:12], BS)]))  # what the re-warm stored
                wait_for(lambda: g.router.ready_replicas("bot@v1") == frozenset({0, 1}), "ready again")
                res = httpx.get(url + "/v1/prefix_keys/bot@v1").json()["residency"]
                assert (res["r1"]["state"], res["r1"]["rewarms"], res["r1"]["evictions"]) == ("ready", 1, 1)
                assert res["r1"]["kv_events"] == "live" and res["r1"]["last_verified"] is not None
                text = httpx.get(url + "/metrics").text
    finally:
        for p in pubs.values():
            p.close()
    for line in (
        'prefixplan_gateway_key_resident_blocks{key="bot@v1",replica="r1"} 3.0',
        'prefixplan_gateway_key_evictions_total{key="bot@v1",replica="r1"} 1.0',
        'prefixplan_gateway_key_rewarms_total{key="bot@v1",replica="r1"} 1.0',
        'prefixplan_kv_event_batches_applied_total{replica="r1"}',
        'prefixplan_kv_events_live{replica="r0"} 1.0',
        'prefixplan_kv_event_gaps_total{replica="r0"} 0.0',
    ):
        assert line in text, line
    # each keyed request after the key was ready had a prediction (the fake engine reports its own)
    assert "prefixplan_gateway_cached_predictions_total" in text
    # prefixplan status --key-stats: the residency the gateway wrote at its last flush (its stop)
    from prefixplan.api import StatusRequest, run_status

    rows = run_status(StatusRequest(key_stats=True, db=str(tmp_path / "gw.db"))).keys
    res = {(r["key"], r["replica"]): r["residency"] for r in rows if r["key"] == "bot@v1"}
    assert {k: (v["state"], v["resident_blocks"], v["evictions"], v["rewarms"]) for k, v in res.items()} == {
        ("bot@v1", "r0"): ("ready", 3, 0, 0),
        ("bot@v1", "r1"): ("ready", 3, 1, 1),
    }
    assert all(v["last_verified"] for v in res.values())
    from rich.console import Console

    from prefixplan.report.console_router import render_key_stats

    console = Console(record=True, width=250)
    render_key_stats(rows, console)
    shown = console.export_text()
    assert "resident (KV events)" in shown and shown.count("ready 3/3 blocks") == 2


def test_event_sources_from_the_endpoints_file(tmp_path: Path) -> None:
    from prefixplan.errors import InputError
    from prefixplan.gateway.events import event_sources
    from prefixplan.warming.source import load_endpoints

    with FakeEngine() as fake:  # answers no /kv_event_sources: auto finds nothing
        fleet = tmp_path / "fleet.yaml"
        fleet.write_text(
            "replicas:\n"
            "  - url: http://10.0.0.5:8000\n    name: a\n"
            "    kv_events: {endpoint: 'tcp://*:5557', replay_endpoint: 'tcp://*:5558', topic: kv}\n"
            "  - url: http://10.0.0.6:8000\n    name: b\n"
            "    kv_events: {endpoint: 'tcp://10.0.0.1:6000', model: served}\n"
            f"  - url: {fake.url}\n    name: c\n    kv_events: auto\n"
            "  - url: http://10.0.0.7:8000\n    name: d\n"
        )
        eps = load_endpoints(fleet)
        got = {s.replica: s for s in event_sources(str(fleet), eps, model="m")}
    assert set(got) == {"a", "b"}
    a, b = got["a"], got["b"]
    assert (a.endpoint, a.bind, a.replay_endpoint, a.topic, a.model) == (
        "tcp://10.0.0.5:5557",
        False,
        "tcp://10.0.0.5:5558",
        "kv",
        "m",
    )
    assert (b.endpoint, b.bind, b.replay_endpoint, b.model) == ("tcp://10.0.0.1:6000", True, None, "served")
    fleet.write_text("replicas:\n  - url: http://10.0.0.5:8000\n    kv_events: {replay_endpoint: 'tcp://*:1'}\n")
    with pytest.raises(InputError, match="needs an endpoint"):
        event_sources(str(fleet), load_endpoints(fleet))


def test_a_key_the_events_do_not_follow_is_warmed_once_to_learn_its_ids(tmp_path: Path) -> None:
    from prefixplan.gateway.events import KeyEvents
    from prefixplan.gateway.prefix import WirePart
    from prefixplan.gateway.state import KeyVersion

    kv = KeyVersion("bot", 1, "h", "h", (WirePart("system", "be brief"),))
    assert not KeyEvents((), ["r0"]).untracked(kv)  # no events: nothing to learn
    source = source_for_engine("r0", f"ipc://{tmp_path}/kv.pub", host="127.0.0.1", model=MODEL)
    events = KeyEvents((source,), ["r0"])  # never started: no sockets
    assert events.untracked(kv) and not events.untracked(kv)  # once
    other = KeyVersion("bot", 2, "h2", "h2", (WirePart("system", "be brief"),))
    events.warmed(other, WarmOutcome({FLEET: "ready", "r0": "verified"}, tuple(IDS), {"r0": BS}))
    assert events.keys.tracked("bot@v2") and not events.untracked(other)  # warmed: tracked already
    assert not events.untracked(replace(kv, version=3, status="superseded"))


@pytest.mark.parametrize(
    ("mode", "pinned", "due"), [("pinned", True, 1), ("pinned", False, 0), ("all", False, 1), ("off", True, 0)]
)
def test_which_evicted_keys_are_rewarmed(tmp_path: Path, mode: str, pinned: bool, due: int) -> None:
    from prefixplan.gateway.events import KeyEvents
    from prefixplan.gateway.prefix import WirePart
    from prefixplan.gateway.state import KeyVersion

    kv = KeyVersion("bot", 1, "h", "h", (WirePart("system", "be brief"),))
    source = source_for_engine("r0", f"ipc://{tmp_path}/kv.pub", host="127.0.0.1", model=MODEL)
    clock = Clock(0.0)
    events = KeyEvents((source,), ["r0"], rewarm=RewarmConfig(keys=mode), monotonic=clock)
    events.pinned = {kv.label} if pinned else set()
    events.warmed(kv, WarmOutcome({FLEET: "ready", "r0": "verified"}, tuple(IDS), {"r0": BS}))
    events.changed(kv.label, "r0", EVICTED)
    assert events.schedule.pending() == due
    events.changed(kv.label, "r0", READY)  # resident again before its turn: nothing due
    assert events.schedule.pending() == 0
    events.versions[kv.label] = replace(kv, status="superseded")
    events.changed(kv.label, "r0", EVICTED)  # a superseded version is never re-warmed
    assert events.schedule.pending() == 0


def test_the_pinned_locked_recipes_are_the_ones_kept_warm_by_default() -> None:
    from prefixplan.gateway.app import locked_versions, pinned_labels
    from prefixplan.keys.recipes import load_recipes

    config = GatewayConfig(
        endpoints=(Endpoint("http://127.0.0.1:9", name="r0"),),
        recipes=str(ROOT / "recipes"),
        lock=str(ROOT / "prefixplan.lock"),
    )
    locked = locked_versions(config)
    want = {str(r.key) for r in load_recipes(ROOT / "recipes") if r.pin}
    assert want and pinned_labels(config, locked) == want
    assert len(locked) > len(want)  # some locked recipes are not pinned
