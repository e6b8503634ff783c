"""Plans that transfer: what the database knows about similar specs, put to use on a spec
it has no kernel for.

The nearest specs are those of the same family (the same op graph and dtypes at other
shapes), then those with the same op multiset, on the same machine; among them the
closer shapes come first. Each gives the plan of its fastest kernel that has one;
the plans are replayed on the new spec's lowering, a step that does not apply being
skipped (stochopt.transform.plan.replay_plan), and the steps that applied become
``ChainConfig.seed_plans``: the chains that open with them replay them before greedy's
descent (stochopt/search/chain_run.py). The rule statistics of the same families set
the rewrite rules' and mutation moves' weights (``ChainConfig.move_weights``).
"""

from __future__ import annotations

import math

from stochopt.backend.cost import cost
from stochopt.errors import StochoptError
from stochopt.leir.ir import Kernel
from stochopt.leir.render import render
from stochopt.transform.plan import Step, plan_from_json, plan_to_json, replay_plan
from stochopt.transform.weights import known_moves
from stochopt.tuning.store import TuningDB

MOST_PLANS = 3          # seed plans a run takes from similar specs
MOST_NEIGHBOURS = 6     # similar specs looked at
PRIOR_TRIES = 200       # rule statistics shrink towards their proposer's mean by this much
WEIGHT_RANGE = (0.25, 4.0)
MIN_TRIES = 50          # a move tried fewer times keeps its table weight


def shape_distance(a: dict, b: dict) -> float:
    """How far two specs' input sizes are apart: the sum of |log2(size ratio)| over the
    inputs in order (inf when they have different numbers of inputs)."""
    sizes_a = [math.prod(t[1]) for t in a["inputs"].values()]
    sizes_b = [math.prod(t[1]) for t in b["inputs"].values()]
    if len(sizes_a) != len(sizes_b):
        return math.inf
    return sum(abs(math.log2(x / y)) for x, y in zip(sizes_a, sizes_b, strict=True))


def neighbours(db: TuningDB, sp, machine: str) -> list[dict]:
    """Other specs of the same family, then of the same op multiset, that have a kernel
    with a plan on this machine; closest shapes first within each. Each row is the
    spec's, with ``kernel``: its fastest kernel with a plan."""
    found = []
    for row in db.specs_like(sp.family, sp.ops, exclude=sp.fingerprint):
        kernels = db.best_kernels(row["fingerprint"], machine, limit=1, with_plan=True)
        if kernels:
            found.append({**row, "kernel": kernels[0],
                          "distance": shape_distance(sp.shapes, row["shapes"])})
    found.sort(key=lambda r: (not r["same_family"], r["distance"]))
    return found[:MOST_NEIGHBOURS]


def replayed(baseline: Kernel, plans: list[tuple[dict, list[Step]]], machine) -> list[dict]:
    """Each (where it came from, plan) replayed on the baseline: the steps that applied,
    those skipped, the cycles after; plans of which nothing applied are left out, equal
    results kept once, fastest first."""
    out, seen = [], set()
    for origin, plan in plans:
        result = replay_plan(baseline, plan, machine)
        if not result.applied:
            continue
        try:
            cycles = cost(result.kernel, machine).cycles
        except StochoptError:  # the replayed kernel does not fit this machine
            continue
        key = render(result.kernel)
        if key in seen:
            continue
        seen.add(key)
        out.append({**origin, "plan": plan_to_json(result.applied),
                    "steps": len(plan), "skipped": result.skipped, "cycles_after": cycles})
    out.sort(key=lambda r: r["cycles_after"])
    return out


def transfer(db: TuningDB, sp, machine_print: str, machine, baseline: Kernel,
             own: list[dict] = ()) -> dict | None:
    """What a run on a spec the database has no usable kernel for takes from similar
    specs: {"from": [one entry per seed plan], "seed_plans": [...], "move_weights":
    {...}}; None when nothing is similar. ``own``: the spec's own kernels with plans
    (a warm start that could not be used), replayed first."""
    near = neighbours(db, sp, machine_print)
    plans = [({"spec": k.get("spec_name", sp.name), "fingerprint": k["spec"],
               "kernel": k["uid"], "cycles": k["cycles"]}, plan_from_json(k["plan"]))
             for k in own if k.get("plan")]
    plans += [({"spec": r["name"], "fingerprint": r["fingerprint"],
                "kernel": r["kernel"]["uid"], "cycles": r["kernel"]["cycles"],
                "same_family": bool(r["same_family"])}, plan_from_json(r["kernel"]["plan"]))
              for r in near]
    seeds = replayed(baseline, plans, machine)[:MOST_PLANS]
    families = sorted({sp.family} | {r["family"] for r in near})
    weights = move_weights(db.rule_totals(families))
    if not seeds and not weights:
        return None
    return {"from": seeds, "seed_plans": [s["plan"] for s in seeds],
            "move_weights": weights, "families": len(families)}


def move_weights(totals: dict[tuple[str, str], list[int]]) -> dict[str, float]:
    """Weights for the moves and rules from their record (tries, accepted,
    improvements): each move's improvements per try, shrunk towards its proposer's mean
    by PRIOR_TRIES tries, over that mean, within WEIGHT_RANGE. Moves tried fewer than
    MIN_TRIES times, and proposers with no improvement at all, are left out (they keep
    their table's weights)."""
    known = known_moves()
    by_proposer: dict[str, dict[str, list[int]]] = {}
    for (proposer, move), numbers in totals.items():
        if move in known and numbers[0] >= MIN_TRIES:
            by_proposer.setdefault(proposer, {})[move] = numbers
    weights: dict[str, float] = {}
    for moves in by_proposer.values():
        tries = sum(n[0] for n in moves.values())
        improvements = sum(n[2] for n in moves.values())
        if improvements == 0 or len(moves) < 2:
            continue
        mean = improvements / tries
        for move, (n_tries, _, n_improvements) in moves.items():
            rate = (n_improvements + mean * PRIOR_TRIES) / (n_tries + PRIOR_TRIES)
            low, high = WEIGHT_RANGE
            weights[move] = round(min(high, max(low, rate / mean)), 3)
    return weights


def replayed_start(kernel: Kernel, plan: list, machine, screening_error
                   ) -> tuple[Kernel, list[Step]] | None:
    """The kernel a seed plan replays to from ``kernel``, with the steps that applied;
    None when no step applies, or the result is not exact on the screening inputs."""
    result = replay_plan(kernel, plan_from_json(plan), machine)
    if not result.applied or screening_error(result.kernel) != 0:
        return None
    return result.kernel, result.applied


def opening_starts(kernel: Kernel, plans: list[list], index: int, machine,
                   screening_error) -> list[tuple[Kernel, list[Step]]]:
    """Where chain ``index`` starts greedy's descent (its opening), with the steps that
    lead there. Without seed plans: the start kernel. With them (fastest replay first):
    the first chain descends from the start kernel and from the first plan's replay and
    proposes the faster result (so a run ends no slower than greedy); odd chains descend
    from one plan's replay each, in turn (chain 1 the first, chain 3 the second, ...);
    the other even chains from the start kernel. A replay may be slower than the start:
    what counts is where the descent from it ends."""
    plain = [(kernel, [])]
    if not plans or (index % 2 == 0 and index > 0):
        return plain
    replay = replayed_start(kernel, plans[(index // 2) % len(plans)], machine,
                            screening_error)
    if replay is None:
        return plain
    return [replay] if index % 2 == 1 else plain + [replay]
