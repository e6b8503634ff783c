"""The package's layering: a module imports only from its own layer or the layers below.

The walk reads every ``import`` in stochopt (at module level, inside functions and under
TYPE_CHECKING alike) with ast, so it needs nothing imported. To add a package, add its
name to LAYERS at the place its imports allow; an upward import that must stay goes in
ALLOWED with the reason.

Within a layer, modules must not import each other in a loop either: a loop means no
module of it can be read (or tested) before the others. ``from P import name`` is an
import of the module P.name when there is one, else of P itself (its __init__, which
holds the name); a loop through a package's __init__ that re-exports a submodule counts.
An import that closes a loop on purpose goes in LOOPS_ALLOWED with the reason.
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
    ("api", "cli", "cli_db", "cli_settings", "settings", "kernel_file", "notebook", "__init__",
     "__main__"),
]

# (importing module, imported layer name) -> why this upward import stays
ALLOWED: dict[tuple[str, str], str] = {}

LAYER_OF = {name: index for index, names in enumerate(LAYERS) for name in names}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer_name(module: str) -> str:
    """stochopt.search.chain -> search; stochopt.errors -> errors; stochopt -> __init__."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


@functools.cache
def modules() -> frozenset[str]:
    return frozenset(module_name(path) for path in PACKAGE.rglob("*.py"))


def imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every stochopt module the file imports, relative ones resolved;
    ``from P import name`` imports P.name when that is a module, else P."""
    module = module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join(base + [node.module or ""]).rstrip(".")
            else:
                source = node.module
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                found.append((node.lineno, submodule if submodule in modules() else source))
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


# (importing module, imported module) -> why this import closes a loop and stays; none
# today: a loop broken once should stay broken, so an entry needs its reason
LOOPS_ALLOWED: dict[tuple[str, str], str] = {}


def import_graph() -> dict[str, set[str]]:
    """Module -> the modules it imports (a name that is no module is its package's)."""
    graph: dict[str, set[str]] = {module: set() for module in modules()}
    for module, _, target in edges():
        while target not in modules():
            target = target.rpartition(".")[0]
        if target != module:
            graph[module].add(target)
    return graph


def loops(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while not component or component[-1] != v:
                component.append(stack.pop())
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _without_allowed(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    return {m: {t for t in targets if (m, t) not in LOOPS_ALLOWED} for m, targets in graph.items()}


def test_no_loop_of_modules():
    remaining = loops(_without_allowed(import_graph()))
    assert not remaining, "modules that import each other in a loop:\n" + "\n".join(
        " <-> ".join(component) for component in remaining)


def test_each_allowed_loop_import_is_there_and_closes_a_loop():
    """An import in LOOPS_ALLOWED that is gone, or no longer closes a loop, leaves the
    list: it stays the truth."""
    graph = import_graph()
    for (module, target), why in LOOPS_ALLOWED.items():
        assert target in graph[module], f"{module} no longer imports {target} ({why})"
        alone = _without_allowed(graph)
        alone[module].add(target)
        assert any({module, target} <= set(c) for c in loops(alone)), \
            f"{module} -> {target} closes no loop any more: drop it from LOOPS_ALLOWED"


def test_the_loop_walk_sees_a_package_that_re_exports_its_importer():
    graph = {"p": {"p.a"}, "p.a": {"p"}, "p.b": {"p.a"}}
    assert loops(graph) == [["p", "p.a"]]
    assert loops({"p": {"p.a"}, "p.a": set()}) == []
