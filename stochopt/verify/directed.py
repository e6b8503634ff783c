"""Candidate-directed inputs: each decision point driven to each side and into its band.

After the fixed cases, every side of every decision target (decisions.py) that no input
has reached, and that the declared ranges do not make dead, is searched for, in order:

1. interval back-propagation (backprop.py) of the side's margin to goals on the inputs,
   realized on the nearest input seen (a share of elements, or of rows, set);
2. line searches from that input along the directions of moves.py, over the inputs
   the target depends on: each direction's parameter walked coarse to fine, the
   kernel's own constants (its thresholds) first;
3. an AFL-style loop: inputs that reached a new side or band, mutated by one to three
   random moves, kept when they reach something new.

Each try is a *probe*: only what the decision points read is emulated. A probe that
reaches a side not reached before is then compared in full (it counts as one of the
check's examples). Probes and compared inputs are both bounded, and a candidate with
no decision point beyond the baseline's pays nothing.
"""

from __future__ import annotations

import numpy as np

from stochopt.spec import Spec
from stochopt.verify import traced
from stochopt.verify.backprop import Alternative, backprop, realize
from stochopt.verify.coverage import Coverage
from stochopt.verify.decisions import BAND, BF16_WHOLE, Target
from stochopt.verify.moves import (
    FLOAT_MOVES,
    MASK_MOVES,
    kernel_constants,
    legal,
    move,
    parameters,
    thresholds,
)

PROBES_PER_SIDE = 16
LOOP_PROBES = 48
# of a check's examples, at most this share are directed inputs (compared in full)
DIRECTED_SHARE = 0.25
SHARES = (0.1, 0.5)  # of elements or rows set by a back-propagated goal
# inputs a decision does not read, drawn otherwise once a new side is reached
EXPLOIT_PATTERNS = ("one_hot", "edge_extreme", "two_clusters")
EXPLOITS = 2
NEAR = 8  # "just past a boundary": within this many bands of it


def directed_inputs(cmp, coverage: Coverage, spec: Spec, seed: int,
                    examples: int) -> tuple | None:
    """(mismatch, inputs, how) for the first directed input the comparison refuses, or
    None once every open side was tried (module doc). `cmp` is check's _Comparison."""
    search = _Search(cmp, coverage, spec, seed, max(1, int(DIRECTED_SHARE * examples)))
    return search.run()


