"""The LLM's judgement carried into the cheap proposals: a plan that made the kernel it
was shown faster, and that the chain accepted, is evidence about which rules pay on this
kernel, so its rules weigh more when the rewrite arm draws one, for a while. (A slower
plan the chain took by the Metropolis rule's chance is no such evidence.)

Bounded: a rule's weight is at most (1 + MAX_BOOST) times its own. Decaying: the boost
halves every HALF_LIFE rewrite draws, so thousands of proposals follow the model's lead
between two requests and the table's weights come back when the model stops paying.
Plain data: one per chain, read by the rewrite arm's draw (proposers.py).
"""

from __future__ import annotations

from collections.abc import Mapping

from stochopt.transform.plan import RULES_BY_NAME

MAX_BOOST = 4.0        # a rule's weight at most (1 + MAX_BOOST) times its own
BOOST_PER_STEP = 1.0   # added for each step of an accepted plan that used the rule
HALF_LIFE = 500        # rewrite draws over which a boost halves
FORGET_BELOW = 0.01


class RuleSteering:
    def __init__(self) -> None:
        self.boost: dict[str, float] = {}
        self._decay = 0.5 ** (1 / HALF_LIFE)

    def reinforce(self, rules) -> None:
        """An accepted plan applied these rules (one entry per step)."""
        for rule in rules:
            if rule in RULES_BY_NAME:
                self.boost[rule] = min(MAX_BOOST, self.boost.get(rule, 0.0) + BOOST_PER_STEP)

    def weights(self, base: Mapping[str, float] | None) -> Mapping[str, float] | None:
        """The rewrite arm's weights for one draw: ``base`` (the run's move weights) with
        each boosted rule's weight raised; one draw of decay. ``base`` itself while
        nothing is boosted, so a run the model never steered draws as before."""
        if not self.boost:
            return base
        base = base or {}
        out = dict(base)
        for rule, boost in list(self.boost.items()):
            own = base.get(rule, RULES_BY_NAME[rule].weight)
            out[rule] = own * (1.0 + boost)
            boost *= self._decay
            if boost < FORGET_BELOW:
                del self.boost[rule]
            else:
                self.boost[rule] = boost
        return out

    def describe(self) -> dict[str, float]:
        return {rule: round(b, 3) for rule, b in sorted(self.boost.items())}
