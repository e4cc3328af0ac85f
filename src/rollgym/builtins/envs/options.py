"""The built-in environments' options, apart from the environments: the driver validates a
config against them without importing the environment stack (the registry names each one)."""

from __future__ import annotations

from pydantic import Field

from rollgym.servers import EnvironmentOptions


class ArithmeticOptions(EnvironmentOptions):
    tolerance: float = Field(1e-6, ge=0, description="Relative tolerance for non-integer answers.")


class KeychainOptions(EnvironmentOptions):
    max_hops: int = Field(64, ge=1, description="Largest 'hops' a task may ask for.")
    decoys_per_hop: int = Field(2, ge=0, description="Decoy keys per chain key.")