class _Search:
    def __init__(self, cmp, coverage: Coverage, spec: Spec, seed: int, budget: int):
        self.cmp, self.coverage, self.spec = cmp, coverage, spec
        self.kernel = coverage.kernel
        self.rng = np.random.default_rng(seed + 17)
        self.budget = budget          # inputs to compare in full
        self.compared = 0
        self.corpus: list[dict] = []  # inputs that reached something new
        # side -> (an input that reached it, how): where other values are tried
        self.reached_by: dict[tuple[int, str], tuple[dict, str]] = {}
        self.constants = kernel_constants(self.kernel)
        names = {i: n.attr("name") for i, n in enumerate(self.kernel.nodes) if n.op == "input"}
        self.depends = []
        for target in coverage.targets:
            need = traced.needed(self.kernel, target.nodes())
            self.depends.append([names[i] for i in names if need[i]])

    def run(self) -> tuple | None:
        # every side, reached or open: an input at its boundary (the band first: fast
        # paths live there), compared where it reaches its side
        for index, target in enumerate(self.coverage.targets):
            for side in ("band", "below", "above"):
                if side not in target.dead:
                    found = self._boundary(index, side)
                    if found is not None:
                        return found
        # then other values on every side reached, nearest the boundary
        for key, (_, inputs) in self.coverage.closest.items():
            self.reached_by.setdefault(key, (inputs, f"{self.coverage.targets[key[0]].text} "
                                                     f"{key[1]}, reached"))
        found = self._other_values()
        for index, side in self.coverage.open_sides():
            if found is None and side not in self.coverage.reached[index]:
                found = self._walk(index, side)
        if found is None:
            found = self._loop()
        return found if found is not None else self._other_values()

    def _other_values(self) -> tuple | None:
        """On every side reached, values that differ there (the targeted variants of
        every side before the drawn ones, so a short budget tries each)."""
        pending, self.reached_by = self.reached_by, {}
        for variants in (self._correlated, self._redrawn):
            for key, (inputs, how) in pending.items():
                for variant in variants(inputs, key[0]):
                    found = self._compare(legal(self.spec, variant), how + ", other values")
                    if found is not None:
                        return found
        return None

    # -- one try --------------------------------------------------------------------
    def _try(self, inputs: dict, how: str, key: tuple[int, str] | None = None
             ) -> tuple | None:
        """Probe an input; compare it where it reaches a side never reached before, or
        the side `key` it was built for (remembered for other values there)."""
        inputs = legal(self.spec, inputs)
        before = {(i, s) for i, sides in self.coverage.reached.items() for s in sides}
        here = self.coverage.probe(inputs)
        wanted = (here - before) | ({key} & here if key is not None else set())
        if not wanted or self.compared >= self.budget:
            return None
        self.corpus.append(inputs)
        for reached in wanted:
            self.reached_by.setdefault(reached, (inputs, how))
        return self._compare(inputs, how)

    def _compare(self, inputs: dict, how: str) -> tuple | None:
        if self.compared >= self.budget:
            return None
        self.compared += 1
        bad = self.cmp.run(inputs)
        return None if bad is None else (bad, inputs, how)

    def _redrawn(self, inputs: dict, index: int):
        """The inputs the target does not read, drawn from hunting patterns."""
        from stochopt.verify.strategies import Recipe, build_tensor

        reads = set(self.depends[index])
        free = [n for n, t in self.spec.inputs.items() if n not in reads and t.dtype != "bool"]
        for k, pattern in enumerate(EXPLOIT_PATTERNS[:EXPLOITS] if free else ()):
            seed = int(self.rng.integers(1 << 30))
            yield dict(inputs, **{n: build_tensor(self.spec.inputs[n], Recipe(pattern, seed + k))
                                  for n in free})

    def _correlated(self, inputs: dict, index: int):
        """A float input of the shape of a mask the target reads (and it does not), with
        each row's largest values where the mask drops its elements, then where it keeps
        them: what a path that ignores the mask gets wrong."""
        reads = set(self.depends[index])
        for mask in (n for n in reads if self.spec.inputs[n].dtype == "bool"):
            for name, t in self.spec.inputs.items():
                if name not in reads and t.dtype != "bool" and t.shape == \
                        self.spec.inputs[mask].shape:
                    fresh = self.rng.uniform(*t.bounds, t.shape)  # distinct values
                    for keep in (False, True):
                        yield dict(inputs, **{name: _largest_where(fresh,
                                                                   inputs[mask] == keep)})

    def _start(self, index: int, side: str) -> dict:
        """The input nearest to reaching the side, or reaching it nearest its boundary."""
        for found in (self.coverage.nearest, self.coverage.closest):
            if (index, side) in found:
                return found[(index, side)][1]
        from stochopt.verify.strategies import random_spec_inputs
        return random_spec_inputs(self.spec, int(self.rng.integers(1 << 16)))

    # -- the searches for one side ----------------------------------------------------
    def _boundary(self, index: int, side: str) -> tuple | None:
        """Inputs built by back-propagation just past the boundary on this side (or in
        its band), tried until one reaches the side."""
        target = self.coverage.targets[index]
        what = f"{target.text} {side}"
        for inputs in self._backpropagated(target, side, self._start(index, side)):
            found = self._try(inputs, f"directed input: back-propagated to {what}",
                              (index, side))
            if found is not None or (index, side) in self.reached_by:
                return found
        return None

    def _walk(self, index: int, side: str) -> tuple | None:
        """Line searches along the directions of moves.py from the nearest input."""
        target = self.coverage.targets[index]
        what = f"{target.text} {side}"
        for probes, (name, kind, value) in enumerate(self._directions(index)):
            if probes >= PROBES_PER_SIDE or side in self.coverage.reached[index]:
                break
            trial = move(self.spec, self._start(index, side), name, kind, value, self.rng)
            found = self._try(trial, f"directed input: {kind} of {name} toward {what}",
                              (index, side))
            if found is not None:
                return found
        return None

    def _backpropagated(self, target: Target, side: str, start: dict):
        """Inputs built from the goals that interval back-propagation gives."""
        if target.kind == "subset":
            yield from self._subset_inputs(target, side, start)
            return
        alternatives: list[Alternative] = []
        for node, interval in _wanted(target, side, near=True) + _wanted(target, side):
            alternatives += backprop(self.kernel, node, interval)
        for alternative in alternatives[:4]:
            for share in SHARES:
                built = realize(self.spec, start, alternative, self.rng, share)
                if built is not None:
                    yield built

    def _subset_inputs(self, target: Target, side: str, start: dict):
        """A reduction over some columns of an input: the extreme put in the columns
        it skips (above), in those it takes (below), or the same in both (band)."""
        base = self.kernel.nodes[target.base]
        if base.op != "input" or target.op == "reduce_sum" and side == "band":
            return
        name = base.attr("name")
        lo, hi = self.spec.inputs[name].bounds
        x = np.asarray(start[name], np.float64).copy()
        cols = np.arange(x.shape[target.axis])
        inside = (cols >= target.columns[0]) & (cols < target.columns[1])
        extreme = lo if target.op == "reduce_min" else hi
        moved = np.moveaxis(x, target.axis, -1)
        rows = moved.reshape(-1, moved.shape[-1])
        pick = self.rng.random(rows.shape[0]) < 0.5
        if side in ("above", "band"):
            rows[np.ix_(pick, np.flatnonzero(~inside)[:1])] = extreme
        if side in ("below", "band"):
            rows[np.ix_(pick, np.flatnonzero(inside)[:1])] = extreme
        yield dict(start, **{name: np.moveaxis(moved, -1, target.axis)})

    def _directions(self, index: int):
        """(input, move, parameter) to walk: each direction's parameters coarse to
        fine, directions taken in turn so a short budget tries each."""
        walks = []
        for name in self.depends[index]:
            kinds = MASK_MOVES if self.spec.inputs[name].dtype == "bool" else FLOAT_MOVES
            for kind in kinds:
                first = thresholds(self.spec, name, kind, self.constants)
                rest = [v for v in parameters(self.spec, name, kind, self.constants)
                        if v not in first]
                walks.append([(name, kind, v) for v in first + _coarse_to_fine(rest)])
        while any(walks):
            for walk in walks:
                if walk:
                    yield walk.pop(0)

    # -- AFL-style loop --------------------------------------------------------------
    def _loop(self) -> tuple | None:
        names = sorted({n for names in self.depends for n in names})
        if not names:
            return None
        for _ in range(LOOP_PROBES):
            open_sides = self.coverage.open_sides()
            if not open_sides:
                return None
            pool = self.corpus + [self.coverage.nearest[key][1] for key in open_sides
                                  if key in self.coverage.nearest]
            if not pool:
                return None
            child = pool[self.rng.integers(len(pool))]
            for _ in range(1 + self.rng.integers(3)):
                name = names[self.rng.integers(len(names))]
                kinds = MASK_MOVES if self.spec.inputs[name].dtype == "bool" else FLOAT_MOVES
                kind = kinds[self.rng.integers(len(kinds))]
                values = parameters(self.spec, name, kind, self.constants)
                child = move(self.spec, child, name, kind,
                             values[self.rng.integers(len(values))], self.rng)
            found = self._try(child, "directed input: mutated (coverage-guided)")
            if found is not None:
                return found
        return None


