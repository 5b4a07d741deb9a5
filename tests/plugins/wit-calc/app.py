"""Typed functions exported through WIT: the host offers each as a tool."""

from componentize_py_types import Err
from wit_world import exports
from wit_world.exports.calc import Point, Shape_Negative, Shape_Positive, Shape_Zero, Unit


class Calc(exports.Calc):
    def add(self, a: int, b: int) -> int:
        return a + b

    def manhattan(self, p: Point) -> int:
        return abs(p.x) + abs(p.y)

    def classify(self, n: int) -> Shape_Negative | Shape_Zero | Shape_Positive:
        if n < 0:
            return Shape_Negative(n)
        if n == 0:
            return Shape_Zero()
        return Shape_Positive(f"{n} is positive")

    def greet(self, names: list[str], times: int | None, loud: bool) -> list[str]:
        out = [f"hello {name}" for name in names for _ in range(times or 1)]
        return [line.upper() for line in out] if loud else out

    def convert(self, length: float, source: Unit) -> float:
        if length < 0:
            raise Err("a length is not negative")  # the result's error case
        return length if source == Unit.METRE else length * 0.3048

    def mirror(self, p: Point) -> Point:
        return Point(x=-p.x, y=-p.y)

    def boom(self) -> int:
        raise RuntimeError("boom")

    def spin(self) -> int:
        n = 0
        while True:
            n += 1
