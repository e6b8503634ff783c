"""TensorLayout notation: how a pe tensor's axes are spread over the PE tree.

    (128,1024)/((8_L2B,16_MAB),(1024))          rows over L2Bs and MABs, each row local
    (16,512)/((16),(512)); B@[L2B,L1B,MAB,PE]   replicated on every PE

Each axis lists factors, major first; a factor ``n_LEVEL`` spreads n units of a tree
level, a bare ``n`` stays in local memory. Values are logical: a layout changes only
legality and cost, never a value.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from math import prod

from stochopt.errors import ConstraintError
from stochopt.machine import LEVELS  # the tree a layout spreads over (re-exported)


@dataclass(frozen=True, slots=True)
class Factor:
    size: int
    level: str | None = None  # None: stays in PE local memory

    def __str__(self) -> str:
        return f"{self.size}_{self.level}" if self.level else str(self.size)


@dataclass(frozen=True, slots=True)
class Layout:
    shape: tuple[int, ...]
    axes: tuple[tuple[Factor, ...], ...]
    replicated: frozenset[str] = frozenset()

    # -- derived facts used by type rules and the cost model --------------------------
    def spread(self) -> dict[str, int]:
        """Units used of each level by the data's distinct parts."""
        used: dict[str, int] = {}
        for axis in self.axes:
            for f in axis:
                if f.level:
                    used[f.level] = used.get(f.level, 1) * f.size
        return used

    def axis_levels(self, axis: int) -> frozenset[str]:
        return frozenset(f.level for f in self.axes[axis] if f.level)

    def spread_units(self) -> int:
        """How many PEs hold a distinct part of the tensor."""
        return prod(self.spread().values())

    def local_elements(self) -> int:
        """Elements each PE holds (the same on every PE that holds a part)."""
        return prod(f.size for axis in self.axes for f in axis if f.level is None)

    def local_shape(self) -> tuple[int, ...]:
        return tuple(prod(f.size for f in axis if f.level is None) for axis in self.axes)

    def __str__(self) -> str:
        shape = "(" + ",".join(str(s) for s in self.shape) + ")"
        axes = "(" + ",".join("(" + ",".join(str(f) for f in a) + ")" for a in self.axes) + ")"
        text = f"{shape}/{axes}"
        if self.replicated:
            text += "; B@[" + ",".join(lv for lv in LEVELS if lv in self.replicated) + "]"
        return text


_FACTOR = re.compile(r"^([0-9]+)(?:_([A-Za-z0-9]+))?$")  # ASCII digits only: int() of "²" fails
_MAX_TEXT = 512


