"""A package door that loads its public names on first use (PEP 562 module ``__getattr__``).

``import rollgym`` and ``import rollgym.servers`` must stay cheap (the CLI's ``--help``, the
driver that only needs the registry), so each door lists ``{name: home module}`` and imports a
home only when one of its names is first read. Both doors share this one implementation.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from importlib import import_module


def lazy_door(
    namespace: dict[str, object], exports: Mapping[str, str], modules: Collection[str] = ()
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for the package whose ``globals()`` is ``namespace``.

    ``exports`` maps each public name to the module that defines it; a name in ``modules`` is
    that module itself. A loaded name is kept in the package, so it is looked up once.
    """
    package = namespace["__name__"]

    def __getattr__(name: str) -> object:
        home = exports.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module = import_module(home)
        value = module if name in modules else getattr(module, name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        exported = namespace.get("__all__", ())
        return sorted(set(namespace) | set(exported if isinstance(exported, list | tuple) else ()))

    return __getattr__, __dir__
