"""Drawing one move, rule or compound move by weight (the weights: weights.py)."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import TypeVar

T = TypeVar("T")


def weighted_choice(rng: random.Random, items: Sequence[T], names: Sequence[str],
                    defaults: Sequence[float],
                    weights: Mapping[str, float] | None = None) -> T:
    """One of items, drawn by the weight of its name: ``weights`` where it names it, else
    its table's default. Equal weights draw as rng.choice does, so seeded runs with
    uniform tables stay as they were."""
    overrides = weights or {}
    mass = [overrides.get(n, d) for n, d in zip(names, defaults, strict=True)]
    if not any(mass) or len(set(mass)) == 1:
        return rng.choice(items)  # uniform, or every applicable move off: keep moving
    return rng.choices(items, mass)[0]
