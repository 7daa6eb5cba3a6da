"""Principals, roles, permissions, tokens and passwords."""
