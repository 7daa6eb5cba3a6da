"""Drafts: written by an agent only with a human approval bound to their exact content."""
