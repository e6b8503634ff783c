"""--ray's address and Ray's absence: one-line errors before anything starts."""

import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from stochopt.cli import main
from stochopt.errors import StochoptError
from stochopt.search.ray_executor import check_ray_address, connect

ROOT = Path(__file__).resolve().parents[2]
SOFTMAX = str(ROOT / "specs" / "softmax.py")


@pytest.mark.parametrize("address", ["auto", "local", "none", "ray://head:10001",
                                     "10.0.0.5:6379", " auto "])
def test_addresses_a_user_would_give_are_taken(address):
    assert check_ray_address(address) == address.strip()


@pytest.mark.parametrize("address", ["", "cluster", "head:", ":6379", "head:port", 7])
def test_other_addresses_are_one_line_errors(address):
    with pytest.raises(StochoptError, match="--ray takes auto, local"):
        check_ray_address(address)


def test_without_ray_installed_it_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray raises ImportError
    with pytest.raises(StochoptError, match="needs Ray") as e:
        connect("local")
    assert "pip install 'stochopt[ray]'" in e.value.hint


def test_the_cli_refuses_a_bad_address_with_exit_2_and_no_run_dir(tmp_path):
    result = CliRunner().invoke(main, ["optimize", SOFTMAX, "--ray", "nowhere",
                                       "--run-dir", str(tmp_path / "run")])
    assert result.exit_code == 2
    assert "--ray takes auto, local" in result.output
    assert not (tmp_path / "run").exists()
