"""The one ordering rule every hook kind shares.

Priority descending, then user plugins before workspace plugins, then
registration order (load order, then the order of the plugin's own hooks).
Manifest `before`/`after` constraints are applied on top with a stable
topological sort: among the entries free to go next, the one earliest in the
base order goes first. A cycle is a ConfigError naming its plugins; the host asks
`constraint_cycle` before it loads a plugin, so that one manifest cannot make every
hook of every plugin fail.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from wasmext.errors import ConfigError

__all__ = ["Entry", "constraint_cycle", "order_entries"]

SOURCE_RANK = {"user": 0, "explicit": 1, "workspace": 2, "package": 3}


@dataclass(frozen=True)
class Entry:
    """One plugin's registration for one hook."""

    plugin_id: str
    hook: str
    priority: int
    source: str
    load_index: int
    hook_index: int
    pattern: str | None = None

    def base_key(self) -> tuple[int, int, int, int]:
        """Sort key before before/after constraints: priority, source, load and hook order."""
        return (-self.priority, SOURCE_RANK.get(self.source, 1), self.load_index,
                self.hook_index)


def order_entries(entries: Iterable[Entry],
                  constraints: Mapping[str, tuple[Sequence[str], Sequence[str]]]
                  | None = None) -> list[Entry]:
    """`constraints` maps plugin id -> (before ids, after ids)."""
    base = sorted(entries, key=Entry.base_key)
    if not constraints:
        return base
    must_precede = _preceding({e.plugin_id for e in base}, constraints)
    result: list[Entry] = []
    remaining = list(base)
    while remaining:
        for i, entry in enumerate(remaining):
            # An entry may go once every plugin that must precede it has no entry left.
            blockers = must_precede[entry.plugin_id]
            if not any(e.plugin_id in blockers for e in remaining):
                result.append(remaining.pop(i))
                break
        else:
            cycle = sorted({e.plugin_id for e in remaining})
            raise ConfigError(f"before/after constraints form a cycle among: "
                              f"{', '.join(cycle)}")
    return result



def _preceding(ids: set[str], constraints: Mapping[str, tuple[Sequence[str], Sequence[str]]]
               ) -> dict[str, set[str]]:
    """pid -> the ids among `ids` the constraints say must come before it."""
    preceding: dict[str, set[str]] = {pid: set() for pid in ids}
    for pid, (before, after) in constraints.items():
        if pid not in ids:
            continue
        for other in before:
            if other in ids and other != pid:
                preceding[other].add(pid)
        for other in after:
            if other in ids and other != pid:
                preceding[pid].add(other)
    return preceding


def constraint_cycle(constraints: Mapping[str, tuple[Sequence[str], Sequence[str]]]
                     ) -> list[str] | None:
    """The plugin ids (sorted) on a cycle the before/after constraints of these plugins
    form, or None."""
    follows = _preceding(set(constraints), constraints)

    def returns(start: str) -> bool:
        seen, stack = set(), list(follows[start])
        while stack:
            node = stack.pop()
            if node == start:
                return True
            if node not in seen:
                seen.add(node)
                stack.extend(follows[node])
        return False

    cycle = sorted(pid for pid in follows if returns(pid))
    return cycle or None
