"""Built-in envs (see docs/builtins.md)."""
