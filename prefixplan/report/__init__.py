"""Reports: rich console tables, JSON, Markdown and HTML renderings of analysis records."""
