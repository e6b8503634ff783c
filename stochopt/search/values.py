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

from stochopt.backend.emulate import convert_input, evaluate_node
from stochopt.leir.ir import Kernel
from stochopt.leir.rules import Const
from stochopt.leir.terms import Term, value_graph_id
from stochopt.verify.screening import ScreeningSet

VALUE_BYTES = 256 * 1024 * 1024   # per-node values a chain keeps, all inputs together
VERDICTS = 200_000                # screening verdicts a chain keeps
RANGE_VERDICTS = 100_000          # range-analysis verdicts a chain keeps


def _key(term: Term, exact: bool) -> Term:
    return term.exact_key if exact else term.native_key


class NodeValues:
    """Each node's value on each screening input, in each mode, keyed by value key and
    kept up to a byte budget (least recently used first out). A kernel's output is
    computed from the values of the nodes it shares with kernels seen before, so an edit
    recomputes only the nodes downstream of it whose value keys changed; inputs are
    converted once. Values are read-only: a reader that wrote to one would corrupt
    every kernel sharing it."""

    def __init__(self, budget_bytes: int = VALUE_BYTES) -> None:
        self.budget = budget_bytes
        self.values: OrderedDict[tuple, np.ndarray] = OrderedDict()
        self.bytes = 0
        self.owners: dict[int, list] = {}  # id -> [array owning memory, values using it]
        self.computed = 0  # node values computed (the rest came from the cache)

    def output(self, kernel: Kernel, index: int, inputs: dict, exact: bool) -> np.ndarray:
        """The kernel's output on screening input ``index`` (whose arrays are ``inputs``)."""
        terms = kernel.terms
        keys = [_key(t, exact) for t in terms]
        known: dict[int, np.ndarray] = {}
        needed = [False] * len(terms)
        needed[kernel.output] = True
        for i in range(kernel.output, -1, -1):  # what must be computed: needed, not cached
            if not needed[i]:
                continue
            value = self._get((exact, keys[i], index))
            if value is not None:
                known[i] = value
                continue
            for a in kernel.nodes[i].inputs:
                needed[a] = True
        with np.errstate(all="ignore"):
            for i, term in enumerate(terms[:kernel.output + 1]):
                if not needed[i] or i in known:
                    continue
                key = (exact, keys[i], index)
                value = self._get(key)  # a load or relayout of a value computed just now
                if value is None:
                    value = self._put(key, self._compute(term, kernel.nodes[i].args, known,
                                                         inputs, exact))
                known[i] = value
        return known[kernel.output]

    @staticmethod
    def _compute(term: Term, args: tuple, known: dict, inputs: dict,
                 exact: bool) -> np.ndarray:
        if term.op == "input":
            return convert_input(term.attr("name"), term.type, inputs, exact)
        values = [a.value if isinstance(a, Const) else known[a] for a in args]
        types = [s if isinstance(s, Const) else s.type for s in term.sources]
        return evaluate_node(term.op, term.type, types, values, dict(term.attrs), exact)

    def _get(self, key: tuple) -> np.ndarray | None:
        value = self.values.get(key)
        if value is not None:
            self.values.move_to_end(key)
        return value

    def _put(self, key: tuple, value: np.ndarray) -> np.ndarray:
        value = np.asarray(value)
        value.flags.writeable = False
        self.computed += 1
        if key in self.values:
            self._release(self.values.pop(key))
        self.values[key] = value
        self._hold(value)
        while self.bytes > self.budget and len(self.values) > 1:
            _, old = self.values.popitem(last=False)
            self._release(old)
        return value

    # a transpose, a load or an exact cast of a float64 value is a view of (or the very
    # array of) another value: memory is counted once per array that owns it
    def _hold(self, value: np.ndarray) -> None:
        owner = _owner(value)
        held = self.owners.get(id(owner))
        if held is None:
            self.owners[id(owner)] = [owner, 1]
            self.bytes += owner.nbytes
        else:
            held[1] += 1

    def _release(self, value: np.ndarray) -> None:
        owner = _owner(value)
        held = self.owners[id(owner)]
        held[1] -= 1
        if held[1] == 0:
            del self.owners[id(owner)]
            self.bytes -= owner.nbytes


def _owner(value: np.ndarray) -> np.ndarray:
    while isinstance(value.base, np.ndarray):
        value = value.base
    return value


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
