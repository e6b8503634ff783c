"""Tempering in a real run: two chains on the ladder report their states, the main
process arbitrates exchanges, run.json and checkpoint.json record the ladder. (The swap
rule itself is pinned with stub costs in test_metropolis.py.)"""

from pathlib import Path

import pytest

from stochopt.errors import StochoptError
from stochopt.rundir import read_events, read_json
from stochopt.search import optimize
from stochopt.search.chain import ChainConfig, check_search_config

ROOT = Path(__file__).resolve().parents[2]
SOFTMAX = str(ROOT / "specs" / "softmax.py")


@pytest.mark.parametrize("field,value,message", [
    ("hottest_beta", 0.0, "hottest_beta must be positive and at most beta"),
    ("hottest_beta", 90.0, "hottest_beta must be positive and at most beta"),
    ("exchange_s", -1.0, "exchange_s must be >= 0"),
    ("restart_best_share", 1.5, "restart_best_share must be between 0 and 1"),
    ("lookahead_depth", 0, "lookahead_depth must be an integer from 1 to 64"),
])
def test_a_ladder_or_lookahead_the_search_cannot_run_is_a_clear_error(field, value, message):
    with pytest.raises(StochoptError, match=message):
        check_search_config(ChainConfig(**{field: value}))


@pytest.mark.slow  # a real run of two chains
def test_two_chains_on_the_ladder_exchange_through_the_main_process(tmp_path):
    run_dir = tmp_path / "run"
    optimize(SOFTMAX, budget="25s", chains=2, seed=0, run_dir=str(run_dir),
             config=ChainConfig(full_examples=10, exchange_s=0.2, restart_after=200))
    config = ChainConfig()
    assert read_json(run_dir / "run.json")["betas"] == [config.beta, config.hottest_beta]
    ladder = read_json(run_dir / "checkpoint.json")["tempering"]
    assert ladder["attempts"][0] >= 5 and 0 <= ladder["swaps"][0] <= ladder["attempts"][0]
    events = [e for e in read_events(run_dir / "events.jsonl") if "outcome" in e]
    swapped = [e for e in events if "exchanged_with" in e]
    # each swap moves both chains; the next step of a moved chain says so (two moves
    # heard before one step mark it once, and a move heard at the end has no next step)
    assert ladder["swaps"][0] >= 1 and 0 < len(swapped) <= 2 * ladder["swaps"][0]
    assert all(e["exchanged_with"] == 1 - e["chain"] for e in swapped)
    # restarts beside another chain: to the best or to the other chain's state
    restarts = [e for e in events if e.get("restarted_from_best") or e.get("restarted_from")]
    assert restarts
    assert all(e.get("restarted_from") in (None, f"chain {1 - e['chain']}") for e in restarts)


def test_a_moved_chain_earns_no_credit_for_the_jump():
    """The report credits each global step to the moves along the chain's route; a move
    to another chain's state (an exchange) is no move of the chain's."""
    from stochopt.report.credit import PathCredit
    credit = PathCredit(6000)

    def event(t, outcome, cycles, proposer="mutate", **extra):
        return {"chain": 0, "proposer": proposer, "move": "m", "outcome": outcome,
                "cycles": cycles, "t": t, **extra}

    credit.add(event(1, "accepted", 5000, "rewrite"), 1)
    credit.add(event(2, "best", 1990, "mutate", exchanged_with=1, moved_to=2000), 2)
    step = credit.steps[-1]
    # the rewrite took the route from 6000 to 5000; the exchange put the chain at 2000,
    # and the mutation saved 10 cycles from there, not the 3,010 from 5000
    assert step["saved"] == 4010 and step["credit"]["mutate"] == round(4010 * 10 / 1010)
