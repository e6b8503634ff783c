"""Candidate-directed inputs: each decision point driven to each side and into its band.

After the fixed cases, for the decision targets of decisions.py:

1. every side, reached or open (the band first, where fast paths live): an input built
   by interval back-propagation (backprop.py) of the margin to just past the
   boundary, or into the band, realized on the nearest input seen (a share of elements
   or rows set); for a path (nested selections), every condition's goals at once;
2. on every side reached, other values there, round-robin over the sides: a float input
   correlated with a mask the decision reads (its largest values where the mask drops,
   then keeps), the built input itself, then the inputs the decision does not read
   drawn from hunting patterns; at most half the compare budget left;
3. sides still open (paths, then bands, then the rest, each with a fair share of the
   probes left): line searches from the nearest input along the moves of moves.py over
   the inputs the decision reads, a few values of every direction (two of the kernel's
   thresholds first), then a golden-section search around the best of the nearest
   three directions (a band 1e-3 wide between two coarse values is found);
4. the boundary itself (boundary.py): each comparison with a constant driven to
   equality in the native run, by bisection over the floats of one input element;
5. an AFL-style loop: inputs that reached something new, mutated by one to three random
   moves, kept when they reach something new; then step 2 for what they reached.

Each try is a *probe*: only what the decision points read is emulated. A probe that
reaches a side never reached before is compared in full (it counts as one of the
check's examples). Compared inputs (DIRECTED_SHARE of the examples) and probes are both
bounded, and a candidate with no decision point beyond the baseline's pays nothing.
"""

from __future__ import annotations

import numpy as np

from stochopt.spec import Spec
from stochopt.verify import traced
from stochopt.verify.backprop import Alternative, backprop, both, realize
from stochopt.verify.boundary import exact_boundary
from stochopt.verify.coverage import Coverage
from stochopt.verify.decisions import BAND, BF16_WHOLE, SWITCH_BAND, Target
from stochopt.verify.moves import (
    FLOAT_MOVES,
    MASK_MOVES,
    kernel_constants,
    legal,
    move,
    parameters,
    thresholds,
)

COARSE = 6      # values of each direction tried before the bracketed searches
REFINED_LINES = 3  # directions, nearest first, that a bracketed search narrows
REFINE = 16     # bracketed steps around the best of them (0.618^16: 5e-4 of a bracket)
CONTINUOUS = ("fill", "fill_row", "fill_some", "scale", "spread", "shift")
LOOP_PROBES = 48
# probes (coverage-only emulations) a whole search may spend, per example of the check,
# and at least
PROBES_PER_EXAMPLE, MIN_PROBES = 2, 200
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
    search = _Search(cmp, coverage, spec, seed, max(1, int(DIRECTED_SHARE * examples)),
                     coverage.probes + max(MIN_PROBES, PROBES_PER_EXAMPLE * examples))
    return search.run()


