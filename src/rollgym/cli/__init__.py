"""Command-line entry points. Thin: they parse options and call the public API."""
