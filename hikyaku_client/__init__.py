"""Hikyaku client: the `hikyaku` CLI and the `hikyaku-mcp` MCP server.

Pure Python on httpx; it never imports Django, so it installs and runs anywhere an agent runs.
`hikyaku_client.http` speaks the broker's wire (REST registry, A2A 1.0 JSON-RPC) and is shared
by the CLI (`cli`), the stream reader (`sse`) and the MCP tools (`mcp_tools`).
"""

__version__ = "0.1.0"
