import hashlib
import os

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("ci", deadline=None, max_examples=60,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", deadline=None, max_examples=60,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """The workers `-n auto` (pyproject.toml) starts: the fast tier over the whole suite
    (`pytest -m "not slow"`) runs on every core; anything else runs in this one process,
    the slow tier above all, whose Ray clusters and timed searches must not share the
    cores with other tests, and a run of chosen files, for which starting workers would
    cost more than it saves."""
    whole_suite = config.args_source != pytest.Config.ArgsSource.ARGS or \
        [os.path.normpath(a) for a in config.args] == ["tests"]
    if config.option.markexpr.strip() == "not slow" and whole_suite:
        return len(os.sched_getaffinity(0))
    return 0


@pytest.fixture(autouse=True)
def _own_tuning_database(monkeypatch, tmp_path_factory, request):
    """Each test has its own (empty) cache folder, so its own tuning database: a run in
    one test never starts from another test's kernels, and nothing reaches the user's
    cache. A test that runs twice on one spec sees the second start warm, as a user
    would (pass db=False or --no-db where that is not what it tests)."""
    name = hashlib.sha256(request.node.nodeid.encode()).hexdigest()[:16]
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.getbasetemp() / "cache" / name))
