"""Two strengths of one test: `quick` runs in the fast tier (`pytest -m "not slow"`) on
fewer cases or examples and asserts the same properties; `full` is marked slow and runs
every case at the full count. Use as @pytest.mark.parametrize("full", QUICK_AND_FULL)."""

import pytest

QUICK_AND_FULL = [pytest.param(False, id="quick"),
                  pytest.param(True, id="full", marks=pytest.mark.slow)]
