"""Built-in models (see docs/builtins.md)."""
