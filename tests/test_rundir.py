"""The run directory's named values: an outcome, a proof kind, a best's source and a run's
start are each spelled once, in stochopt/rundir.py, and everything else uses the name.

The walk reads every string literal of the package with ast. A literal in a key's place
(``event["best"]``, ``{"accepted": 0}``, ``best.get("proof")``, ``"init" in run``) is a
field's name, not a value, and is left alone; any other literal equal to one of the named
values fails the test, unless ALLOWED gives the module and the reason it means something
else there.
"""

import ast
import functools
from pathlib import Path

from stochopt import rundir

PACKAGE = Path(__file__).resolve().parents[1] / "stochopt"
NAMED = {*rundir.OUTCOMES, rundir.CHECKING, *rundir.PROOFS, rundir.SOURCE_START,
         rundir.SOURCE_SEARCH, *rundir.STARTS}

_MESSAGE = "the chains' and the driver's message 'best' (a proved kernel to restart from)"
_LABEL = "a column, row or chart label the reader sees, not a value of the field"
# (module, literal) -> why the word means something else in that module
ALLOWED: dict[tuple[str, str], str] = {
    ("stochopt.cli", "init"): "the --init flag's parameter name",
    ("stochopt.cli_settings", "init"): "the --init flag's name among the unsettable flags",
    ("stochopt.llm.yields", "accepted"): "a stage of the yield funnel, named for the field",
    ("stochopt.report.charts", "accepted"): _LABEL,
    ("stochopt.report.charts", "best"): "the best kernel's profile, beside the baseline's",
    ("stochopt.report.facts", "start"): _LABEL,
    ("stochopt.report.facts", "unproved"): _LABEL,
    ("stochopt.report.history", "start"): _LABEL,
    ("stochopt.report.history", "best"): _LABEL,
    ("stochopt.report.html", "best"): "the best kernel's profile, beside the baseline's",
    ("stochopt.report.html", "start"): "an op's start cycle, a profile column",
    ("stochopt.report.llm_facts", "accepted"): "a yield column, named for the field",
    ("stochopt.report.terminal", "start"): "an op's start cycle, a profile column",
    ("stochopt.report.terminal", "best"): "the best kernel's profile, beside the baseline's",
    ("stochopt.search.chain_run", "transfer"): "the rewrite arm's move that replays the "
                                               "plans of similar specs",
    ("stochopt.search.driver", "best"): _MESSAGE,
    ("stochopt.search.ray_actors", "best"): _MESSAGE,
    ("stochopt.search.supervisor", "best"): _MESSAGE,
    ("stochopt.search.tempering", "best"): _MESSAGE,
    ("stochopt.tuning.views", "start"): "the runs table's column, named for the field",
}


def _module(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _keys_and_docstrings(tree: ast.AST) -> set[int]:
    """The ids of the literals that name a field (or document a definition)."""
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript):
            skip.update(id(n) for n in ast.walk(node.slice))
        elif isinstance(node, ast.Dict):
            skip.update(id(k) for k in node.keys if k is not None)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr in ("get", "pop", "setdefault") and node.args):
            skip.add(id(node.args[0]))
        elif isinstance(node, ast.Compare) and isinstance(node.ops[0], ast.In | ast.NotIn):
            skip.add(id(node.left))  # "recheck" in best
        elif (isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef)
              and node.body and isinstance(node.body[0], ast.Expr)):
            skip.add(id(node.body[0].value))
    return skip


@functools.cache  # the sources do not change during a test run: two tests read them
def named_literals() -> frozenset[tuple[str, str]]:
    """(module, literal) of every literal outside rundir.py that spells a named value."""
    found = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        module = _module(path)
        if module == "stochopt.rundir":
            continue
        tree = ast.parse(path.read_text())
        skip = _keys_and_docstrings(tree)
        found |= {(module, node.value) for node in ast.walk(tree)
                  if isinstance(node, ast.Constant) and node.value in NAMED
                  and id(node) not in skip}
    return frozenset(found)


def test_outcomes_and_proof_kinds_are_spelled_only_in_rundir():
    spelled = sorted(named_literals() - set(ALLOWED))
    assert not spelled, ("use the names in stochopt/rundir.py (or add the module to "
                         f"ALLOWED with the reason): {spelled}")


def test_every_allowed_spelling_is_still_there():
    """An exception nobody needs any more goes, so the list stays the truth."""
    assert set(ALLOWED) <= named_literals(), sorted(set(ALLOWED) - named_literals())


def test_the_walk_finds_a_value_and_leaves_a_key():
    source = ('def f(event):\n    """best"""\n    event["best"] = {"accepted": 1}\n'
              '    return event.get("best") == "wrong"\n')
    tree = ast.parse(source)
    skip = _keys_and_docstrings(tree)
    values = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)
              and n.value in NAMED and id(n) not in skip]
    assert values == ["wrong"]


def test_the_names_keep_the_strings_run_directories_hold():
    """Old run directories and the tuning database are read by these strings."""
    assert rundir.OUTCOMES == ("parse_error", "invalid", "wrong", "rejected", "accepted",
                               "unproved", "best")
    assert rundir.PROOFS == ("pending", "lowering", "unfinished")
    assert (rundir.SOURCE_START, rundir.SOURCE_SEARCH) == ("start", "search")
    assert rundir.STARTS == ("lowering", "init", "transfer", "database")
