"""Every command-line flag, defined once: one name, one meaning, one help text, one metavar.

Commands take their options from here (defaults may differ per command; the meaning may not).
``tests/test_cli_contract.py`` fails when two commands give a flag name different help, and
docs/cli.md lists the table. Old spellings kept for one release are hidden options whose
callback warns (:func:`deprecated`); the command then prefers the new value.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

# -- inputs: logs and tokenizers -------------------------------------------------------------
Logs = Annotated[
    list[str],
    typer.Argument(
        metavar="LOG...",
        help="Log files, globs, folders, s3:// gs:// az:// https:// URLs, or - for stdin (.gz/.zst read transparently).",
        show_default=False,
    ),
]
LogFormat = Annotated[
    str,
    typer.Option(
        "--log-format",
        metavar="FORMAT",
        help="Input log format: auto (detect per file and line), a format name (prefixplan formats lists them), or parquet/csv.",
    ),
]
Columns = Annotated[
    Optional[str],
    typer.Option(
        "--columns",
        metavar="FIELD=COLUMN,...",
        help="Columns of Parquet/CSV logs: messages=request.messages,timestamp=ts,... (default: same-named columns).",
    ),
]
Since = Annotated[
    Optional[str],
    typer.Option("--since", metavar="TIME", help="Keep requests at or after TIME (ISO-8601 or epoch seconds)."),
]
Until = Annotated[Optional[str], typer.Option("--until", metavar="TIME", help="Keep requests before TIME.")]
Sample = Annotated[
    Optional[float],
    typer.Option("--sample", metavar="FRACTION", help="Keep this deterministic fraction of lines, e.g. 0.1."),
]
Strict = Annotated[
    bool, typer.Option("--strict", metavar="", help="Fail on the first malformed line instead of counting it.")
]
TraceBlock = Annotated[
    int, typer.Option("--trace-block-size", metavar="N", help="Tokens per block of Mooncake hash_ids traces.")
]
Tokenizer = Annotated[
    Optional[str],
    typer.Option(
        "--tokenizer",
        "-t",
        metavar="SPEC",
        help="Tokenizer: hf:PATH or hf:ORG/NAME (HF cache), mistral:nemo (default), tiktoken:NAME, vllm:URL or sglang:URL (the server's /tokenize), or auto (per model, docs/logs.md).",
        envvar="PREFIXPLAN_TOKENIZER",
    ),
]
TokenizerMap = Annotated[
    Optional[list[str]],
    typer.Option(
        "--tokenizer-map", metavar="MODEL=SPEC", help="Tokenizer per model for logs that mix models (repeatable)."
    ),
]
ChatTemplate = Annotated[
    Optional[Path],
    typer.Option("--chat-template", metavar="FILE", help="Jinja chat template overriding the tokenizer's (hf: only)."),
]
TemplateKwargs = Annotated[
    Optional[str],
    typer.Option(
        "--template-kwargs",
        metavar="KWARGS",
        help='Extra chat-template variables: JSON or k=v,... e.g. date_string="26 Jul 2024".',
    ),
]

# -- the cache model ---------------------------------------------------------------------------
Granularity = Annotated[
    str,
    typer.Option(
        "--granularity",
        metavar="ENGINE",
        help="Cache granularity preset: vllm (16-token blocks), sglang (1-token pages), lmcache (256-token chunks).",
    ),
]
BlockSize = Annotated[
    Optional[int],
    typer.Option(
        "--block-size", metavar="N", help="Cache block/page size in tokens (overrides --granularity or the server's)."
    ),
]
Capacity = Annotated[
    Optional[str],
    typer.Option(
        "--capacity",
        metavar="SIZE[,SIZE...]",
        help="KV cache capacity: tokens (2e6) or bytes with a KV size (40GB); simulate takes a comma-separated list.",
    ),
]
Model = Annotated[
    Optional[str],
    typer.Option(
        "--model",
        metavar="NAME",
        help="Model name: the one a server serves (default its first), and whose KV size (report, simulate), prices and derived prefill profile (simulate) are used.",
    ),
]
ModelConfig = Annotated[
    Optional[Path],
    typer.Option(
        "--model-config",
        metavar="FILE",
        help="Model config.json giving the KV bytes per token (simulate: and the shape of the derived prefill profile).",
    ),
]
Profile = Annotated[
    Optional[str],
    typer.Option(
        "--profile",
        metavar="PROFILE",
        help="Prefill-time profile: a built-in name (h100-8b, ...), a YAML file, or a name stored by calibrate.",
    ),
]
Gpu = Annotated[
    Optional[str],
    typer.Option(
        "--gpu",
        metavar="NAME",
        help="Derive the prefill profile for the model (--model/--model-config) on this GPU: H100, H200, B200, A100, L40S, L4, MI300X.",
    ),
]
TensorParallel = Annotated[
    Optional[int],
    typer.Option(
        "--tensor-parallel", metavar="N", help="GPUs per replica (tensor parallelism) of the derived profile."
    ),
]
Efficiency = Annotated[
    Optional[float],
    typer.Option(
        "--efficiency",
        metavar="FRACTION",
        help="Share of the GPU's peak FLOP/s a prefill reaches (derived profile; 0.5).",
    ),
]
RateScale = Annotated[
    Optional[float],
    typer.Option(
        "--rate-scale",
        metavar="X",
        help="Replay at X times the log's arrival rate through a queue per replica: TTFT under load (a model).",
    ),
]
MaxBatchedTokens = Annotated[
    Optional[int],
    typer.Option(
        "--max-num-batched-tokens",
        metavar="N",
        help="Tokens one engine step computes, decodes and prefill chunks (--rate-scale; default vLLM's for the GPU).",
    ),
]
MaxSeqs = Annotated[
    Optional[int],
    typer.Option(
        "--max-num-seqs",
        metavar="N",
        help="Requests a replica runs at once (--rate-scale; default vLLM's for the GPU).",
    ),
]

# -- selecting prefixes ------------------------------------------------------------------------
Analysis = Annotated[
    Optional[Path],
    typer.Option(
        "--analysis",
        metavar="FILE",
        help="An analysis record (prefixplan analyze --json FILE); warm defaults to the store's latest.",
    ),
]
Top = Annotated[
    Optional[int],
    typer.Option(
        "--top",
        metavar="N",
        min=0,
        help="How many top-ranked prefixes: analyze shows and records, report lists, warm sends, simulate pins them.",
    ),
]
RECIPES_OPTION = typer.Option(
    "--recipes", metavar="PATH", help="Recipes folder (*.yaml) or recipe file (default: recipes)."
)
LOCK_OPTION = typer.Option("--lock", metavar="FILE", help="The lock file (default: prefixplan.lock).")
Recipes = Annotated[Path, RECIPES_OPTION]
LockFile = Annotated[Path, LOCK_OPTION]

# -- servers -------------------------------------------------------------------------------------
Endpoint = Annotated[
    Optional[list[str]],
    typer.Option("--endpoint", metavar="URL", help="Server (replica) URL; warm and status take several."),
]
EndpointsFile = Annotated[
    Optional[Path],
    typer.Option(
        "--endpoints", metavar="FILE", help="YAML file of replicas (url, name, headers, api_key_env, verify_tls)."
    ),
]
Engine = Annotated[
    str,
    typer.Option("--engine", metavar="ENGINE", help="Server type: auto (detect), vllm, sglang or openai-compatible."),
]
ApiKeyEnv = Annotated[
    Optional[str],
    typer.Option(
        "--api-key-env",
        metavar="VAR",
        help="Name of the environment variable holding the API key (default PREFIXPLAN_API_KEY).",
    ),
]
Timeout = Annotated[float, typer.Option("--timeout", metavar="SECONDS", help="Seconds each request may take in all.")]

# -- replicas and routing (simulate --replicas, gateway) ---------------------------------------
Replicas = Annotated[
    Optional[int],
    typer.Option("--replicas", metavar="N", help="Simulate a fleet of N replicas, each its own cache."),
]
Router = Annotated[
    Optional[str],
    typer.Option(
        "--router",
        metavar="POLICY",
        help="Routing of requests without a ready key: cache-aware, round-robin, prefix-hash or residency "
        "(resident prefix against load: docs/gateway.md; simulate: comma-separated, and keyed).",
    ),
]

Retries = Annotated[int, typer.Option("--retries", metavar="N", help="Retries per request on refused/timeout/5xx.")]

# -- the gateway -------------------------------------------------------------------------------
Host = Annotated[str, typer.Option("--host", metavar="ADDRESS", help="Address to listen on.")]
Port = Annotated[int, typer.Option("--port", metavar="PORT", help="TCP port to listen on.")]
State = Annotated[
    Optional[str],
    typer.Option(
        "--state",
        metavar="URL",
        help="Shared gateway state: redis://HOST:PORT/DB (default: the SQLite store, one gateway).",
    ),
]
AutoVersion = Annotated[
    bool,
    typer.Option(
        "--auto-version",
        metavar="",
        help="A changed prefix under a bare key name registers the next version instead of 409.",
    ),
]
MaxBodyBytes = Annotated[
    int, typer.Option("--max-body-bytes", metavar="BYTES", help="Largest request body accepted (413 above).")
]
ClientKeyHash = Annotated[
    Optional[list[str]],
    typer.Option(
        "--client-key-hash",
        metavar="sha256:HEX",
        help="SHA-256 of an accepted client API key (repeatable; see docs/gateway.md).",
    ),
]
ClientKeysEnv = Annotated[
    Optional[str],
    typer.Option(
        "--client-keys-env",
        metavar="VAR",
        help="Environment variable holding accepted client API keys, comma-separated.",
    ),
]
Tenants = Annotated[
    Optional[Path],
    typer.Option(
        "--tenants",
        metavar="FILE",
        help="Tenants file: client keys per tenant, who may register, cache salts, shared keys "
        "(docs/gateway.md). Without it each client key is a tenant of its own.",
    ),
]
MetricsTokenEnv = Annotated[
    Optional[str],
    typer.Option(
        "--metrics-token-env",
        metavar="VAR",
        help="Environment variable holding the bearer token /metrics requires (default: /metrics is open).",
    ),
]
HeaderTimeout = Annotated[
    float,
    typer.Option(
        "--header-timeout", metavar="SECONDS", help="Seconds a connection may take to send a request's headers."
    ),
]
BodyTimeout = Annotated[
    float, typer.Option("--body-timeout", metavar="SECONDS", help="Seconds a request body may take to arrive (408).")
]
MaxUploads = Annotated[
    int,
    typer.Option(
        "--max-uploads", metavar="N", help="Request bodies read at once; more are refused (503, Retry-After)."
    ),
]
LogPrompts = Annotated[
    bool, typer.Option("--log-prompts", metavar="", help="Log request bodies (prompts are never logged otherwise).")
]
Warm = Annotated[
    bool,
    typer.Option("--warm/--no-warm", metavar="", help="Warm newly registered key versions on every replica."),
]

KeyStats = Annotated[
    bool,
    typer.Option(
        "--key-stats", metavar="", help="Show the per-key hit statistics prefixplan gateway wrote to the store."
    ),
]

# -- outputs and the store -------------------------------------------------------------------
Json = Annotated[
    Optional[str], typer.Option("--json", metavar="FILE", help="Write the result as JSON to FILE ('-' = stdout).")
]
OUT_HELP = "The file to write (calibrate: the profile YAML; trace: the trace, or the export)."
TraceOut = Annotated[
    Optional[str],
    typer.Option(
        "--trace-out",
        metavar="FILE",
        help="Also write the rendered requests as a trace file (Parquet) that analyze and simulate read "
        "without re-rendering (a path, or s3://, gs://, az:// URL).",
    ),
]
Workers = Annotated[
    Optional[int],
    typer.Option(
        "--workers",
        metavar="N",
        help="Render in N processes, this one included (default: one per core; 1 = only this one); with "
        "--executor ray, N actors (default: one per cluster CPU).",
    ),
]
Executor = Annotated[
    str,
    typer.Option(
        "--executor",
        metavar="local|ray",
        help="Where rendering runs: local processes, or a Ray cluster (one actor per input file; the ray "
        "extra of prefixplan). The record is the same.",
    ),
]
RayAddress = Annotated[
    Optional[str],
    typer.Option(
        "--ray-address",
        metavar="ADDR",
        help="The Ray cluster for --executor ray: auto or ray://HOST:10001 (default: RAY_ADDRESS, else a new "
        "local cluster).",
    ),
]
Html = Annotated[
    Optional[str],
    typer.Option("--html", metavar="FILE", help="Write a self-contained HTML report to FILE ('-' = stdout)."),
]
Baseline = Annotated[
    Optional[Path],
    typer.Option(
        "--baseline", metavar="FILE", help="An earlier analysis record to compare with (what changed since it)."
    ),
]
Prometheus = Annotated[
    Optional[str],
    typer.Option(
        "--prometheus",
        metavar="FILE",
        help="Write Prometheus text exposition (node_exporter textfile collector) to FILE ('-' = stdout).",
    ),
]
Markdown = Annotated[
    Optional[str],
    typer.Option("--markdown", metavar="FILE", help="Write a Markdown report (PR comments) to FILE ('-' = stdout)."),
]
Store = Annotated[
    bool,
    typer.Option(
        "--store/--no-store", metavar="", help="Write to the SQLite store (--db); --no-store leaves it untouched."
    ),
]
Db = Annotated[
    Optional[Path], typer.Option("--db", metavar="FILE", help="Store path (default $PREFIXPLAN_DB or ./prefixplan.db).")
]
Quiet = Annotated[
    bool,
    typer.Option("--quiet", "-q", metavar="", help="No console report and no progress (errors still go to stderr)."),
]
IsolateBy = Annotated[
    Optional[str],
    typer.Option(
        "--isolate-by",
        metavar="user|tenant|FIELD",
        help="Hit rate with the engines' cache_salt per tenant, and what a salt after the shared system/tool prefix "
        "returns; FIELD (simulate): the log record's field holding the tenant (dotted, e.g. metadata.org_id).",
    ),
]
