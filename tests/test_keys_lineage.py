"""The lineage rule: edited prompts continue a name, unrelated prompts get a new one."""

from __future__ import annotations

from prefixplan.keys import content_hash
from prefixplan.keys.lineage import LineageRow, assign_lineage, lineage_data, normalise_text
from prefixplan.store import open_store

SUPPORT = (
    "You are Pia, the customer-support assistant of Fernweh Outdoor, an online shop for hiking gear.\n"
    "Returns are free within 30 days of delivery for unused items.\n"
    "Escalate to a human when the customer reports a safety problem.\n"
)
LEGAL = "You translate commercial contracts from German into English and keep the clause numbering intact.\n"


def _register(store, kind: str, text: str | None, tools: list[str]) -> str:  # type: ignore[no-untyped-def]
    """What analyze does per candidate: name by lineage, record the version."""
    name = assign_lineage(kind, system_text=text, tool_names=tools, existing=store.lineage_names())
    data = (text or "").encode() + "\x00".join(sorted(tools)).encode()
    rec = store.record_version(
        name,
        content_hash=content_hash([("system", data)]),
        kind=kind,
        source="analysis",
        lineage=lineage_data(text, tools),
    )
    return str(rec.key)


def test_edited_system_prompt_is_next_version_of_same_name() -> None:
    with open_store() as s:
        assert _register(s, "system", SUPPORT, []) == "system-you-are-pia-the@v1"
        edited_end = SUPPORT + "Never ask for passwords.\n"
        assert _register(s, "system", edited_end, []) == "system-you-are-pia-the@v2"
        edited_start = SUPPORT.replace("You are Pia", "You are Pia Lind")
        assert _register(s, "system", edited_start, []) == "system-you-are-pia-the@v3"
        assert _register(s, "system", edited_start, []) == "system-you-are-pia-the@v3"  # unchanged: same version
        dated = "Current date: 2025-03-01\n" + SUPPORT
        other_day = "Current date: 2025-03-02\n" + SUPPORT
        # a line added in front is still an edit of the same prompt (high similarity) ...
        assert _register(s, "system", dated, []) == "system-you-are-pia-the@v4"
        # ... and a date that changes daily makes a new version each day, not a new name
        assert _register(s, "system", other_day, []) == "system-you-are-pia-the@v5"


def test_unrelated_prompt_gets_new_name() -> None:
    with open_store() as s:
        a = _register(s, "system", SUPPORT, [])
        b = _register(s, "system", LEGAL, [])
        assert a.split("@")[0] != b.split("@")[0]
        assert b == "system-you-translate-commercial-contracts@v1"


def test_tools_lineage_by_name_set() -> None:
    rows = [LineageRow("tools-lookup-refund", "tools", 2, tool_names=("lookup", "refund"))]
    assert (
        assign_lineage("tools", system_text=None, tool_names=["refund", "lookup"], existing=rows)
        == "tools-lookup-refund"
    )
    new = assign_lineage("tools", system_text=None, tool_names=["lookup", "refund", "escalate"], existing=rows)
    assert new == "tools-escalate-lookup-refund"
    many = assign_lineage("tools", system_text=None, tool_names=[f"t{i}" for i in range(9)], existing=[])
    assert many.startswith("tools-t0-t1-and-7-more-") and len(many) < 60
    assert many == assign_lineage(
        "tools", system_text=None, tool_names=[f"t{i}" for i in reversed(range(9))], existing=[]
    )


def test_kind_and_collisions() -> None:
    rows = [LineageRow("system-you-are-pia-the", "system+tools", 1, system_head=SUPPORT, tool_names=("a",))]
    # same text but a different kind is a different lineage, and the name is de-duplicated
    assert assign_lineage("system", system_text=SUPPORT, tool_names=[], existing=rows) == "system-you-are-pia-the-2"
    # system+tools must also match the tool set
    assert (
        assign_lineage("system+tools", system_text=SUPPORT, tool_names=["a"], existing=rows) == "system-you-are-pia-the"
    )
    assert (
        assign_lineage("system+tools", system_text=SUPPORT, tool_names=["b"], existing=rows) != "system-you-are-pia-the"
    )
    rag = assign_lineage("rag", system_text=None, tool_names=[], existing=[])
    assert rag.startswith("rag-") and rag == assign_lineage("rag", system_text=None, tool_names=[], existing=[])


def test_normalise_masks_volatile_runs() -> None:
    assert normalise_text("id 3f2b1c9e-0a4b-4c1d-9e7f-1234567890ab  at 2025-03-01\n\n x") == "id <uuid> at 0-0-0 x"
