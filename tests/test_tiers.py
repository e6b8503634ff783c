"""The fast tier (`pytest -m "not slow"`) must still test every module of the package:
each stochopt module is imported by a test file that is not wholly slow, at module level
or inside a test that is not marked slow. A module moved or added without a fast test
fails here, naming it."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
from pathlib import Path

import stochopt

TESTS = Path(__file__).resolve().parent

# Modules no test imports by name, each with the fast test that runs its code through
# the module that uses it (checked below to exist and not be marked slow).
THROUGH = {
    "stochopt.__main__": "test_cli.py::test_python_m_stochopt_runs_the_cli",
    "stochopt.displayable": "test_notebook.py::"
                            "test_jupyter_finds_html_and_markdown_for_every_object",
    "stochopt.kernel_file": "test_api.py::test_a_bad_kernel_file_names_the_file_line_and_column",
    "stochopt.report.credit": "report/test_facts.py::"
                              "test_each_step_of_the_best_is_credited_along_the_path_its_chain_took",
    "stochopt.report.llm_facts": "report/test_forms.py::"
                                 "test_a_run_without_an_llm_says_none_not_zero_dollars",
    "stochopt.report.words": "report/test_forms.py::test_counts_of_one_are_singular",
    "stochopt.transform.algebraic_forms": "transform/test_moves_and_rules.py::"
                                          "test_rule_keeps_meaning",
    # imported there through optimize -> supervisor; only the slow tier's real searches
    # start its worker processes
    "stochopt.search.executor": "search/test_optimize.py::test_bad_arguments_are_clear_errors",
    "stochopt.search.objective": "search/test_fixpoint_first.py::"
                                 "test_the_fixpoint_goes_through_the_chain_like_any_candidate",
    "stochopt.search.proposers": "search/test_metropolis.py::"
                                 "test_move_weights_steer_the_mutation_moves",
    # runs only inside a Ray cluster (tests/search/test_ray.py, slow); the fast tier
    # checks the options and errors that lead to it
    "stochopt.search.ray_actors": "search/test_ray_options.py::"
                                  "test_addresses_a_user_would_give_are_taken",
    "stochopt.verify.climb": "verify/test_corpus.py::"
                             "test_wrong_kernel_is_refused_with_a_counterexample",
}


def package_modules() -> set[str]:
    """Every module of the stochopt package, found on disk (not a fixed list, so that
    moved modules are followed)."""
    names = {"stochopt"}
    for info in pkgutil.walk_packages(stochopt.__path__, "stochopt."):
        names.add(info.name)
    return names


def _is_slow(decorators: list[ast.expr]) -> bool:
    return any("mark.slow" in ast.unparse(d) for d in decorators)


def _defining_module(dotted: str, modules: set[str]) -> set[str]:
    """The stochopt modules a dotted name reaches: each package on the way, and the
    module that defines the object it names (a package re-exports its modules' names:
    `from stochopt.verify import degenerate_warnings` tests stochopt.verify.degenerate)."""
    found = set()
    parts = dotted.split(".")
    for end in range(1, len(parts) + 1):
        prefix = ".".join(parts[:end])
        if prefix in modules:
            found.add(prefix)
            continue
        try:
            obj = importlib.import_module(".".join(parts[:end - 1]))
            for part in parts[end - 1:]:
                obj = getattr(obj, part)
        except (ImportError, AttributeError):
            break
        owner = obj.__name__ if inspect.ismodule(obj) else getattr(obj, "__module__", None)
        if owner in modules:
            found.add(owner)
        break
    return found


def _bindings(node: ast.AST) -> dict[str, str]:
    """local name -> the dotted name it was imported as, for the imports under node"""
    bound = {}
    for sub in ast.walk(node):
        if isinstance(sub, ast.Import):
            bound |= {alias.asname or alias.name: alias.name for alias in sub.names}
        elif isinstance(sub, ast.ImportFrom) and sub.module and sub.level == 0:
            bound |= {alias.asname or alias.name: f"{sub.module}.{alias.name}"
                      for alias in sub.names}
    return bound


def _imported(node: ast.AST, modules: set[str], file_bound: dict[str, str]) -> set[str]:
    """The stochopt modules that the code under node imports or reaches by a dotted name
    (`from a.b import c`, `import a.b`, `stochopt.optimize(...)`, `rundir.read(...)` after
    `from stochopt.search import rundir`)."""
    own = _bindings(node)
    bound = file_bound | own
    names = set(own.values())
    for sub in ast.walk(node):
        if isinstance(sub, ast.Attribute):
            text = ast.unparse(sub)
            root = text.split(".")[0]
            if root in bound and text.replace(".", "").replace("_", "").isalnum():
                names.add(bound[root] + text[len(root):])
    return set().union(*(_defining_module(name, modules) for name in names
                         if name.split(".")[0] == "stochopt"), set())


def fast_tests(tree: ast.Module) -> list[ast.FunctionDef]:
    """The test functions of a file that are not marked slow (nor their class, nor the
    whole file through pytestmark)."""
    if any(isinstance(n, ast.Assign) and any(getattr(t, "id", "") == "pytestmark"
                                             for t in n.targets)
           and "slow" in ast.unparse(n.value) for n in tree.body):
        return []
    found = []
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            if not _is_slow(node.decorator_list):
                found += [f for f in node.body if isinstance(f, ast.FunctionDef)
                          and f.name.startswith("test_") and not _is_slow(f.decorator_list)]
        elif (isinstance(node, ast.FunctionDef) and node.name.startswith("test_")
              and not _is_slow(node.decorator_list)):
            found.append(node)
    return found


def fast_test_names(path: Path) -> set[str]:
    return {f.name for f in fast_tests(ast.parse(path.read_text()))}


def fast_imports(path: Path, modules: set[str]) -> set[str]:
    """The modules a test file imports where a fast test can reach them: at module level
    when the file has a test not marked slow, and inside any test not marked slow."""
    tree = ast.parse(path.read_text())
    fast = fast_tests(tree)
    if not fast:
        return set()
    top_level = [n for n in tree.body if not isinstance(n, ast.FunctionDef | ast.ClassDef)]
    bound = _bindings(ast.Module(body=top_level, type_ignores=[]))
    found = set().union(*(_imported(n, modules, bound) for n in top_level), set())
    # helpers (fixtures, functions) run from fast tests too: count their imports
    helpers = [n for n in tree.body if isinstance(n, ast.FunctionDef)
               and not n.name.startswith("test_")]
    for node in fast + helpers:
        found |= _imported(node, modules, bound)
    return found


def test_every_package_module_is_imported_by_a_fast_test():
    modules = package_modules()
    covered = set()
    for path in TESTS.rglob("test_*.py"):
        covered |= fast_imports(path, modules)
    for path in TESTS.rglob("conftest.py"):  # what its module level imports, every test runs
        top_level = [n for n in ast.parse(path.read_text()).body
                     if not isinstance(n, ast.FunctionDef)]
        covered |= _imported(ast.Module(body=top_level, type_ignores=[]), modules, {})
    # a package counts as covered when one of its modules is (its __init__ runs then)
    covered |= {name.rsplit(".", 1)[0] for name in covered if "." in name}
    for module, test in THROUGH.items():
        file, name = test.split("::")
        assert name in fast_test_names(TESTS / file), f"{test} (for {module}) is gone or slow"
    covered |= THROUGH.keys()
    missing = sorted(modules - covered)
    assert not missing, ("no fast test (one not marked slow) imports these modules; "
                         f"add one or unmark a cheap test: {missing}")


def test_the_check_sees_a_slow_only_import(tmp_path):
    """The check is not vacuous: an import used only by a slow test does not count."""
    path = tmp_path / "test_sample.py"
    path.write_text("import pytest\n\n@pytest.mark.slow\ndef test_a():\n"
                    "    from stochopt.search import optimize\n\n"
                    "def test_b():\n    from stochopt.leir import parser\n")
    modules = package_modules()
    assert fast_imports(path, modules) == {"stochopt", "stochopt.leir", "stochopt.leir.parser"}
