"""LEIR tests share tests/strategies.py: put the repository root on sys.path so that
``from tests.strategies import kernels`` works under --import-mode=importlib."""

import sys
from pathlib import Path

ROOT = str(Path(__file__).resolve().parents[2])
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
