"""The multi-turn tool environment: follow a chain of keys to a secret.

A task row holds ``{"seed": int, "hops": int}``. The vault is a deterministic random map
(from ``seed``) in which the start key leads through ``hops`` reads of ``read_key`` to the
secret, among decoy keys that lead nowhere useful. Each read depends on the previous output,
so the agent must really work turn by turn. The reward is 1.0 only when the answer is the
secret **and** the session's reads followed the whole chain (no lucky guess).
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from rollgym.builtins.answer_text import extract_answer
from rollgym.builtins.envs.options import KeychainOptions
from rollgym.servers import (
    Environment,
    ServerOptions,
    SessionState,
    Verdict,
    tool,
)

SYSTEM_PROMPT = (
    "You are exploring a key vault. Use the read_key tool: it returns 'next key: <key>' or "
    "'secret: <secret>'. Follow the keys until you find the secret, then reply 'Answer: <secret>'."
)


@dataclass(frozen=True)
class Vault:
    """The keys of one task: ``links`` maps every key to the next key or to a secret."""

    start: str
    chain: tuple[str, ...]
    secret: str
    links: dict[str, str]


def build_vault(seed: int, hops: int, decoys_per_hop: int) -> Vault:
    """A deterministic vault: the same (seed, hops) always gives the same keys and secret."""
    rng = random.Random(seed)
    used: set[str] = set()

    def fresh(prefix: str, bits: int) -> str:
        while True:
            value = f"{prefix}{rng.getrandbits(bits):0{bits // 4}x}"
            if value not in used:
                used.add(value)
                return value

    chain = tuple(fresh("k-", 32) for _ in range(hops))
    secret = fresh("S-", 48)
    links = {key: nxt for key, nxt in zip(chain, chain[1:], strict=False)}
    links[chain[-1]] = secret
    decoys = [fresh("k-", 32) for _ in range(hops * decoys_per_hop)]
    for decoy in decoys:
        links[decoy] = rng.choice([*decoys, fresh("S-", 48)])
    return Vault(start=chain[0], chain=chain, secret=secret, links=links)


def followed(chain: tuple[str, ...], reads: list[str]) -> bool:
    """True when ``reads`` contains the chain's keys in order (extra reads allowed)."""
    remaining = iter(reads)
    return all(any(read == key for read in remaining) for key in chain)


def _int_field(task: Mapping[str, object], key: str, default: int | None = None) -> int:
    value = task.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{key!r} must be an integer, got {value!r}")
    return value


class KeychainEnv(Environment):
    """Follow the key chain with read_key, answer the secret."""

    Options: ClassVar[type[ServerOptions]] = KeychainOptions
    options: KeychainOptions

    async def seed(self, task: Mapping[str, object]) -> SessionState:
        options = self.options
        seed = _int_field(task, "seed")
        hops = _int_field(task, "hops", 3)
        if not 1 <= hops <= options.max_hops:
            raise ValueError(f"'hops' must be between 1 and {options.max_hops}, got {hops}")
        vault = build_vault(seed, hops, options.decoys_per_hop)
        prompt = f"Start key: {vault.start}\nFind the secret at the end of the chain."
        messages = [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": prompt},
        ]
        return SessionState(messages=messages, data={"vault": vault, "reads": []})

    @tool
    async def read_key(self, state: SessionState, key: str) -> str:
        """Read one key of the vault: returns the next key to read, or the secret."""
        vault: Vault = state.data["vault"]
        state.data["reads"].append(key)
        value = vault.links.get(key)
        if value is None:
            return f"error: there is no key {key!r} in the vault"
        return f"secret: {value}" if value.startswith("S-") else f"next key: {value}"

    async def verify(self, state: SessionState, answer: str | None) -> Verdict:
        vault: Vault = state.data["vault"]
        reads: list[str] = state.data["reads"]
        correct = extract_answer(answer) == vault.secret
        chain_followed = followed(vault.chain, reads)
        details = {
            "correct_secret": correct,
            "chain_followed": chain_followed,
            "reads": len(reads),
            "hops": len(vault.chain),
        }
        return Verdict(reward=1.0 if correct and chain_followed else 0.0, details=details)
