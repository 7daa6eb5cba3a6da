"""Research sessions: budgeted investigations whose answers land atomically as evidence."""
