"""The agent surface: MCP tools over stdio and streamable HTTP.

Only agent operations live here. Approving, curating, applying repairs, resuming sessions and
managing principals are never MCP tools.
"""
