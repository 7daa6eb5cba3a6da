"""Project memory: entries with full history, search, links, curation and duplicate judgment."""
