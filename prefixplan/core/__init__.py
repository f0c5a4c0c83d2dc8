"""What every stage shares: request/prompt types and token ids, hashes, granularity, durations,
atomic file output, URL display, safe YAML, progress, optional extras, the process's memory policy
(``memory``: the CLI, the analysis and the simulation hand memory back between phases) and
bounded Parquet reading (``parquetio``: request logs and traces alike). Nothing here imports
another prefixplan package but :mod:`prefixplan.errors`."""
