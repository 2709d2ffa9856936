"""One registry idiom for everything chosen by name in a config or on the command line.

A :class:`Registry` maps names to entries (a factory ``f(spec, where)``, a reader module, a
figure's module path, ...).  Entries join with the ``register(name)`` decorator (or ``add``
for entries that are not functions defined at that spot); ``get(name, where)`` returns one or
raises a one-line error naming the field and the known names; ``names()`` lists them in the
order they were registered (detection orders, help texts).  A registry also reads as a
read-only mapping (``in``, iteration, ``items()``, ``reg[name]``) for callers that walk it.
See docs/registries.md.
"""
from __future__ import annotations

from typing import Callable, Generic, Iterator, TypeVar

T = TypeVar("T")
_F = TypeVar("_F")


class Registry(Generic[T]):
    """Named entries of one kind (``kind`` words the error: "unknown cost model 'x'")."""

    def __init__(self, kind: str, error: type[ValueError] = ValueError) -> None:
        self.kind = kind
        self.error = error
        self._entries: dict[str, T] = {}

    def add(self, name: str, entry: T) -> None:
        """Register ``entry`` as ``name``; a name registered twice is a programming error."""
        if name in self._entries:
            raise RuntimeError(f"{self.kind} {name!r} registered twice")
        self._entries[name] = entry

    def register(self, name: str) -> Callable[[_F], _F]:
        """Decorator: register the decorated object as ``name`` and return it unchanged (so a
        factory keeps its own, narrower, type where it is called directly)."""
        def deco(entry: _F) -> _F:
            self.add(name, entry)   # type: ignore[arg-type]  # checked by the caller's T
            return entry
        return deco

    def get(self, name: object, where: str) -> T:
        """The entry called ``name``; else ``error`` "WHERE: unknown KIND 'x'; known: a, b"."""
        if isinstance(name, str) and name in self._entries:
            return self._entries[name]
        raise self.error(self.unknown(name, where))

    def unknown(self, name: object, where: str) -> str:
        """The one-line message for a name that is not registered."""
        return f"{where}: unknown {self.kind} {name!r}; known: {', '.join(sorted(self._entries))}"

    def names(self) -> tuple[str, ...]:
        """The registered names, in registration order."""
        return tuple(self._entries)

    def items(self) -> Iterator[tuple[str, T]]:
        """(name, entry) pairs in registration order."""
        return iter(tuple(self._entries.items()))

    def __getitem__(self, name: str) -> T:
        return self._entries[name]

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(tuple(self._entries))

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}: {', '.join(self._entries)})"