class _Search:
    def __init__(self, cmp, coverage: Coverage, spec: Spec, seed: int, budget: int,
                 probes: int):
        self.cmp, self.coverage, self.spec = cmp, coverage, spec
        self.kernel = coverage.kernel
        self.rng = np.random.default_rng(seed + 17)
        self.budget = budget          # inputs to compare in full
        self.probes = probes          # coverage.probes may grow to this
        self.side_cap = probes        # and, while one side is walked, to this
        self.compared = 0
        self.corpus: list[dict] = []  # inputs that reached something new
        # side -> (an input that reached it, how, not compared yet): where other values
        # are tried
        self.reached_by: dict[tuple[int, str], tuple[dict, str, bool]] = {}
        self.quantized_for: set[int] = set()  # decisions given grid inputs in this pass
        self.constants = kernel_constants(self.kernel)
        names = {i: n.attr("name") for i, n in enumerate(self.kernel.nodes) if n.op == "input"}
        # per target, the inputs its decision reads, then those only its branches read
        self.depends, self.deciding = [], []
        for target in coverage.targets:
            decide = traced.needed(self.kernel, target.deciding())
            need = traced.needed(self.kernel, target.nodes())
            self.deciding.append([names[i] for i in names if decide[i]])
            self.depends.append(self.deciding[-1] + [names[i] for i in names
                                                     if need[i] and not decide[i]])

    def run(self) -> tuple | None:
        # every side, reached or open: an input at its boundary (the band first: fast
        # paths live there), compared where it reaches its side
        for index, target in enumerate(self.coverage.targets):
            for side in ("band", "below", "above"):
                if side in target.sides and side not in target.dead:
                    found = self._boundary(index, side)
                    if found is not None:
                        return found
        # then other values on every side reached, nearest the boundary
        for key, (_, inputs) in self.coverage.closest.items():
            self.reached_by.setdefault(key, (inputs, f"{self.coverage.targets[key[0]].text} "
                                                     f"{key[1]}, reached", False))
        found = self._other_values(self.compared + (self.budget - self.compared) // 2)
        # sides still open: conjunctions (paths) first, then bands, then the rest, each
        # with a fair share of the probes left
        order = sorted(self.coverage.open_sides(), key=lambda key: (
            self.coverage.targets[key[0]].kind != "path", key[1] != "band"))
        for k, (index, side) in enumerate(order):
            if found is None and side not in self.coverage.reached[index]:
                left = self.probes - self.coverage.probes
                self.side_cap = self.coverage.probes + max(1, left // (len(order) - k))
                found = self._walk(index, side)
        self.side_cap = self.probes
        if found is None:
            found = self._equalities()
        if found is None:
            found = self._loop()
        return found if found is not None else self._other_values()

    def _other_values(self, until: int | None = None) -> tuple | None:
        """On every side reached, values that differ there (the targeted variants of
        every side before the drawn ones, so a short budget tries each), until `until`
        inputs are compared (the rest is kept for the sides still open)."""
        pending, self.reached_by = self.reached_by, {}
        self.quantized_for.clear()
        for variants in (self._correlated, self._itself, self._redrawn, self._quantized):
            # one variant of each side in turn
            queues = [(variants(inputs, key[0], uncompared), how)
                      for key, (inputs, how, uncompared) in pending.items()]
            while queues:
                for queue in list(queues):
                    variant = next(queue[0], None)
                    if variant is None:
                        queues.remove(queue)
                        continue
                    if until is not None and self.compared >= until:
                        return None
                    found = self._compare(legal(self.spec, variant),
                                          queue[1] + ", other values")
                    if found is not None:
                        return found
        return None

    # -- one try --------------------------------------------------------------------
    def _try(self, inputs: dict, how: str, key: tuple[int, str] | None = None
             ) -> tuple | None:
        """Probe an input; compare it where it reaches a side never reached before, or
        the side `key` it was built for (remembered for other values there)."""
        if self.exhausted:
            return None
        inputs = legal(self.spec, inputs)
        before = {(i, s) for i, sides in self.coverage.reached.items() for s in sides}
        here = self.coverage.probe(inputs)
        new = here - before
        for reached in new | ({key} & here if key is not None else set()):
            self.reached_by.setdefault(reached, (inputs, how, not new))
        if not new or self.compared >= self.budget:
            return None  # a side reached before: compared with the other values there
        self.corpus.append(inputs)
        return self._compare(inputs, how)

    @property
    def exhausted(self) -> bool:
        return self.coverage.probes >= min(self.probes, self.side_cap)

    def _compare(self, inputs: dict, how: str) -> tuple | None:
        if self.compared >= self.budget:
            return None
        self.compared += 1
        bad = self.cmp.run(inputs)
        return None if bad is None else (bad, inputs, how)

    @staticmethod
    def _itself(inputs: dict, index: int, uncompared: bool):
        """An input built for a side reached before, not compared yet: itself."""
        if uncompared:
            yield inputs

    def _redrawn(self, inputs: dict, index: int, _uncompared: bool = False):
        """The inputs the decision does not read, drawn from hunting patterns."""
        from stochopt.verify.strategies import Recipe, build_tensor

        reads = set(self.deciding[index])
        free = [n for n, t in self.spec.inputs.items() if n not in reads and t.dtype != "bool"]
        for k, pattern in enumerate(EXPLOIT_PATTERNS[:EXPLOITS] if free else ()):
            seed = int(self.rng.integers(1 << 30))
            yield dict(inputs, **{n: build_tensor(self.spec.inputs[n], Recipe(pattern, seed + k))
                                  for n in free})

    def _quantized(self, inputs: dict, index: int, _uncompared: bool = False):
        """Once per decision in each pass over the sides reached (a side first reached
        after the first pass gives its decision another round): fresh inputs whose
        values the decision reads lie on a grid (moves.py ``grid``: fixed point, bf16,
        ternary, 0/1), the structures quantized workloads have and a decision written
        as arithmetic may single out; the random draws never land on one."""
        from stochopt.verify.strategies import random_spec_inputs

        if index in self.quantized_for:
            return
        self.quantized_for.add(index)
        reads = [n for n in self.deciding[index] if self.spec.inputs[n].dtype != "bool"]
        for value in parameters(self.spec, reads[0], "grid", []) if reads else ():
            fresh = random_spec_inputs(self.spec, int(self.rng.integers(1 << 30)))
            for name in reads:
                fresh = move(self.spec, fresh, name, "grid", value, self.rng)
            yield dict(fresh, **{n: inputs[n] for n in inputs
                                 if self.spec.inputs[n].dtype == "bool"})

    def _correlated(self, inputs: dict, index: int, _uncompared: bool = False):
        """A float input of the shape of a mask the decision reads (and it does not), with
        each row's largest values where the mask drops its elements, then where it keeps
        them: what a path that ignores the mask gets wrong."""
        reads = set(self.deciding[index])
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
        """Line searches from the nearest input along the directions of moves.py: a few
        values of every direction (two of the kernel's thresholds, the rest spread
        out), then, on the directions that came nearest, a bracketed search around
        their best value (a band 1e-3 wide between two coarse values is found)."""
        key = (index, side)
        start, lines = self._start(index, side), []
        for name, kind, values in self._directions(index):
            line = _Line(self, start, name, kind, key, int(self.rng.integers(1 << 30)))
            tried = []
            for value in values[:COARSE]:
                tried.append((value, line.score(value)))
                if line.found is not None or side in self.coverage.reached[index]:
                    return line.found
                if self.exhausted:
                    return None
            lines.append((min(s for _, s in tried), len(lines), line, tried))
        for _, _, line, tried in sorted(lines)[:REFINED_LINES]:
            if line.kind in CONTINUOUS and len({s for _, s in tried}) > 1:
                _bracketed(tried, line, lambda: side in self.coverage.reached[index]
                           or self.exhausted)
                if line.found is not None or side in self.coverage.reached[index]:
                    return line.found
        return None

    def _backpropagated(self, target: Target, side: str, start: dict):
        """Inputs built from the goals that interval back-propagation gives."""
        if target.kind == "subset":
            yield from self._subset_inputs(target, side, start)
            return
        alternatives: list[Alternative] = []
        if target.kind == "path":  # every condition at once: their goals intersected
            alternatives = [()]
            for op, a, b, want in target.conds:
                goals = [alt for node, interval in _truth(op, a, b, want)
                         for alt in backprop(self.kernel, node, interval)]
                alternatives = both(alternatives, goals)
        for node, interval in _wanted(target, side, near=True) + _wanted(target, side):
            alternatives += backprop(self.kernel, node, interval)
        for alternative in alternatives[:4]:
            starts = [start]
            if any(goal.copy is not None for goal in alternative):
                # a relation between inputs shows a bug only on values that vary: built on
                # a fresh uniform input first, not only on the one nearest the side (often
                # zeros or a constant, where the fast path and the right one agree)
                from stochopt.verify.strategies import random_spec_inputs
                starts.insert(0, random_spec_inputs(self.spec,
                                                    int(self.rng.integers(1 << 16))))
            for first in starts:
                for share in SHARES:
                    built = realize(self.spec, first, alternative, self.rng, share)
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
        """(input, move, values) for every input the target reads: two of the kernel's
        thresholds (they may be on another scale than this input; for a count held in
        bf16, the least count it rounds), then the rest of the move's values coarse to
        fine."""
        target = self.coverage.targets[index]
        counting = target.kind == "cast" and target.right == BF16_WHOLE
        for name in self.depends[index]:
            kinds = MASK_MOVES if self.spec.inputs[name].dtype == "bool" else FLOAT_MOVES
            for kind in kinds:
                first = thresholds(self.spec, name, kind, self.constants)[:2]
                if counting and kind in ("ties", "kept"):
                    # a count held in bf16: first the least count it rounds (257)
                    first = [BF16_WHOLE + 1.0]
                rest = [v for v in parameters(self.spec, name, kind, self.constants)
                        if v not in first]
                yield name, kind, first + _coarse_to_fine(rest)

    # -- the boundary itself ---------------------------------------------------------
    def _equalities(self) -> tuple | None:
        """Each comparison with a constant driven to equality in the native run
        (boundary.py), from the input that came nearest; compared where reached."""
        for index, target in enumerate(self.coverage.targets):
            if target.kind != "compare" or self.exhausted or self.compared >= self.budget:
                continue
            node, c = ((target.left, target.right) if type(target.right) is not int
                       else (target.right, target.left))
            if type(node) is not int or type(c) is int:
                continue
            start = self._start(index, "band")
            # the finest-grained inputs first: an f32 element lands on more values
            names = sorted(self.deciding[index], key=lambda n: self.spec.inputs[n].dtype != "f32")
            inputs = exact_boundary(self.kernel, self.spec, node, float(c), start, names,
                                    self._spend)
            if inputs is not None:
                found = self._compare(inputs, f"directed input: {target.text} exactly at "
                                              f"its constant (native)")
                if found is not None:
                    return found
        return None

    def _spend(self) -> bool:
        self.coverage.probes += 1
        return self.exhausted

    # -- AFL-style loop --------------------------------------------------------------
    def _loop(self) -> tuple | None:
        names = sorted({n for names in self.depends for n in names})
        if not names:
            return None
        for _ in range(LOOP_PROBES):
            open_sides = self.coverage.open_sides()
            if not open_sides or self.exhausted:
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


def _truth(op: str, a, b, want: bool) -> list[tuple[int, tuple[float, float]]]:
    """(node, interval) that gives a condition the truth wanted: a bool node true or
    false, or a comparison's node operand on the wanted side of its constant one."""
    if op == "bool":
        return [(a, (1.0, 1.0) if want else (0.0, 0.0))]
    if type(a) is int and type(b) is not int:
        node, c, flipped = a, float(b), False
    elif type(b) is int and type(a) is not int:
        node, c, flipped = b, float(a), True
    else:
        return []
    # the side of c where "node op c" holds (c op node reads the other way)
    above = (op in ("gt", "ge")) != flipped
    if op == "eq":
        return [(node, (c, c))] if want else []
    return [(node, (c, np.inf) if above == want else (-np.inf, c))]


def _wanted(target: Target, side: str, near: bool = False
            ) -> list[tuple[int, tuple[float, float]]]:
    """(node, interval) that puts the margin on the side: the operand that is a node,
    the other a number (a comparison with a constant, a clamp, a cast, a mask). `near`:
    only just past the boundary (within NEAR bands of it), where off-by-one conditions
    and wrong thresholds show."""
    if target.kind == "path":
        return []
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
    if target.kind == "switch" and near:
        return []
    if target.kind == "switch" and target.power:  # |left| within e^(w / power) of 1
        a, b = np.exp(-SWITCH_BAND / target.power), np.exp(SWITCH_BAND / target.power)
        return {"band": [(target.left, (a, b)), (target.left, (-b, -a))],
                "below": [(target.left, (-a, a))],
                "above": [(target.left, (b, np.inf)), (target.left, (-np.inf, -b))]}[side]
    if target.kind == "switch":  # the steep operand into the live band, or past it
        w = SWITCH_BAND * target.unit
        if side == "band":  # its open centre first (exp(0): the gate wide open), then all
            return [(target.left, (-w * BAND, w * BAND)), (target.left, (-w, w))]
        return [(target.left, {"below": (-np.inf, -w), "above": (w, np.inf)}[side])]
    if target.kind == "guard":  # |x| against the guard, either sign
        c = float(target.right)
        eps = BAND * c / 2
        if side == "band":
            return [(target.left, (c - eps, c + eps)), (target.left, (-c - eps, -c + eps))]
        if side == "below":
            return [(target.left, (-c + eps, c - eps))] if not near else [
                (target.left, (c / (1 + NEAR * BAND), c - eps))]
        reach = c * (1 + NEAR * BAND) if near else np.inf
        return [(target.left, (c + eps, reach)), (target.left, (-reach, -c - eps))]
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


class _Line:
    """One direction from one input: the score (decisions.assess) of the side wanted
    for each parameter value, the same elements moved for every value."""

    def __init__(self, search: _Search, start: dict, name: str, kind: str, key, seed: int):
        self.search, self.start, self.name, self.kind = search, start, name, kind
        self.key, self.seed = key, seed
        self.found: tuple | None = None
        target = search.coverage.targets[key[0]]
        self.how = f"directed input: {kind} of {name} toward {target.text} {key[1]}"

    def score(self, value: float) -> float:
        trial = move(self.search.spec, self.start, self.name, self.kind, value,
                     np.random.default_rng(self.seed))
        self.found = self.search._try(trial, self.how, self.key)
        return self.search.coverage.last_scores.get(self.key, np.inf)


def _bracketed(tried: list[tuple[float, float]], line: _Line, done) -> int:
    """Values between the best tried value and its better neighbour (by value), each
    step narrowing on the best score: a golden-section search for a score that dips to
    the side, in log space where the values share a sign (scales, spreads). Returns
    the probes spent."""
    points = sorted(tried)
    for step in range(REFINE):
        best = min(range(len(points)), key=lambda k: points[k][1])
        near = [k for k in (best - 1, best + 1) if 0 <= k < len(points)]
        if not near:
            return step
        a, b = points[best][0], points[min(near, key=lambda k: points[k][1])][0]
        if abs(a - b) <= 1e-9 * max(abs(a), abs(b)):
            return step
        if a * b > 0:
            value = float(np.sign(a) * np.exp(0.618 * np.log(abs(a)) + 0.382 * np.log(abs(b))))
        else:
            value = 0.618 * a + 0.382 * b
        points.append((value, line.score(value)))
        points.sort()
        if line.found is not None or done():
            return step + 1
    return REFINE


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
