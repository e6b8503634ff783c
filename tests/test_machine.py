import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from stochopt.cli import main
from stochopt.errors import StochoptError
from stochopt.machine import MNCORE2, PRESETS, SMALL, load_machine, machine_from_dict

EXAMPLES = Path(__file__).resolve().parents[1] / "docs" / "examples"


def test_mncore2_preset_follows_the_published_figures():
    m = MNCORE2
    assert m.pes == 4096 and m.mabs == 1024
    assert m.pe_local_bytes == 32 * 1024
    assert (m.l1bm_bytes, m.l2bm_bytes) == (64 * 1024, 256 * 1024)
    assert m.dram_groups == 4 and m.l2b_per_group == 2
    assert round(m.dram_bytes_per_cycle_per_group, 1) == 170.7
    assert round(m.dram_bytes_per_cycle) == 683
    assert (m.l1b_link_words, m.l2b_link_words, m.word_bytes) == (64, 16, 8)
    assert (m.mau_bf16, m.mau_f32) == ((16, 16), (8, 4))


def test_presets_load_by_name_and_none_means_mncore2():
    assert load_machine("small") is SMALL
    assert load_machine(None) is MNCORE2
    assert load_machine(SMALL) is SMALL
    assert set(PRESETS) == {"mncore2", "small"}


def test_toml_file_overrides_keys_of_its_base(tmp_path):
    path = tmp_path / "tiny.toml"
    path.write_text('base = "small"\npe_local_bytes = 4096\nclock_mhz = 1000.5\n'
                    'mau_bf16 = [8, 8]\n[fanout]\nPE = 2\n[latency]\ndma = 100\n')
    m = load_machine(str(path))
    assert m.name == "tiny"
    assert m.pe_local_bytes == 4096 and m.clock_mhz == 1000.5 and m.mau_bf16 == (8, 8)
    assert m.fanout == {**SMALL.fanout, "PE": 2}
    assert m.latency == {**SMALL.latency, "dma": 100}
    assert m.dram_groups == SMALL.dram_groups  # untouched keys come from the base


def test_toml_name_key_wins_over_the_file_name(tmp_path):
    path = tmp_path / "file.toml"
    path.write_text('name = "lab"\n')
    assert load_machine(path).name == "lab"


@pytest.mark.parametrize("text, says", [
    ("word_bytes = 2.5\n", "word_bytes must be a positive integer"),
    ("pe_local_bytes = 0\n", "pe_local_bytes must be a positive integer"),
    ("clock_mhz = -1\n", "clock_mhz must be a positive number"),
    ("clock_mhz = true\n", "clock_mhz must be a positive number"),
    ("cores = 4\n", "unknown keys cores"),
    ('base = "mncore9"\n', "unknown base 'mncore9'"),
    ("mau_f32 = [8]\n", "mau_f32 is a pair of positive integers"),
    ("fanout = 4\n", "fanout is a table with keys L2B, L1B, MAB, PE"),
    ("[fanout]\nL3B = 2\n", "fanout is a table with keys"),
    ("[latency]\ndma = 0\n", "latency.dma must be a positive integer"),
    ("dram_groups = 16\n", "dram_groups (16) exceeds the 8 L2Bs"),
    ("name = 3\n", "name must be a non-empty string"),
    ("this is not toml", "cannot read machine file"),
])
def test_bad_toml_files_fail_with_a_message_naming_the_file_and_key(tmp_path, text, says):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(StochoptError) as e:
        load_machine(str(path))
    assert says in str(e.value)
    assert "bad.toml" in str(e.value)


def test_unknown_names_and_missing_files_say_what_to_pass(tmp_path):
    with pytest.raises(StochoptError, match="unknown machine 'mncore3'.*mncore2, small"):
        load_machine("mncore3")
    with pytest.raises(StochoptError, match="does not exist"):
        load_machine(str(tmp_path / "nowhere.toml"))


def test_machine_from_dict_leaves_its_argument_alone():
    data = {"base": "small", "name": "x"}
    machine_from_dict(data)
    assert data == {"base": "small", "name": "x"}


def test_run_takes_a_machine_file_and_costs_on_it(tmp_path):
    slow = tmp_path / "slow.toml"
    slow.write_text("[latency]\ndma = 2000\n")
    kernel = str(EXAMPLES / "softmax_fast.leir")
    runner = CliRunner()
    base = runner.invoke(main, ["run", kernel, "--json"])
    custom = runner.invoke(main, ["run", kernel, "--json", "--machine", str(slow)])
    assert base.exit_code == 0 and custom.exit_code == 0, custom.output
    assert '"machine": "slow"' in custom.output
    assert json.loads(custom.output)["cycles"] == json.loads(base.output)["cycles"] + 2 * 1800


def test_run_with_a_bad_machine_file_exits_2_with_the_reason(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("word_bytes = -8\n")
    result = CliRunner().invoke(main, ["run", str(EXAMPLES / "softmax_fast.leir"),
                                       "--machine", str(bad)])
    assert result.exit_code == 2
    assert "word_bytes must be a positive integer" in result.output


def test_docs_machine_md_states_every_machine_constant():
    from dataclasses import fields

    from stochopt.machine import Machine

    docs = (Path(__file__).resolve().parents[1] / "docs" / "machine.md").read_text()
    for f in fields(Machine):
        if f.name != "name":
            assert f"`{f.name}`" in docs, f.name
    for value in ("200", "24", "170.67", "682.67", "(16, 16)", "(8, 4)", "32768"):
        assert value in docs


def test_machines_are_hashable_values():
    assert {MNCORE2: "a", SMALL: "b"}[machine_from_dict({"name": "mncore2"})] == "a"
    assert machine_from_dict({"base": "small", "name": "small"}) == SMALL
