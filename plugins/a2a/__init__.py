"""A2A for roost: server and client (1.0, 0.3 and the seed 0.1 shape)."""
