"""MCP for roost: client and server, both protocol eras, every transport."""
