"""Per-node values kept between emulations, keyed by value key (leir/terms.py).

Most kernels a run emulates compute values it has computed before: a layout move, a
swap of independent ops, a relayout inserted or removed leave every value as it was,
and an edit deep in a kernel leaves everything upstream of it unchanged. So a node's
value on an input is kept under (mode, the node's value key, the input's key): exact
mode keys (``Term.exact_key``) ignore layouts, names, program order and float dtypes;
native mode keys (``Term.native_key``) ignore layouts, names and program order except
the layout of an axis that a reduce_sum or a matmul sums over. A kernel's output is
then computed from the values of the nodes it shares with kernels emulated before, and
an edit recomputes only the nodes downstream of it whose keys changed.

The chains' screening keeps every value of its few inputs; a full check's inputs are
many and large, so its store keeps only the values that were dear to compute for their
size (``admit``, ``dear_values``): a matmul's result, a reduction, a tiny value; not a
cast or an add over a large tensor, which costs less to recompute than to hold.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping

import numpy as np

from stochopt.backend.emulate import convert_input, evaluate_node
from stochopt.leir.ir import Kernel
from stochopt.leir.rules import Const
from stochopt.leir.terms import Term

VALUE_BYTES = 256 * 1024 * 1024   # per-node values kept, all inputs together

Inputs = Mapping[str, np.ndarray] | Callable[[], Mapping[str, np.ndarray]]


def keep_every_value(term: Term, value: np.ndarray) -> bool:
    return True


# a value is dear when each of its elements took this many operations: a matmul's
# result (2K for a contraction over K) or a reduction's (the length reduced)
DEAR_WORK = 16
SMALL_BYTES = 4096


def dear_values(term: Term, value: np.ndarray) -> bool:
    """Keep a value whose elements each took DEAR_WORK operations or more, or a tiny
    one; not an elementwise, cast or data movement result, which costs less to
    recompute from its operands than to hold. Counted from the op and its shapes, not
    timed: a loaded machine's timings would keep the wrong values."""
    if value.nbytes <= SMALL_BYTES:
        return True
    if term.op == "matmul":
        return 2 * term.sources[0].type.shape[-1] >= DEAR_WORK
    if term.op.startswith("reduce_"):
        return term.sources[0].type.numel >= DEAR_WORK * max(1, term.type.numel)
    return False


def _key(term: Term, exact: bool) -> Term:
    return term.exact_key if exact else term.native_key


class NodeValues:
    """Each node's value on each input, in each mode, keyed by value key and kept up to
    a byte budget (least recently used first out). Inputs are named by any hashable key
    (a screening input's index, a full check's input key); their arrays may be given as
    a function, called only when an input node must be computed. Values are read-only:
    a reader that wrote to one would corrupt every kernel sharing it."""

    def __init__(self, budget_bytes: int = VALUE_BYTES,
                 admit: Callable[[Term, np.ndarray], bool] = keep_every_value) -> None:
        self.budget = budget_bytes
        self.admit = admit
        self.values: OrderedDict[tuple, np.ndarray] = OrderedDict()
        self.bytes = 0
        self.owners: dict[int, list] = {}  # id -> [array owning memory, values using it]
        self.computed = 0  # node values computed (the rest came from the cache)

    def output(self, kernel: Kernel, key: Hashable, inputs: Inputs,
               exact: bool) -> np.ndarray:
        """The kernel's output on the input named ``key`` (whose arrays are ``inputs``).
        Name inputs by something cheap to hash (an int): every lookup hashes it."""
        terms, nodes, output = kernel.terms, kernel.nodes, kernel.output
        keys = [_key(t, exact) for t in terms]
        known: dict[int, np.ndarray] = {}
        needed = [False] * len(terms)
        needed[output] = True
        last_use: dict[int, int] = {}  # an operand -> the last node computed from it
        for i in range(output, -1, -1):  # what must be computed: needed, not cached
            if not needed[i]:
                continue
            value = self._get((exact, keys[i], key))
            if value is not None:
                known[i] = value
                continue
            for a in nodes[i].inputs:
                needed[a] = True
                last_use.setdefault(a, i)
        arrays = None
        with np.errstate(all="ignore"):
            for i, term in enumerate(terms[:output + 1]):
                if not needed[i] or i in known:
                    continue
                cache_key = (exact, keys[i], key)
                value = self._get(cache_key)  # a load or relayout of a value computed now
                if value is None:
                    if term.op == "input" and arrays is None:
                        arrays = inputs() if callable(inputs) else inputs
                    value = self._compute(term, nodes[i].args, known, arrays, exact)
                    value = self._put(cache_key, value, term)
                known[i] = value
                for a in nodes[i].inputs:  # free what no later node reads
                    if last_use.get(a) == i and a != output:
                        known.pop(a, None)
        return known[output]

    @staticmethod
    def _compute(term: Term, args: tuple, known: dict, inputs, exact: bool) -> np.ndarray:
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

    def _put(self, key: tuple, value: np.ndarray, term: Term | None = None) -> np.ndarray:
        self.computed += 1
        value = np.asarray(value)
        if term is not None and not self.admit(term, value):
            return value
        # a view, so that marking it read-only never touches a caller's input array
        value = value.view()
        value.flags.writeable = False
        if key in self.values:
            self._release(self.values.pop(key))
        self.values[key] = value
        self._hold(value)
        while self.bytes > self.budget and len(self.values) > 1:
            _, old = self.values.popitem(last=False)
            self._release(old)
        return value

    def clear(self) -> None:
        self.values.clear()
        self.owners.clear()
        self.bytes = 0

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