def parse_layout(text: str) -> Layout:
    """Parse TensorLayout text; structural errors only (fan-outs are checked later)."""
    if not isinstance(text, str):
        raise ConstraintError(f"a layout is a string, got {type(text).__name__}")
    if len(text) > _MAX_TEXT:
        raise ConstraintError(f"layout text is {len(text)} characters; at most {_MAX_TEXT}")
    src = text.replace(" ", "")
    replicated: frozenset[str] = frozenset()
    if ";" in src:
        src, _, tail = src.partition(";")
        m = re.fullmatch(r"B@\[([A-Za-z0-9,]*)\]", tail)
        if not m:
            raise ConstraintError(f"bad replication {tail!r} in layout {text!r}",
                                  hint='write it as "; B@[L2B,MAB]"')
        names = [n for n in m.group(1).split(",") if n]
        for n in names:
            if n not in LEVELS:
                raise ConstraintError(f"unknown level {n!r} in layout {text!r}",
                                      hint=f"levels are {', '.join(LEVELS)}")
        if len(set(names)) != len(names):
            raise ConstraintError(f"a level is repeated in B@[...] of layout {text!r}")
        replicated = frozenset(names)
    shape_text, slash, axes_text = src.partition("/")
    if not slash:
        raise ConstraintError(f"layout {text!r} has no '/'",
                              hint='write it as "(128,1024)/((8_L2B,16_MAB),(1024))"')
    shape = _parse_ints(shape_text, text)
    if not (axes_text.startswith("(") and axes_text.endswith(")")):
        raise ConstraintError(f"layout {text!r}: the axes part must be in parentheses")
    inner = axes_text[1:-1]
    groups = re.findall(r"\(([^()]*)\)", inner)
    if not re.fullmatch(r"\([^()]*\)(?:,\([^()]*\))*,?", inner):  # "(8)(16)" lacks a comma
        raise ConstraintError(f"layout {text!r}: each axis must be a parenthesised factor list")
    if len(groups) != len(shape):
        raise ConstraintError(
            f"layout {text!r} lists {len(groups)} axes for a shape of rank {len(shape)}")
    axes = []
    for axis, (size, group) in enumerate(zip(shape, groups, strict=True)):
        factors = []
        for part in group.split(","):
            m = _FACTOR.match(part)
            if not m:
                raise ConstraintError(f"bad factor {part!r} in layout {text!r}",
                                      hint="a factor is n (local) or n_LEVEL, e.g. 8_L2B")
            level = m.group(2)
            if level is not None and level not in LEVELS:
                raise ConstraintError(f"unknown level {level!r} in layout {text!r}",
                                      hint=f"levels are {', '.join(LEVELS)}")
            n = int(m.group(1))
            if n < 1 or n > 1 << 31:
                raise ConstraintError(f"factor {part!r} in layout {text!r} is out of range")
            factors.append(Factor(n, level))
        if prod(f.size for f in factors) != size:
            raise ConstraintError(
                f"layout {text!r}: axis {axis} factors multiply to "
                f"{prod(f.size for f in factors)}, not {size}")
        axes.append(tuple(factors))
    return Layout(shape, tuple(axes), replicated)


def _parse_ints(part: str, text: str) -> tuple[int, ...]:
    if not (part.startswith("(") and part.endswith(")")):
        raise ConstraintError(f"layout {text!r}: the shape must be in parentheses")
    items = [p for p in part[1:-1].split(",") if p != ""]
    if not items or not all(p.isascii() and p.isdigit() for p in items):
        raise ConstraintError(f"layout {text!r}: bad shape {part!r}")
    return tuple(int(p) for p in items)


def check_layout(layout: Layout, fanout: dict[str, int]) -> None:
    """Check a layout against a machine's fan-outs; raise ConstraintError if it cannot exist."""
    for level, units in layout.spread().items():
        if units > fanout[level]:
            raise ConstraintError(
                f"layout {layout} uses {units} units of {level}, "
                f"but the machine has {fanout[level]} per parent",
                hint=f"use at most {fanout[level]}_{level}")
    both = layout.replicated & frozenset(layout.spread())
    if both:
        raise ConstraintError(
            f"layout {layout} both spreads and replicates over {', '.join(sorted(both))}",
            hint="a level is either spread (n_LEVEL) or replicated (B@), not both")


def simple_layout(shape: tuple[int, ...], fanout: dict[str, int],
                  replicated: frozenset[str] = frozenset(), spread_axis: int | None = 0,
                  levels: tuple[str, ...] = LEVELS) -> Layout:
    """Spread one axis over as many tree units as divide it, outermost level first."""
    axes: list[tuple[Factor, ...]] = []
    for axis, size in enumerate(shape):
        factors: list[Factor] = []
        rest = size
        if axis == spread_axis:
            for level in levels:
                if level in replicated:
                    continue
                n = _largest_divisor_at_most(rest, fanout[level])
                if n > 1:
                    factors.append(Factor(n, level))
                    rest //= n
        if rest > 1 or not factors:
            factors.append(Factor(rest))
        axes.append(tuple(factors))
    return Layout(tuple(shape), tuple(axes), frozenset(replicated))


def divisors_within(n: int, cap: int) -> list[int]:
    """The divisors of n from 2 to cap: the ways to cut a factor of n over a level of
    cap units."""
    return [d for d in range(2, min(n, cap) + 1) if n % d == 0]


def _largest_divisor_at_most(n: int, cap: int) -> int:
    for d in range(min(n, cap), 0, -1):
        if n % d == 0:
            return d
    return 1
