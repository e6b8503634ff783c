"""Two strengths of one test: `quick` runs in the fast tier (`pytest -m "not slow"`) on
fewer cases or examples and asserts the same properties; `full` is marked slow and runs
every case at the full count. Use as @pytest.mark.parametrize("full", QUICK_AND_FULL)."""

import pytest

QUICK_AND_FULL = [pytest.param(False, id="quick"),
                  pytest.param(True, id="full", marks=pytest.mark.slow)]


def examples(full: bool, quick: int, count: int | None = None):
    """Hypothesis settings for the two strengths of a property: `quick` examples in the
    fast tier, `count` (default: the loaded profile's max_examples) in the full one. Put
    it on a @given function defined inside a QUICK_AND_FULL test, and call that:

        @pytest.mark.parametrize("full", QUICK_AND_FULL)
        def test_law(full):
            @examples(full, quick=10)
            @given(st.integers())
            def law(n): ...
            law()
    """
    from hypothesis import settings

    return settings(max_examples=(count or settings.default.max_examples) if full else quick)
