"""What a chain already knows about values: screening verdicts, per-node values, proofs.

Most candidates of a chain compute values it has computed before: a layout move, a swap
of independent ops, a relayout inserted or removed leave every value as it was, and an
edit deep in a kernel leaves everything upstream of it unchanged. Every cache here is
keyed by a node's *value key* (leir/terms.py), which ignores what cannot change a value:

- exact mode keys (``Term.exact_key``) ignore layouts, names, program order and whether
  a float is f32 or bf16 (exact mode never rounds) entirely;
- native mode keys (``Term.native_key``) ignore layouts, names and program order too
  (never dtypes: native mode rounds to them), except the layout of the axis
  that a reduce_sum or a matmul sums over, which sets the order (and so the rounding) of
  the sum on a machine that follows it.

A screening verdict is a function of the kernel's native key (which determines its
exact key) and the screening input, so it is cached on exactly that; a cached verdict is
the verdict a fresh screening would give (tests/search/test_values.py checks this on
randomly mutated kernels). Full checks are remembered by native key too: a kernel whose
value graph a full check has proved in this run needs no second full check.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

from stochopt.backend.node_values import VALUE_BYTES, NodeValues
from stochopt.leir.ir import Kernel
from stochopt.leir.terms import Term, value_graph_id
from stochopt.verify.screening import ScreeningSet

VERDICTS = 200_000                # screening verdicts a chain keeps
RANGE_VERDICTS = 100_000          # range-analysis verdicts a chain keeps


class CachedScreening(ScreeningSet):
    """A ScreeningSet that remembers: each input's verdict per native value key, and the
    values of every node (NodeValues). Same answers as ScreeningSet, computed once."""

    def __init__(self, *args, value_bytes: int = VALUE_BYTES, **kwargs) -> None:
        self.node_values = NodeValues(value_bytes)
        self.verdicts: OrderedDict[tuple[Term, int], float] = OrderedDict()
        self.range_verdicts: OrderedDict[tuple, bool] = OrderedDict()
        self.hits = self.misses = 0
        super().__init__(*args, **kwargs)

    def range_refused(self, kernel: Kernel) -> bool:
        """The range analysis' verdict, once per kernel structure. The analysis reads
        node indices (which nodes are one view of which), so two kernels with the same
        value key may be analysed apart; the key is the kernel itself without its names:
        every node's term (op, attributes, types, layouts included) and its arguments."""
        key = (kernel.terms, kernel.arguments, kernel.output)
        refused = self.range_verdicts.get(key)
        if refused is None:
            refused = self.range_verdicts[key] = super().range_refused(kernel)
            if len(self.range_verdicts) > RANGE_VERDICTS:
                self.range_verdicts.popitem(last=False)
        return refused

    def output(self, kernel: Kernel, i: int, exact: bool) -> np.ndarray:
        return self.node_values.output(kernel, i, self.inputs[i], exact)

    def _one(self, kernel: Kernel, i: int) -> float:
        key = (kernel.native_key, i)
        cost = self.verdicts.get(key)
        if cost is not None:
            self.hits += 1
            self.verdicts.move_to_end(key)
            return cost
        self.misses += 1
        cost = super()._one(kernel, i)
        self.verdicts[key] = cost
        if len(self.verdicts) > VERDICTS:
            self.verdicts.popitem(last=False)
        return cost


class Proofs:
    """Value graphs a full check proved in this run, by native value key: a kernel with
    the same values on every input needs no second full check (the final fresh-seed
    re-check of the run's best still runs)."""

    def __init__(self) -> None:
        self.verdicts: dict[Term, dict] = {}

    def earlier(self, kernel: Kernel) -> dict | None:
        """The verdict of an earlier full check of this kernel's value graph, marked
        ``proved_earlier`` so best.json says the check was not run again; or None."""
        verdict = self.verdicts.get(kernel.native_key)
        if verdict is None:
            return None
        return {**verdict, "proved_earlier": f"proved earlier as value graph "
                                             f"{verdict['value_graph']}"}

    def record(self, kernel: Kernel, verdict: dict) -> dict:
        """Remember a passed full check; return its verdict with the value graph named."""
        verdict = {**verdict, "value_graph": value_graph_id(kernel.native_key)}
        self.verdicts[kernel.native_key] = verdict
        return verdict
