"""The HTTP surface: streamable MCP at /mcp, the JSON API under /api, health and pages."""
