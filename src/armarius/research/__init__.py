"""Project research: structured, read-only queries over a pinned git commit (and, later, databases)."""
