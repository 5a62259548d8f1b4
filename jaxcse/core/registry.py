"""Named entries of one kind, registered once (at import) and looked up by name: the methods' objectives, the
poolers, the encoder families. One type, so that each registry refuses a second entry of a name and answers an
unknown name with the known ones alike."""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
  """``register`` an entry once under ``key(entry)``; ``get`` it back, or a ValueError listing the known names.

  Args:
    kind: what an entry is, in the refusal of a second one ("objective {name!r} is already registered").
    key: an entry's name.
    unknown: the message for a name not registered, with ``{name}`` and ``{known}`` (the names, comma-separated).
    sort: list the names sorted (else in registration order).
  """

  def __init__(self, kind: str, key: Callable[[T], str], unknown: str, *, sort: bool = False):
    self._kind, self._key, self._unknown, self._sort = kind, key, unknown, sort
    self._entries: dict[str, T] = {}

  def register(self, entry: T) -> T:
    name = self._key(entry)
    if name in self._entries:
      raise ValueError(f"{self._kind} {name!r} is already registered")
    self._entries[name] = entry
    return entry

  def unregister(self, name: str) -> None:
    """Removes an entry if there is one (tests register toy ones)."""
    self._entries.pop(name, None)

  def names(self) -> tuple[str, ...]:
    return tuple(sorted(self._entries) if self._sort else self._entries)

  def get(self, name: str) -> T:
    try:
      return self._entries[name]
    except KeyError:
      raise ValueError(self._unknown.format(name=name, known=", ".join(self.names()))) from None
