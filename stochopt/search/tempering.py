"""Tempering: chains on a ladder of temperatures that exchange states (replica exchange).

Chain 0 runs at the coldest beta (ChainConfig.beta) and polishes; the last chain runs at
the hottest (ChainConfig.hottest_beta), where a kernel 10% slower is accepted often
enough to cross a valley; the chains between sit on a geometric ladder. Every
``exchange_s`` seconds each chain reports its state (kernel, plan, cost) to the main
process, which, once two neighbouring chains have both reported since their last
exchange, swaps their states with the replica-exchange probability

    min(1, exp((beta_i - beta_j) * (cost_i - cost_j)))

so a better state found by the hot chain moves down the ladder to be polished, and the
cold chain's state moves up to be shaken. The cost is the chain's own (eq + lam ln
cycles/baseline), the same function on every chain. Reports are at most one interval
old when swapped: the exchange is asynchronous, as the chains never wait for it.

The same reports serve restarts: a chain that found no new best for a while is sent
either to the global best (a share ``restart_best_share`` of restarts) or to the state
another chain last reported, so the chains do not all collapse onto the best.

With Ray the reports and the exchanges travel through the coordinator like every other
message, so the ladder spans the cluster.
"""

from __future__ import annotations

import math
import random

from stochopt.errors import StochoptError


def beta_ladder(beta: float, hottest_beta: float, chains: int) -> list[float]:
    """The chains' betas: ``beta`` for chain 0, down to ``hottest_beta`` for the last,
    evenly spaced in log beta."""
    if chains == 1:
        return [beta]
    ratio = (hottest_beta / beta) ** (1 / (chains - 1))
    return [round(beta * ratio ** i, 6) for i in range(chains)]


def check_tempering(beta: float, hottest_beta: float, exchange_s: float,
                    restart_best_share: float) -> None:
    """A clear error for a ladder the search cannot run."""
    if not (isinstance(beta, int | float) and math.isfinite(beta) and beta > 0):
        raise StochoptError(f"beta must be a positive number, got {beta!r}")
    if not (isinstance(hottest_beta, int | float) and 0 < hottest_beta <= beta):
        raise StochoptError(f"hottest_beta must be positive and at most beta ({beta}), got "
                            f"{hottest_beta!r}")
    if not (isinstance(exchange_s, int | float) and exchange_s >= 0):
        raise StochoptError(f"exchange_s must be >= 0 (0: no exchanges), got {exchange_s!r}")
    if not (isinstance(restart_best_share, int | float) and 0 <= restart_best_share <= 1):
        raise StochoptError(f"restart_best_share must be between 0 and 1, got "
                            f"{restart_best_share!r}")


def swap_probability(beta_i: float, cost_i: float, beta_j: float, cost_j: float) -> float:
    """The replica-exchange rule: the probability that chains i and j swap states."""
    exponent = (beta_i - beta_j) * (cost_i - cost_j)
    return 1.0 if exponent >= 0 else math.exp(exponent)


class Tempering:
    """The main process's side of the ladder: the chains' last reports, the exchanges
    between neighbours, the restart points. ``report`` and ``restart_point`` return
    the messages to send, as (chain, message)."""

    def __init__(self, betas: list[float], seed: int, restart_best_share: float) -> None:
        self.betas = betas
        self.rng = random.Random(seed * 7919 + 101)  # the swaps' and restarts' draws
        self.best_share = restart_best_share
        self.reports: dict[int, dict] = {}
        self.fresh: set[int] = set()      # chains that reported since their last exchange
        self.attempts = [0] * max(0, len(betas) - 1)   # per pair (i, i + 1)
        self.swaps = [0] * max(0, len(betas) - 1)

    def report(self, chain: int, report: dict) -> list[tuple[int, tuple]]:
        """A chain's state (``text``, ``plan``, ``cost``, ``cycles``); an exchange with a
        neighbour that reported too since its last one, if the rule accepts it."""
        self.reports[chain] = report
        self.fresh.add(chain)
        for low in (chain - 1, chain):  # the pair below first, then the pair above
            high = low + 1
            if low < 0 or high >= len(self.betas) or not {low, high} <= self.fresh:
                continue
            self.fresh -= {low, high}
            return self._attempt(low, high)
        return []

    def _attempt(self, i: int, j: int) -> list[tuple[int, tuple]]:
        a, b = self.reports[i], self.reports[j]
        self.attempts[i] += 1
        u = self.rng.random()
        if u >= swap_probability(self.betas[i], a["cost"], self.betas[j], b["cost"]):
            return []
        self.swaps[i] += 1
        self.reports[i], self.reports[j] = b, a
        return [(i, ("exchange", b["text"], b["plan"], b["cycles"], j)),
                (j, ("exchange", a["text"], a["plan"], a["cycles"], i))]

    def restart_point(self, chain: int, best: tuple[str, list | None]
                      ) -> tuple[int, tuple]:
        """Where a chain due for a restart goes: the global best (``best``: its text and
        plan), or the state another chain last reported."""
        others = sorted(c for c in self.reports if c != chain)
        if not others or self.rng.random() < self.best_share:
            return chain, ("restart", best[0], best[1], "best")
        other = self.rng.choice(others)
        report = self.reports[other]
        return chain, ("restart", report["text"], report["plan"], f"chain {other}")

    def state(self) -> dict:
        """What the checkpoint and the run's end record of the ladder."""
        return {"betas": self.betas, "attempts": list(self.attempts),
                "swaps": list(self.swaps)}
