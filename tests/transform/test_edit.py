"""Edits remembered (edit.edited): an edit drawn again gives the kernel, or the refusal,
it gave, as a fresh rebuild would, for every kernel of the same structure and names."""

import copy
import random

from stochopt.errors import StochoptError
from stochopt.leir.ir import Kernel, Node
from stochopt.leir.render import render
from stochopt.lower import lower
from stochopt.machine import MNCORE2
from stochopt.spec import load_spec
from stochopt.transform import edit as edit_module
from stochopt.transform.mutate import MOVES


def outcome(move, kernel, rng):
    try:
        return move(kernel, rng, MNCORE2)
    except StochoptError as e:
        return f"{type(e).__name__}: {e}"


def same(a, b) -> bool:
    """The same kernel, names and lines included, or the same refusal."""
    if isinstance(a, str) or isinstance(b, str) or a is None or b is None:
        return a == b
    return a == b and render(a) == render(b) and a.terms == b.terms and \
        [n.line for n in a.nodes] == [n.line for n in b.nodes]


def test_an_edit_drawn_again_gives_what_a_fresh_rebuild_gives():
    checked = remembered = refusals = 0
    for spec in ("softmax", "attention_decode"):
        current = lower(load_spec(f"specs/{spec}.py"), MNCORE2)
        rng = random.Random(3)
        for _ in range(120):
            move = MOVES[rng.choice(sorted(MOVES))]
            state = rng.getstate()
            edit_module._forget_edits()
            fresh = outcome(move, current, rng)
            rng.setstate(state)
            again = outcome(move, current, rng)  # remembered
            rng.setstate(state)
            twin = outcome(move, copy.copy(current), rng)  # another kernel, same structure
            assert same(again, fresh) and same(twin, fresh)
            if isinstance(fresh, Kernel):
                assert again is twin  # one kernel for every kernel of that structure
                remembered += 1
                if fresh.output_type.shape == current.output_type.shape:
                    current = fresh
            refusals += isinstance(fresh, str)
            checked += 1
    assert checked == 240 and remembered > 60 and refusals > 10


def test_kernels_named_otherwise_get_kernels_with_their_own_names():
    kernel = lower(load_spec("specs/softmax.py"), MNCORE2)
    renamed = Kernel(kernel.name, tuple(Node(n.op, n.args, n.attrs, n.type, f"other{i}", n.line)
                                        for i, n in enumerate(kernel.nodes)), kernel.output,
                     kernel.spec_path)
    assert renamed.terms == kernel.terms  # the same structure: names are not in terms
    for seed in range(20):
        mine = outcome(MOVES["layout"], kernel, random.Random(seed))
        theirs = outcome(MOVES["layout"], renamed, random.Random(seed))
        if isinstance(mine, str):
            assert isinstance(theirs, str)
            continue
        assert mine == theirs and mine is not theirs
        assert {n.name for n in theirs.nodes if n.op != "input"} <= \
            {f"other{i}" for i in range(len(kernel.nodes))}


def test_kernels_kept_are_bounded(monkeypatch):
    monkeypatch.setattr(edit_module, "EDITS_KEPT", 10)
    edit_module._forget_edits()
    kernel = lower(load_spec("specs/softmax.py"), MNCORE2)
    rng = random.Random(0)
    for _ in range(200):
        result = outcome(MOVES["layout"], kernel, rng)
        if isinstance(result, Kernel):
            kernel = result  # a new structure each time: each gets its own entry
    assert sum(len(r) for r in edit_module._EDITS.values()) <= 10
    assert edit_module._edits_kept <= 10
    edit_module._forget_edits()
