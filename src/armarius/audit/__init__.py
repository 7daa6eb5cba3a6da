"""The hash-chained audit log."""
