"""The SQLite registry: versions, analyses, warm runs and prefill profiles."""
