"""Run one checkout's verifier on this checkout's wrong corpus (docs/verification.md).

    python tests/verify/old_vs_new.py CHECKOUT [--seeds 0 1 2] [--examples 200]

CHECKOUT is a git worktree of an older commit (`git worktree add /tmp/old COMMIT`): its
stochopt is imported, the kernels and specs are read from here. Prints, per wrong
kernel, whether that verifier refused it on each seed: what the new defences add.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parents[2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkout", type=Path)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--examples", type=int, default=200)
    args = parser.parse_args()
    sys.path.insert(0, str(args.checkout.resolve()))
    from stochopt.leir import parse
    from stochopt.lower import lower
    from stochopt.spec import load_spec
    from stochopt.verify import check

    cache: dict = {}
    accepted = 0
    paths = sorted((HERE / "tests/verify/corpus/wrong").glob("*.leir"))
    for path in paths:
        text = path.read_text()
        spec_path = re.match(r"# spec: (\S+)\n", text).group(1)
        if spec_path not in cache:
            spec = load_spec(HERE / spec_path)
            cache[spec_path] = (spec, lower(spec))
        spec, baseline = cache[spec_path]
        kernel = parse(text)
        verdicts = [check(kernel, spec, examples=args.examples, seed=seed, baseline=baseline)
                    for seed in args.seeds]
        passed = [s for s, v in zip(args.seeds, verdicts, strict=True) if v.equivalent]
        accepted += bool(passed)
        print(f"  {path.stem:50s} " + (f"ACCEPTED on seeds {passed}" if passed else "refused"),
              flush=True)
    print(f"{accepted}/{len(paths)} wrong kernels accepted on some seed by {args.checkout}")


if __name__ == "__main__":
    main()
