"""Console output of ``prefixplan warm``: the dry-run plan, or per-replica pre-flight and the fleet verdict per key."""

from __future__ import annotations

from typing import Any

from rich.console import Console


def render_warm(con: Console, data: dict[str, Any]) -> None:
    from rich.markup import escape
    from rich.table import Table

    if data.get("dry_run"):
        plan = data["plan"]
        t = Table(title=f"warm plan (block size {plan['block_size']})")
        for col in ("order", "rank", "key / name", "tokens", "covers", "est. prefill s"):
            t.add_column(col)
        for i, it in enumerate(plan["items"], start=1):
            t.add_row(
                str(i),
                str(it["rank"]),
                escape(it["key"] or it["name"]),
                str(it["tokens"]),
                ",".join(map(str, it["covers"])) or "-",
                f"{it['est_prefill_s']:.3f}",
            )
        con.print(t)
        for s in plan["skipped"]:
            con.print(f"[dim]skipped rank {s['rank']}: {escape(s['reason'])}[/]")
        mem = plan["memory_bytes"]
        con.print(
            f"{len(plan['items'])} requests, {plan['memory_tokens']} resident tokens"
            + (f" ({mem / 1e9:.3f} GB KV)" if mem else "")
            + f", est. prefill {plan['est_prefill_s']:.3f} s (profile {plan['profile'].get('name', '')}: "
            + f"{escape(str(plan['profile'].get('provenance') or plan['profile'].get('source', '')))})"
        )
        return
    for r in data["replicas"]:
        if r["engine"] is None and r["error"]:
            con.print(f"[red]{escape(r['error'])}[/]")
            continue
        line = (
            f"{escape(r['endpoint'])}: {r['engine']} model {escape(str(r['model']))}, block {r['block_size']}, "
            f"tokenizer {escape(r['tokenizer_check'])}"
        )
        if r["error"]:
            line += f" [red]{escape(r['error'])}[/]"
        con.print(line)
    t = Table(title="warm")
    show_via = any(r.get("via") == "chat" for r in data["results"])
    for col in (
        "rank",
        "key",
        "tokens",
        "status",
        "verified",
        "cold TTFT ms",
        "probe TTFT ms",
        "cached",
        *(("via",) if show_via else ()),
    ):
        t.add_column(col)
    for k in data["keys"]:
        mine = [r for r in data["results"] if r["rank"] == k["rank"] and r["status"] == "verified"]
        cold = [r["cold_ttft_s"] for r in mine if r["cold_ttft_s"] is not None]
        warm_ = [r["warm_ttft_s"] for r in mine if r["warm_ttft_s"] is not None]
        cached = [r["cached_tokens"] for r in mine if r["cached_tokens"] is not None]
        color = {"ready": "green", "partial": "yellow", "failed": "red"}[k["status"]]
        t.add_row(
            str(k["rank"]),
            escape(k["key"]),
            str(k["tokens"]),
            f"[{color}]{k['status']}[/]",
            f"{k['verified']}/{k['replicas']}",
            f"{1000 * max(cold):.1f}" if cold else "-",
            f"{1000 * max(warm_):.1f}" if warm_ else "-",
            str(min(cached)) if cached else "-",
            *(
                (
                    ",".join(
                        sorted({str(r["via"]) for r in data["results"] if r["rank"] == k["rank"] and r.get("via")})
                    )
                    or "-",
                )
                if show_via
                else ()
            ),
        )
    con.print(t)
    for k in data["keys"]:
        for e in k["errors"]:
            con.print(f"  [red]rank {k['rank']}[/] {escape(e)}")
    con.print(f"warm: {data['status']} ({data['duration_s']:.2f} s)")
