"""Built-in agents (see docs/builtins.md)."""
