"""What a full check computes once per run, and what it computes per candidate.

A full check runs a kernel on ~200 inputs. Most of the work on an input does not depend
on the kernel: building the arrays, the spec's float64 reference, the baseline's
magnitudes (the local tolerances), the baseline's native output (the twice-the-baseline
rule) and, after a near miss, the baseline's error on nearby inputs. A ``CheckContext``
holds that work for every check of a run (the check workers keep one each;
``check()`` without one makes its own):

- once per run: the baseline, the typical output scale;
- once per seed: the recipes hypothesis draws (``drawn_recipes``: its generation phase,
  which with no feedback depends on the seed alone);
- once per input of the run (an *entry*, named by its input key): the arrays, the
  reference, the magnitudes, the baseline's native output and nearby error;
- shared by every kernel it emulates: per-node values (backend/node_values.py), the dear
  ones only, so a candidate whose value graph meets the baseline's or an earlier
  candidate's (hash-consed terms say where) computes only what is new.

Per candidate remain its range analysis, its exact and native outputs, the comparisons,
the targeted draws and the local search (verify/targeting.py, verify/climb.py), which
follow its errors. A check gives the same verdict with a warm context as with a fresh
one: the context caches, it never decides.

An input key is ``("recipes", ((name, recipe), ...), cuts)`` for an input built from
recipes (``cuts``: the kernel's cut positions of the inputs whose pattern reads them),
and ``("arrays", (tensor key, ...))`` for any other input, each tensor named by the
entry it came from or by a digest of its bytes (a local search step changes one tensor
of an input the bank built). With a directory (the run's ``check_bank/``) the drawn
recipes and each entry's reference, magnitudes and baseline output are also kept on
disk, so another check worker or a resumed run reads them instead.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator, Mapping
from dataclasses import asdict
from pathlib import Path

import numpy as np

from stochopt.backend.node_values import NodeValues, dear_values
from stochopt.leir.ir import Kernel
from stochopt.leir.ops import BF16
from stochopt.leir.render import render
from stochopt.spec import Spec
from stochopt.verify.strategies import (
    BOOL_PATTERNS,
    FLOAT_PATTERNS,
    Recipe,
    build_inputs,
    input_recipes,
)

# entries kept in memory, arrays included (mla_decode's inputs are 4.5 MB each), and
# per-node values; STOCHOPT_CHECK_MEMORY (bytes) sets both together (2/3 and 1/3)
ENTRY_BYTES = 1 << 30
VALUE_BYTES = 512 << 20
# a context made for one check keeps only what that check may run again (a targeted
# step, a shrink, a local search step from an input)
ONE_CHECK_BYTES = 128 << 20
# an entry goes to disk only when its arrays are small: recomputing softmax's (128x1024
# reference, magnitudes and baseline output) costs milliseconds, storing them 2.5 MB
DISK_ENTRY_BYTES = 512 << 10
# the patterns whose tensors never read the kernel's cuts: their inputs are shared by
# every kernel; any other pattern (a hunting pattern, or one added later) keys its
# tensor by the cuts it was built with
CUT_FREE = frozenset(FLOAT_PATTERNS + BOOL_PATTERNS)
# more draws than this are made in blocks, each with its own seed (DRAW_BLOCK_SEED apart),
# and as many blocks more as it takes to make up for repeats (a few at most)
DRAW_BLOCK, DRAW_BLOCK_SEED, DRAW_BLOCKS_MORE = 500, 1_000_003, 4
# hunting patterns that place values within rows alone (hunting.hunt_tensor): they are
# built with the cuts of the last axis only, so a kernel that tiles the rows of an input
# (mla_decode's tiles of positions) shares them with one that does not
ROW_CUTS_ONLY = frozenset({"mixed_rows", "two_clusters", "offset_outlier", "near_overflow"})


def memory_budgets() -> tuple[int, int]:
    """(entry bytes, value bytes) of a context: the defaults, or STOCHOPT_CHECK_MEMORY."""
    text = os.environ.get("STOCHOPT_CHECK_MEMORY")
    if text is None:
        return ENTRY_BYTES, VALUE_BYTES
    if not text.strip().isdigit() or int(text) < 3:
        from stochopt.errors import StochoptError
        raise StochoptError(f"STOCHOPT_CHECK_MEMORY must be a number of bytes, got {text!r}",
                            hint="e.g. STOCHOPT_CHECK_MEMORY=1000000000 for about 1 GB")
    total = int(text)
    return 2 * total // 3, total // 3


def cuts_read(spec: Spec, recipes: Mapping[str, Recipe], cuts: Mapping | None) -> dict:
    """The kernel's cuts that building these recipes reads, per input: none for a
    CUT_FREE pattern, the last axis's for a ROW_CUTS_ONLY one (the other axes as an
    uncut kernel has them), all of them for any other."""
    cuts = cuts or {}
    used = {}
    for name, r in recipes.items():
        if r.pattern in CUT_FREE or cuts.get(name) is None:
            continue
        axes = cuts[name]
        if r.pattern in ROW_CUTS_ONLY:
            shape = spec.inputs[name].shape
            axes = tuple((0, n - 1) for n in shape[:-1]) + axes[-1:]
        used[name] = axes
    return used


def recipe_key(recipes: Mapping[str, Recipe], used_cuts: Mapping) -> tuple:
    """The input key of an input built from recipes with these cuts (cuts_read)."""
    return ("recipes", tuple(recipes.items()), tuple(used_cuts.items()))


class Entry:
    """What a check needs of one input, whatever the kernel: computed on first use."""

    __slots__ = ("key", "recipes", "build", "arrays", "reference", "magnitude",
                 "baseline_output", "nearby", "allowance", "shared", "nbytes")

    def __init__(self, key: Hashable, recipes: dict | None,
                 build: Callable[[], dict] | None) -> None:
        self.key, self.recipes, self.build = key, recipes, build
        self.arrays: dict | None = None   # kept for inputs the bank builds
        self.reference: np.ndarray | None = None
        self.magnitude: np.ndarray | None = None
        self.baseline_output: np.ndarray | None = None
        self.nearby: np.ndarray | None = None  # the baseline's worst error nearby
        self.allowance: tuple | None = None  # compare.precision_allowance on this input
        self.shared = False  # tried by every check of the run (recipe_inputs)
        self.nbytes = 0


class BankInputs(Mapping):
    """The arrays of one input as a check sees them (a read-only mapping), with the
    entry that holds what the bank knows of it. A bank-built input is built on first
    access: a kernel whose outputs the bank already holds never needs the arrays."""

    def __init__(self, entry: Entry, arrays: Mapping[str, np.ndarray] | None = None) -> None:
        self.entry = entry
        self._arrays = arrays

    @property
    def key(self) -> Hashable:
        return self.entry.key

    def arrays(self) -> Mapping[str, np.ndarray]:
        if self._arrays is None:
            if self.entry.arrays is None:
                self.entry.arrays = self.entry.build()
            self._arrays = self.entry.arrays
        return self._arrays

    def __getitem__(self, name: str) -> np.ndarray:
        return self.arrays()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.arrays())

    def __len__(self) -> int:
        return len(self.arrays())


class CheckContext:
    """The candidate-independent work of a run's full checks (see the module doc)."""

    def __init__(self, spec: Spec, baseline: Kernel, machine=None,
                 directory: str | Path | None = None, entry_bytes: int | None = None,
                 value_bytes: int | None = None) -> None:
        from stochopt.verify.magnitude import reduction_terms
        from stochopt.verify.reference import typical_output_scale

        default_entries, default_values = memory_budgets()
        self.spec, self.baseline, self.machine = spec, baseline, machine
        self.typical_scale = typical_output_scale(spec)
        self.terms = reduction_terms(baseline)  # the precision floor's sums (compare.py)
        self.values = NodeValues(value_bytes or default_values, admit=dear_values)
        self.entry_budget = entry_bytes or default_entries
        self.entries: OrderedDict[Hashable, Entry] = OrderedDict()
        self.entry_bytes = 0
        self.numbers: dict[Hashable, int] = {}  # input key -> its number in self.values
        self.tensor_keys: dict[int, tuple[weakref.ref, Hashable]] = {}  # id -> array, key
        self._named_at = 1024
        self.draws: dict[tuple[int, int], list[dict[str, Recipe]]] = {}
        self.directory = Path(directory) if directory is not None else None
        # what an entry on disk depends on: the spec, the baseline and the code that
        # builds inputs and computes references, magnitudes, native outputs and the
        # baseline's error nearby
        self.identity = hashlib.sha256("\n".join(
            (spec.name, spec.source, _body(baseline), _code_digest())).encode()).hexdigest()
        self.hits = self.misses = 0  # entries found / computed (disk reads count as hits)

    def serves(self, spec: Spec, baseline: Kernel) -> bool:
        """Whether this context was made for this spec and baseline."""
        return spec is self.spec and baseline is self.baseline or (
            spec.name == self.spec.name and spec.source == self.spec.source
            and _body(baseline) == _body(self.baseline))

    # -- inputs ------------------------------------------------------------------------
    def recipe_inputs(self, recipes: Mapping[str, Recipe], cuts: Mapping | None,
                      shared: bool = True) -> BankInputs:
        """The input these recipes build with these cuts, from the bank when it has it.
        ``shared``: an input every check of the run tries (a structured, hunting or
        drawn case), kept before the inputs that one kernel's errors led to."""
        recipes = dict(recipes)
        cuts = cuts_read(self.spec, recipes, cuts)
        key = recipe_key(recipes, cuts)

        def build() -> dict:
            arrays = build_inputs(self.spec, recipes, cuts)
            for name, x in arrays.items():
                self._name_tensor(x, (key, name))
            entry = self.entries.get(key)
            if entry is not None:  # counted once its arrays exist
                self._account(entry, sum(x.nbytes for x in arrays.values()))
            return arrays

        entry = self._entry(key, recipes, build)
        entry.shared = entry.shared or shared
        return BankInputs(entry)

    def given_inputs(self, inputs: Mapping[str, np.ndarray]) -> BankInputs:
        """Any other input (a given one, a local search step): keyed by where each of
        its tensors came from, or by their bytes."""
        if isinstance(inputs, BankInputs):
            return inputs
        key = ("arrays", tuple((n, self._tensor_key(x)) for n, x in inputs.items()))
        return BankInputs(self._entry(key, None, None), inputs)

    def _tensor_key(self, x: np.ndarray) -> Hashable:
        known = self.tensor_keys.get(id(x))
        if known is not None and known[0]() is x:
            return known[1]
        x = np.asarray(x)
        digest = hashlib.sha1(f"{x.dtype.str}{x.shape}".encode())
        digest.update(np.ascontiguousarray(x).view(np.uint8).reshape(-1))
        key = ("digest", digest.hexdigest())
        self._name_tensor(x, key)
        return key

    def _name_tensor(self, x: np.ndarray, key: Hashable) -> None:
        """Remember where an array came from, by identity, as long as it lives."""
        if len(self.tensor_keys) > 2 * self._named_at:  # forget arrays freed since
            self.tensor_keys = {i: v for i, v in self.tensor_keys.items() if v[0]() is not None}
            self._named_at = max(1024, len(self.tensor_keys))
        self.tensor_keys[id(x)] = (weakref.ref(x), key)

    def _entry(self, key: Hashable, recipes: dict | None, build) -> Entry:
        entry = self.entries.get(key)
        if entry is not None:
            self.entries.move_to_end(key)
            return entry
        entry = Entry(key, recipes, build)
        self.entries[key] = entry
        return entry

    def _account(self, entry: Entry, nbytes: int) -> None:
        """Count an entry's new arrays; past the budget, drop the inputs one kernel's
        errors led to (least recently used first), then keep no more shared ones: a run's
        checks go through the shared inputs in one order each time, where dropping the
        least recently used would drop each just before it is needed again."""
        entry.nbytes += nbytes
        if self.entries.get(entry.key) is not entry:
            return
        self.entry_bytes += nbytes
        if self.entry_bytes <= self.entry_budget:
            return
        for key in [k for k, e in self.entries.items() if not e.shared and e is not entry]:
            self.entry_bytes -= self.entries.pop(key).nbytes
            if self.entry_bytes <= self.entry_budget:
                return
        if len(self.entries) > 1:
            del self.entries[entry.key]
            self.entry_bytes -= entry.nbytes

    # -- what every kernel is judged against -------------------------------------------
    def prepare(self, inputs: BankInputs) -> Entry:
        """The entry of this input with its reference, magnitudes and baseline output."""
        from stochopt.verify.magnitude import magnitudes
        from stochopt.verify.reference import reference_output

        entry = inputs.entry
        if entry.reference is not None:
            self.hits += 1
            return entry
        if self._read(entry):
            self.hits += 1
            return entry
        self.misses += 1
        entry.reference = reference_output(self.spec, inputs)
        entry.magnitude = magnitudes(self.baseline, inputs, entry.reference)
        entry.baseline_output = self.output(self.baseline, inputs, exact=False)
        self._account(entry, entry.reference.nbytes + entry.magnitude.nbytes
                      + entry.baseline_output.nbytes)
        self._write(entry)
        return entry

    def limits(self, inputs: BankInputs) -> Entry:
        """The entry with its precision allowance (compare.py), which depends on the
        input alone."""
        from stochopt.verify.compare import precision_allowance

        entry = self.prepare(inputs)
        if entry.allowance is None:
            spec = self.spec
            entry.allowance = precision_allowance(
                entry.reference, spec.output_dtype, spec.rtol, spec.atol,
                entry.baseline_output, magnitude=entry.magnitude, terms=self.terms)
            self._account(entry, sum(np.asarray(a).nbytes for a in entry.allowance
                                     if a is not None))
        return entry

    def output(self, kernel: Kernel, inputs: BankInputs, exact: bool) -> np.ndarray:
        """A kernel's output on this input, from the values the bank shares."""
        number = self.numbers.get(inputs.key)
        if number is None:  # the values are keyed by a number: hashed at every node
            number = self.numbers[inputs.key] = len(self.numbers)
        return self.values.output(kernel, number, inputs.arrays, exact)

    def nearby_error(self, inputs: BankInputs) -> np.ndarray:
        """The baseline's worst error per row on inputs near this one (check.py)."""
        from stochopt.verify.reference import baseline_error_nearby

        entry = inputs.entry
        if entry.nearby is None:
            entry.nearby = baseline_error_nearby(self.spec, self.baseline, inputs,
                                                 reference=entry.reference,
                                                 magnitude=entry.magnitude)
            self._account(entry, entry.nearby.nbytes)
            self._write(entry)
        return entry.nearby

    # -- drawn recipes -----------------------------------------------------------------
    def drawn(self, seed: int, count: int) -> Iterator[dict[str, Recipe]]:
        """``count`` different recipes hypothesis draws for this seed (drawn_recipes,
        made once per run), block by block: a check stopped at its deadline has not
        waited for draws it would never run. A block holds at most DRAW_BLOCK; where
        its repeats leave it short, the next block (its own seed) makes up the rest."""
        seen: set[tuple] = set()
        for block in range(count // DRAW_BLOCK + DRAW_BLOCKS_MORE):
            size = min(DRAW_BLOCK, count - len(seen))
            if size <= 0:
                return
            for recipes in self._drawn_block(seed + DRAW_BLOCK_SEED * block, size):
                key = tuple(recipes.items())
                if key not in seen and len(seen) < count:
                    seen.add(key)
                    yield recipes

    def _drawn_block(self, seed: int, count: int) -> list[dict[str, Recipe]]:
        key = (seed, count)
        if key not in self.draws:
            path = self._path("draws", f"seed{seed}-n{count}.json")
            drawn = _read_recipes(path) if path is not None else None
            if drawn is None:
                drawn = drawn_recipes(self.spec, count, seed)
                if path is not None:
                    _atomic_write(path, json.dumps(
                        [{n: asdict(r) for n, r in d.items()} for d in drawn]).encode())
            self.draws[key] = drawn
        return self.draws[key]

    # -- the directory -----------------------------------------------------------------
    def _path(self, kind: str, name: str) -> Path | None:
        if self.directory is None:
            return None
        return self.directory / self.identity[:16] / kind / name

    def _entry_path(self, entry: Entry) -> Path | None:
        if entry.key[0] != "recipes":  # digests of arrays: rarely met twice
            return None
        return self._path("entries", hashlib.sha256(repr(entry.key).encode())
                          .hexdigest()[:32] + ".npz")

    def _read(self, entry: Entry) -> bool:
        path = self._entry_path(entry)
        if path is None or not path.is_file():
            return False
        try:
            with np.load(path) as data:
                entry.reference, entry.magnitude = data["reference"], data["magnitude"]
                base = data["baseline"]
                entry.baseline_output = base.astype(BF16) if "bf16" in data else base
                entry.nearby = data["nearby"] if "nearby" in data else None
        except (OSError, ValueError, KeyError):  # a torn or foreign file: compute it
            entry.reference = entry.magnitude = entry.baseline_output = None
            return False
        self._account(entry, entry.reference.nbytes + entry.magnitude.nbytes
                      + entry.baseline_output.nbytes)
        return True

    def _write(self, entry: Entry) -> None:
        path = self._entry_path(entry)
        if path is None or entry.reference.nbytes + entry.magnitude.nbytes \
                + entry.baseline_output.nbytes > DISK_ENTRY_BYTES:
            return
        import io

        base = entry.baseline_output
        arrays = {"reference": entry.reference, "magnitude": entry.magnitude,
                  "baseline": base}
        if base.dtype == BF16:  # npz cannot hold bf16: its float32 is exact
            arrays.update(baseline=base.astype(np.float32), bf16=np.array(True))
        if entry.nearby is not None:
            arrays["nearby"] = entry.nearby
        buffer = io.BytesIO()
        np.savez(buffer, **arrays)
        try:
            _atomic_write(path, buffer.getvalue())
        except OSError:  # a full or read-only disk costs only the cache
            pass


def drawn_recipes(spec: Spec, count: int, seed: int) -> list[dict[str, Recipe]]:
    """The recipes hypothesis's generation phase draws for this seed, in order, without
    repeats: with no feedback from the kernel (no target(), no failure), they depend on
    the spec, the count and the seed alone, so every check of a run can share them."""
    import hypothesis
    from hypothesis import HealthCheck, Phase, Verbosity, given, settings

    drawn: list[dict[str, Recipe]] = []
    seen: set[tuple] = set()

    @settings(max_examples=count, database=None, deadline=None, derandomize=False,
              suppress_health_check=list(HealthCheck), print_blob=False,
              verbosity=Verbosity.quiet, phases=(Phase.generate,))
    @hypothesis.seed(seed)
    @given(input_recipes(spec))
    def record(recipes):
        key = tuple(recipes.items())
        if key not in seen:
            seen.add(key)
            drawn.append(recipes)

    try:
        record()
    except hypothesis.errors.HypothesisException as e:
        from stochopt.errors import StochoptError
        raise StochoptError(f"the input generator failed: {e}") from None
    return drawn


def _body(kernel: Kernel) -> str:
    """A kernel's text without the path of its spec file: a run's check workers read the
    spec where the user keeps it, `stochopt verify` the run directory's copy, and both
    must find the same entries."""
    return render(dataclasses.replace(kernel, spec_path=None))


@functools.cache
def _code_digest() -> str:
    import importlib

    digest = hashlib.sha256()
    for name in ("stochopt.verify.strategies", "stochopt.verify.hunting",
                 "stochopt.verify.magnitude", "stochopt.verify.check",
                 "stochopt.verify.reference", "stochopt.verify.compare",
                 "stochopt.backend.emulate", "stochopt.leir.ops"):
        digest.update(Path(importlib.import_module(name).__file__).read_bytes())
    return digest.hexdigest()


def _read_recipes(path: Path) -> list[dict[str, Recipe]] | None:
    try:
        return [{n: Recipe(**r) for n, r in d.items()} for d in json.loads(path.read_text())]
    except (OSError, ValueError, TypeError):
        return None


def _atomic_write(path: Path, data: bytes) -> None:
    from stochopt.rundir import atomic_write_bytes

    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, data)
