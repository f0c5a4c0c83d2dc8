"""The trace: each request rendered once into a compact row (block keys, spans, lengths), in
memory or as a Parquet file, that simulation and analysis replay without a tokenizer."""
