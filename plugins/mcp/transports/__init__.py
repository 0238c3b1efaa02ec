"""MCP transports: stdio, Streamable HTTP, legacy HTTP+SSE, in-memory."""
