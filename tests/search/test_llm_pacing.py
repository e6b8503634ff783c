"""Requests paced by yield (stochopt/llm/pacing.py): a model whose replies bring nothing
faster than the kernel shown keeps a request in flight less and less of the time, down
to a floor, and at full rate again after one that does; an llm-only chain and
``pace: false`` are never paced."""

import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from stochopt.backend.cost import cost  # noqa: E402
from stochopt.errors import StochoptError  # noqa: E402
from stochopt.llm.options import llm_options  # noqa: E402
from stochopt.llm.pacing import FLOOR, LOCAL_START, PATIENCE, Pacer  # noqa: E402
from stochopt.lower import lower  # noqa: E402
from stochopt.machine import load_machine  # noqa: E402
from stochopt.search.chain import ChainConfig  # noqa: E402
from stochopt.search.chain_run import ChainRun  # noqa: E402
from stochopt.search.llm_proposer import LLMProposer  # noqa: E402
from stochopt.search.llm_replies import LLMCandidate  # noqa: E402
from stochopt.spec import load_spec  # noqa: E402
from tests.llm_server import LLMServer, reply  # noqa: E402


def test_the_duty_halves_after_each_dry_spell_down_to_the_floor_and_resets():
    pacer = Pacer()
    for i in range(1, 6 * PATIENCE + 1):
        pacer.judged(2.0, faster=False, now=100.0 + i)
        assert pacer.duty == max(FLOOR, 0.5 ** (i // PATIENCE))
    # at the floor a reply of 2 s is followed by 2 * (1/FLOOR - 1) s without a request
    assert pacer.not_before == pytest.approx(100.0 + 6 * PATIENCE + 2.0 * (1 / FLOOR - 1))
    assert not pacer.ready(pacer.not_before - 0.1) and pacer.ready(pacer.not_before)
    assert "full rate" in pacer.judged(2.0, faster=True, now=200.0)
    assert pacer.duty == 1.0 and pacer.dry == 0


def test_the_user_is_told_when_the_duty_drops():
    pacer = Pacer()
    notes = [pacer.judged(1.0, faster=False, now=0.0) for _ in range(PATIENCE)]
    assert notes[:-1] == [None] * (PATIENCE - 1)
    assert f"last {PATIENCE} replies brought nothing faster" in notes[-1]
    assert "50%" in notes[-1]


def test_pace_is_a_checked_setting():
    assert llm_options({"model": "m"})["pace"] is True
    assert llm_options({"model": "m", "pace": False})["pace"] is False
    with pytest.raises(StochoptError, match="pace must be true or false"):
        llm_options({"model": "m", "pace": "sometimes"})


@pytest.fixture(scope="module")
def softmax():
    machine = load_machine("mncore2")
    spec = load_spec(ROOT / "specs" / "softmax.py")
    return spec, machine, lower(spec, machine)


def _proposer(softmax, tmp_path, server, arms, **settings):
    spec, machine, baseline = softmax
    options = llm_options({"model": "local", "base_url": server.url, "concurrency": 1,
                           "timeout_s": 5.0, "structured": "off", "forms": ["plan"],
                           **settings})
    llm = LLMProposer(options, spec, machine, baseline, tmp_path, 0,
                      deadline=time.time() + 120)
    chain = ChainRun(0, spec, baseline, cost(baseline, machine).cycles, baseline, machine,
                     arms, 0, ChainConfig(full_examples=4), llm)
    return llm, chain


def _step_until(chain, done, seconds: float = 30.0) -> None:
    end = time.monotonic() + seconds
    while not done() and time.monotonic() < end:
        chain.step()
        time.sleep(0.002)   # the reply's thread gets the interpreter
    assert done()


def test_a_mixed_chain_asks_a_model_that_lands_nothing_less_often(softmax, tmp_path):
    spec, machine, baseline = softmax
    with LLMServer(default=reply("no plan here")) as server:
        llm, chain = _proposer(softmax, tmp_path, server, ["mutate", "llm"])
        assert llm.pacer.duty == LOCAL_START   # a server on this machine starts at half
        _step_until(chain, lambda: llm.pacer.duty < LOCAL_START)
        assert llm.pacer.dry == PATIENCE and llm.pacer.duty == LOCAL_START / 2
        judged = [t for t in llm.transcripts.values() if "duty" in t]
        assert [t["duty"] for t in judged][-1] == LOCAL_START / 2
        # while the pacer says wait, a free slot starts nothing
        llm.pacer.not_before = time.monotonic() + 60
        asked = len(llm.transcripts)
        for _ in range(50):
            llm._start_requests(chain)
        assert len(llm.transcripts) == asked
        # once the wait is over, the next request goes
        llm.pacer.not_before = 0.0
        _step_until(chain, lambda: len(llm.transcripts) > asked)
        # and a reply the chain found faster than the kernel it showed restores the rate
        llm.transcripts["faster"] = {"id": "faster", "status": "ok", "latency_s": 1.0,
                                     "candidates": [{}]}
        cand = LLMCandidate("llm", "plan", baseline, request="faster", form="plan",
                            shown_cycles=chain.best_cycles)
        llm.record({"outcome": "accepted", "cycles": chain.best_cycles - 1}, cand)
        llm.close()
    assert llm.pacer.duty == 1.0 and llm.transcripts["faster"]["duty"] == 1.0


@pytest.mark.parametrize("arms, settings", [(["llm"], {}), (["mutate", "llm"],
                                                            {"pace": False})])
def test_an_llm_only_chain_or_pace_off_is_never_paced(softmax, tmp_path, arms, settings):
    with LLMServer(default=reply("no plan here")) as server:
        llm, chain = _proposer(softmax, tmp_path, server, arms, **settings)
        _step_until(chain, lambda: sum(t.get("status") == "ok"
                                       for t in llm.transcripts.values()) > PATIENCE + 1)
        llm.close()
    assert llm.pacer.duty == LOCAL_START and not any("duty" in t
                                                     for t in llm.transcripts.values())
