"""The embedded defaults: a simulated policy model, an OpenAI-compatible upstream proxy, two
environments (single-turn arithmetic, multi-turn keychain) and three agents (single turn, tool
loop, NeMo Gym rows). Config names them by short name (``impl: simulated``); see ``docs/builtins.md``."""
