"""``simulate --isolate-by``: what per-tenant ``cache_salt`` costs, on the console."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.console import Console


def isolation_lines(doc: Mapping[str, Any]) -> list[str]:
    """The three hit rates and the two differences, one line each (plain text)."""
    hits, rate = doc["hit_tokens"], doc["hit_rate_tokens"]
    fleet = doc.get("fleet")
    on_fleet = []
    if fleet:
        f = fleet["hit_tokens"]
        on_fleet = [
            f"  on {fleet['replicas']} replicas ({fleet['router']}; the router does not see the salt): "
            f"{f['shared']:,} shared, {f['salted']:,} salted, {f['salt_after_shared_prefix']:,} with the salt "
            "after the prefix"
        ]
    return [
        f"salted by {doc['by']} ({doc['tenants']:,} tenants; {doc['field']}), at {doc['run']}:",
        f"  shared across tenants (no salt)       {hits['shared']:>14,} hit tokens  {100 * rate['shared']:5.1f}%",
        f"  salted per tenant                     {hits['salted']:>14,} hit tokens  {100 * rate['salted']:5.1f}%",
        f"  salt after the system/tool prefix     {hits['salt_after_shared_prefix']:>14,} hit tokens  "
        f"{100 * rate['salt_after_shared_prefix']:5.1f}%",
        f"  isolation costs {doc['isolation_cost_tokens']:,} tokens; a salt boundary after the shared prefix "
        f"returns {doc['salt_boundary_returns_tokens']:,}; {doc['cross_tenant_beyond_prefix_tokens']:,} were "
        "shared across tenants beyond it (user-authored or later turns)",
        *on_fleet,
    ]


def render_isolation(doc: Mapping[str, Any], console: Console) -> None:
    """The isolation figures and the prefixes tenants share that hold nothing user-authored."""
    from rich.markup import escape
    from rich.table import Table

    console.print("[bold]Isolation (the engines' cache_salt)[/]")
    for line in isolation_lines(doc):
        console.print(escape(line))
    if doc["requests_without_tenant"]:
        console.print(
            f"[dim]note: {doc['requests_without_tenant']:,} requests have no tenant (the field is missing, or not "
            "a string or integer): they share one salt[/]"
        )
    if not doc["shared_prefixes"]:
        return
    table = Table(
        title=f"Prefixes shared across tenants, safe to share (system prompt, tools; {doc['shared_prefixes_total']:,} in all)",
        title_justify="left",
    )
    for col in ("prefix", "id", "tokens", "requests", "tenants"):
        table.add_column(col, justify="left" if col in ("prefix", "id") else "right")
    for p in doc["shared_prefixes"]:
        table.add_row(
            escape(p["label"] or "template"), p["id"], f"{p['tokens']:,}", f"{p['requests']:,}", f"{p['tenants']:,}"
        )
    console.print(table)
