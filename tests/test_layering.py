"""The package's layering: a module imports only from its own layer or the layers below.

The walk reads every ``import`` in stochopt (at module level, inside functions and under
TYPE_CHECKING alike) with ast, so it needs nothing imported. To add a package, add its
name to LAYERS at the place its imports allow; an upward import that must stay goes in
ALLOWED with the reason.
"""

import ast
import functools
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "stochopt"

# lowest first; a name is a subpackage or a top-level module of stochopt ("__init__" is
# the package itself); names in one layer may import each other
LAYERS: list[tuple[str, ...]] = [
    ("errors", "version", "displayable", "machine", "durations", "rundir",
     "callable_package"),
    ("leir",),
    ("spec", "backend"),
    ("verify", "lower"),
    ("transform",),
    ("tuning",),
    ("llm",),
    ("search",),
    ("report",),
    ("api", "cli", "cli_settings", "settings", "kernel_file", "notebook", "__init__",
     "__main__"),
]

# (importing module, imported layer name) -> why this upward import stays
ALLOWED: dict[tuple[str, str], str] = {
    ("stochopt.leir.ops", "backend"): "the op table names each op's cost rule",
    ("stochopt.callable_package", "api"): "stochopt.lower/verify/report(...) call the API "
                                          "function of their name, found when called",
    ("stochopt.displayable", "notebook"): "the first value Jupyter shows loads the forms "
                                          "that the notebook module registers",
}

LAYER_OF = {name: index for index, names in enumerate(LAYERS) for name in names}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer_name(module: str) -> str:
    """stochopt.search.chain -> search; stochopt.errors -> errors; stochopt -> __init__."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every stochopt module the file imports, relative ones resolved."""
    module = module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                found.append((node.lineno, ".".join(base + [node.module or ""]).rstrip(".")))
            else:
                found.append((node.lineno, node.module))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr == "import_module" and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            found.append((node.lineno, node.args[0].value))  # importlib.import_module("...")
    return [(line, name) for line, name in found if name.split(".")[0] == "stochopt"]


@functools.cache  # the sources do not change during a test run: two tests read it
def edges() -> tuple[tuple[str, int, str], ...]:
    return tuple((module_name(path), line, target)
                 for path in sorted(PACKAGE.rglob("*.py")) for line, target in imports(path))


def test_every_module_has_a_layer():
    unplaced = sorted({layer_name(module_name(p)) for p in PACKAGE.rglob("*.py")}
                      - set(LAYER_OF))
    assert not unplaced, f"add these to LAYERS in {Path(__file__).name}: {unplaced}"


def test_no_module_imports_from_a_layer_above_its_own():
    upward = []
    for module, line, target in edges():
        source, imported = layer_name(module), layer_name(target)
        if LAYER_OF[imported] > LAYER_OF[source] and (module, imported) not in ALLOWED:
            upward.append(f"{module}:{line} imports {target} ({source} is below {imported})")
    assert not upward, "upward imports:\n" + "\n".join(upward)


def test_the_allowed_upward_imports_are_still_there():
    """An exception nobody needs any more goes, so the list stays the truth."""
    seen = {(module, layer_name(target)) for module, _, target in edges()}
    assert set(ALLOWED) <= seen, sorted(set(ALLOWED) - seen)


def test_the_walk_sees_imports_inside_functions():
    """parse() and the report import lazily in places: the walk must read those too."""
    source = PACKAGE / "report" / "facts.py"
    lazy = [target for line, target in imports(source)
            if not source.read_text().splitlines()[line - 1].startswith(("from", "import"))]
    assert "stochopt.leir.parser" in lazy


def test_importing_the_verifier_loads_nothing_above_it():
    """Every chain and check worker imports the verifier: it must not drag in the
    search, the report, the notebook forms or the API (a fresh interpreter, so nothing
    this test process imported counts)."""
    import subprocess
    import sys

    code = ("import sys, stochopt.verify, stochopt.lower\n"
            "print(' '.join(sorted(m for m in sys.modules if m.startswith(('stochopt.search', "
            "'stochopt.report', 'stochopt.notebook', 'stochopt.api', 'stochopt.cli')))))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=PACKAGE.parent, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == []
