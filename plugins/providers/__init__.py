"""First-party model providers. Each is a plugin module registered under ``roost.plugins``."""
