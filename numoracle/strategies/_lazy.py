"""Lazily built strategies that repr as the user's call (Hypothesis style):
arguments are validated on first draw (or ``.validate()``), so a module that
defines a bad strategy still imports and the error points at the test."""

from __future__ import annotations

from hypothesis.strategies import SearchStrategy


def call_repr(name: str, args: tuple, kwargs: dict) -> str:
    parts = [repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()]
    return f"{name}({', '.join(parts)})"


class Lazy(SearchStrategy):
    """A strategy whose real definition ``build()`` runs on first use."""

    def __init__(self, name: str, args: tuple, kwargs: dict, build):
        super().__init__()
        self._repr = call_repr(name, args, kwargs)
        self._build = build
        self._inner = None

    @property
    def wrapped(self) -> SearchStrategy:
        if self._inner is None:
            self._inner = self._build()
        return self._inner

    def do_validate(self) -> None:
        self.wrapped.validate()

    def calc_is_empty(self, recur) -> bool:
        return recur(self.wrapped)

    def calc_has_reusable_values(self, recur) -> bool:
        return False

    def do_draw(self, data):
        return data.draw(self.wrapped)

    def __repr__(self) -> str:
        return self._repr
