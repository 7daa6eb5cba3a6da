"""Armarius: governed memory and read-only research server for AI agents."""

__version__ = "0.1.0"
