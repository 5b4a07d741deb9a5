"""The order the default tier hands pytest-xdist (support.start_first, conftest.START_FIRST):
the costly modules head the workers' first slices, and nothing is lost or run twice."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

from support import _slice_sizes, start_first


@dataclass
class Node:
    nodeid: str


def nodes(spec: dict[str, int]) -> list[Any]:
    return [Node(f"{module}::t{i}") for module, n in spec.items() for i in range(n)]


def slices(ordered: list[Any], workers: int) -> list[list[str]]:
    """The modules of each worker's first slice, in the order the worker runs them."""
    out, at = [], 0
    for size in _slice_sizes(len(ordered), workers):
        part = [cast(Node, n).nodeid.split("::")[0] for n in ordered[at:at + size]]
        out.append(list(dict.fromkeys(part)))
        at += size
    return out


def test_xdist_splits_as_its_work_stealing_scheduler_does() -> None:
    # WorkStealingScheduling.check_schedule: len(pending) // nodes_remaining, in turn.
    assert _slice_sizes(2649, 4) == [662, 662, 662, 663]
    assert _slice_sizes(3, 4) == [0, 1, 1, 1]
    assert sum(_slice_sizes(1001, 3)) == 1001


def test_each_costly_module_heads_a_slice_of_its_own() -> None:
    items = nodes({"a.py": 40, "heavy1.py": 3, "b.py": 40, "heavy2.py": 2, "c.py": 40,
                   "heavy3.py": 5})
    ordered = start_first(items, 2, ("heavy3.py", "heavy1.py", "heavy2.py", "absent.py"))
    assert sorted(map(id, ordered)) == sorted(map(id, items))  # each item exactly once
    first, second = slices(ordered, 2)
    assert first[:2] == ["heavy3.py", "heavy2.py"] and second[0] == "heavy1.py"
    # A module stays whole, and the others keep their collected order.
    ids = [n.nodeid for n in ordered]
    assert ids[:7] == [f"heavy3.py::t{i}" for i in range(5)] + ["heavy2.py::t0",
                                                                  "heavy2.py::t1"]
    rest = [i for i in ids if not i.startswith("heavy")]
    assert rest == [n.nodeid for n in items if not n.nodeid.startswith("heavy")]


def test_without_costly_modules_the_collected_order_stays() -> None:
    items = nodes({"a.py": 5, "heavy.py": 2, "b.py": 5})
    assert [n.nodeid for n in start_first(items, 4, ())] == [n.nodeid for n in items]
    assert [n.nodeid for n in start_first(items, 4, ("elsewhere.py",))] == [
        n.nodeid for n in items]
