"""Records and small utilities every stage shares: request/prompt types, hashes, granularity,
durations, atomic file output, URL display. Nothing here imports another prefixplan package."""
