"""Move weights as data, as STOKE weighs its transforms: how often each mutation move,
rewrite rule and compound move is drawn when its proposer is chosen.

Each move and rule has a default weight in its table (mutate.WEIGHTS, Rule.weight in
rewrite.RULES, compound.COMPOUND_WEIGHTS). ChainConfig.move_weights overrides them by
name, so run.json records them with the rest of the config: a weight is relative within
its proposer ({"swap": 3} makes swap three times as likely as a move of weight 1); 0
turns a move off; a name left out keeps its table's weight.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from stochopt.errors import StochoptError


def known_moves() -> set[str]:
    # the tables are imported when a run's weights are checked, not with this module
    from stochopt.transform.compound import COMPOUND_WEIGHTS
    from stochopt.transform.mutate import MOVES
    from stochopt.transform.rewrite import RULES
    return set(MOVES) | {r.name for r in RULES} | set(COMPOUND_WEIGHTS)


def check_move_weights(weights: Mapping[str, float] | None) -> dict[str, float]:
    """The weights as a plain dict, every name a known move or rule, every weight >= 0."""
    if not weights:
        return {}
    known = known_moves()
    out = {}
    for name, weight in weights.items():
        if name not in known:
            raise StochoptError(f"unknown move {name!r} in move weights",
                                hint="moves and rules: " + ", ".join(sorted(known)))
        if isinstance(weight, bool) or not isinstance(weight, int | float) or \
                not math.isfinite(weight) or weight < 0:
            raise StochoptError(f"move weight of {name} must be a number >= 0, got {weight!r}")
        out[name] = float(weight)
    return out
