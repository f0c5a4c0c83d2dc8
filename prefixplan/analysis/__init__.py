"""Analysis: rendered prompts -> token radix tree -> ranked, labelled shared prefixes (candidates),
RAG chunks, cache breakers, and the versioned analysis record."""
