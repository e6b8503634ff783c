"""The legal input on which a wrong corpus kernel is wrong, from its '# witness:' line.

    python tests/verify/witness.py KERNEL.leir -o inputs.npz   # build it, then:
    python -m stochopt verify KERNEL.leir --inputs inputs.npz  # replays the failure
    python tests/verify/witness.py KERNEL.leir --find          # search for a witness line

A witness line names a recipe per input (strategies.Recipe, built with the kernel's
own cut positions): `# witness: x=two_clusters:2001, mask=random:2101:0.5+mask_top`
is pattern:seed[:fraction][+link]. --find tries the structured and hunting cases and
then hunting patterns on more seeds, with the static range analysis left out, and
prints the first line whose input shows the kernel wrong.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from stochopt.leir import parse  # noqa: E402
from stochopt.lower import lower  # noqa: E402
from stochopt.spec import Spec, load_spec  # noqa: E402
from stochopt.verify.bank import CheckContext  # noqa: E402
from stochopt.verify.check import Counterexample, _Comparison  # noqa: E402
from stochopt.verify.hunting import HUNT_PATTERNS, kernel_boundaries  # noqa: E402
from stochopt.verify.strategies import (  # noqa: E402
    Recipe,
    build_inputs,
    hunting_recipes,
    structured_recipes,
)

WITNESS = re.compile(r"^# witness: (.+)$", re.M)


def parse_witness(text: str) -> dict[str, Recipe] | None:
    found = WITNESS.search(text)
    if not found:
        return None
    recipes = {}
    for item in found.group(1).split(", "):
        name, rest = item.split("=")
        rest, _, link = rest.partition("+")
        parts = rest.split(":")
        fraction = float(parts[2]) if len(parts) > 2 else 0.5
        recipes[name] = Recipe(parts[0], int(parts[1]), fraction, link)
    return recipes


def format_witness(recipes: dict[str, Recipe]) -> str:
    return "# witness: " + ", ".join(
        f"{n}={r.pattern}:{r.seed}" + (f":{r.fraction}" if r.fraction != 0.5 else "")
        + (f"+{r.link}" if r.link else "") for n, r in recipes.items())


def witness_inputs(path: Path) -> tuple[dict[str, np.ndarray], object, Spec]:
    """The witness input of a corpus kernel, built with the kernel's cuts."""
    text = path.read_text()
    kernel = parse(text)
    spec = load_spec(REPO / re.match(r"# spec: (\S+)\n", text).group(1))
    recipes = parse_witness(text)
    if recipes is None:
        raise SystemExit(f"{path}: no '# witness:' line")
    return build_inputs(spec, recipes, kernel_boundaries(kernel, spec)), kernel, spec


def find(path: Path, seeds: int = 30) -> str | None:
    text = path.read_text()
    kernel = parse(text)
    spec = load_spec(REPO / re.match(r"# spec: (\S+)\n", text).group(1))
    comparison = _Comparison(kernel, CheckContext(spec, lower(spec)), None)
    cuts = kernel_boundaries(kernel, spec)
    candidates = structured_recipes(spec) + hunting_recipes(spec)
    for seed in range(seeds):
        for pattern in HUNT_PATTERNS:
            candidates.append({n: Recipe("random" if t.dtype == "bool" else pattern,
                                         5000 + 100 * seed + j)
                               for j, (n, t) in enumerate(spec.inputs.items())})
    for recipes in candidates:
        inputs = build_inputs(spec, recipes, cuts)
        bad = comparison.run(inputs)
        if bad is not None:
            print(Counterexample(bad, inputs, recipes).describe(), file=sys.stderr)
            return format_witness(recipes)
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kernel", type=Path)
    parser.add_argument("-o", "--output", type=Path)
    parser.add_argument("--find", action="store_true")
    args = parser.parse_args()
    if args.find:
        line = find(args.kernel)
        print(line or "no witness found")
        return
    inputs, _, spec = witness_inputs(args.kernel)
    out = args.output or Path(args.kernel.stem + ".witness.npz")
    np.savez(out, **{n: np.asarray(x, np.float32) if spec.inputs[n].dtype == "bf16" else x
                     for n, x in inputs.items()})
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