def _largest_where(x: np.ndarray, where: np.ndarray) -> np.ndarray:
    """x's values, each row's sorted so that its largest lie where `where` holds."""
    values = np.sort(np.asarray(x, np.float64).reshape(-1, x.shape[-1]), axis=1)
    place = where.reshape(values.shape)
    # positions where `where` holds first (last in ascending order): they take the top
    order = np.argsort(place, axis=1, kind="stable")
    out = np.empty_like(values)
    np.put_along_axis(out, order, values, axis=1)
    return out.reshape(x.shape)


def _wanted(target: Target, side: str, near: bool = False
            ) -> list[tuple[int, tuple[float, float]]]:
    """(node, interval) that puts the margin on the side: the operand that is a node,
    the other a number (a comparison with a constant, a clamp, a cast, a mask). `near`:
    only just past the boundary (within NEAR bands of it), where off-by-one conditions
    and wrong thresholds show."""
    if target.kind == "mask":
        if side == "band" or near:
            return []
        return [(target.left, (1.0, 1.0) if side == "above" else (0.0, 0.0))]
    node, c, flip = None, None, False
    if target.kind == "cast" and target.right == BF16_WHOLE:
        if side == "band":
            return [(target.left, (BF16_WHOLE, BF16_WHOLE))]
        if side == "below":
            return [(target.left, (-BF16_WHOLE + 1, BF16_WHOLE - 1))]
        reach = BF16_WHOLE + 8 if near else np.inf
        return [(target.left, (BF16_WHOLE + 1, reach)), (target.left, (-reach, -BF16_WHOLE - 1))]
    if type(target.left) is int and type(target.right) is not int:
        node, c = target.left, float(target.right)
    elif type(target.right) is int and type(target.left) is not int:
        node, c, flip = target.right, float(target.left), True
    if node is None or (near and (side == "band" or c == 0)):
        return []
    eps = BAND * abs(c) / 2 if c else 0.0
    reach = NEAR * BAND * abs(c) if near else np.inf
    if side == "band":
        return [(node, (c - eps, c + eps))]
    below, above = (c - reach, c - eps if c else -1e-30), (c + eps if c else 1e-30, c + reach)
    # margin = node - c (or c - node): below the boundary is node below c, unless flipped
    return [(node, (below if (side == "below") != flip else above))]


def _coarse_to_fine(values: list[float]) -> list[float]:
    """The values spread out: the first and the middle, then the quarters, and so
    on."""
    if len(values) <= 2:
        return list(values)
    order, seen = [], set()
    step = len(values)
    while step >= 1:
        for i in range(0, len(values), step):
            if i not in seen:
                seen.add(i)
                order.append(values[i])
        step //= 2
    return order
