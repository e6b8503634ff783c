"""The llm proposer's pure parts: reading replies, edits, prices, prompt templates."""

from pathlib import Path

import pytest

from stochopt.errors import ParseError, StochoptError
from stochopt.llm.client import PRICES, _retry_after, price_of
from stochopt.llm.options import llm_options
from stochopt.llm.prompt import (
    FIELDS,
    PromptBuilder,
    apply_edits,
    code_blocks,
    compact_markdown,
    load_templates,
)
from stochopt.lower import lower
from stochopt.machine import load_machine
from stochopt.spec import load_spec

ROOT = Path(__file__).resolve().parents[2]
KERNEL = 'def k(x: "f32[4] @ dram") -> "f32[4] @ dram":\n    return store(load(x, "(4)/((4))"))\n'


# -- code blocks ---------------------------------------------------------------------------
@pytest.mark.parametrize("fence", ["```leir", "```python", "```py", "```", "~~~leir", "````"])
def test_code_blocks_takes_leir_python_and_plain_fences(fence):
    close = fence.rstrip("leirpython")
    text = f"Here is my idea.\n{fence}\n{KERNEL}{close}\nDone."
    assert code_blocks(text) == [KERNEL]


def test_code_blocks_skips_other_languages_and_empty_blocks():
    text = f"```bash\nrm -rf /\n```\n```json\n{{}}\n```\n```\n\n```\n```leir\n{KERNEL}```"
    assert code_blocks(text) == [KERNEL]


def test_code_blocks_keeps_every_block_and_an_unclosed_last_one():
    text = f"```leir\n{KERNEL}```\nor\n```leir\n{KERNEL}"
    assert code_blocks(text) == [KERNEL, KERNEL]


def test_code_blocks_ignores_reasoning_in_think_tags():
    text = f"<think>draft:\n```leir\ndef draft(): pass\n```\n</think>\n```leir\n{KERNEL}```"
    assert code_blocks(text) == [KERNEL]


def test_a_reply_without_fences_is_taken_from_its_def():
    assert code_blocks(f"Sure:\n{KERNEL}") == [KERNEL]
    assert code_blocks("I cannot improve this kernel.") == []


# -- search/replace edits -------------------------------------------------------------------
def edit(search: str, replace: str) -> str:
    return f"<<<<<<< SEARCH\n{search}=======\n{replace}>>>>>>> REPLACE\n"


def test_edits_apply_in_order():
    first, second = KERNEL.splitlines(keepends=True)
    block = edit(second, second.replace("((4))", "((4_PE))")) + edit(
        first, first.replace("def k(", "def kk("))
    assert apply_edits(KERNEL, block) == KERNEL.replace("((4))", "((4_PE))").replace(
        "def k(", "def kk(")


def test_edits_match_lines_despite_indentation():
    block = edit("return store(load(x, \"(4)/((4))\"))\n", "    return store(x)\n")
    assert apply_edits(KERNEL, block).endswith("    return store(x)\n")


def test_an_edit_whose_search_text_is_missing_says_so():
    with pytest.raises(ParseError, match="edit 1: its SEARCH lines are not in the kernel"):
        apply_edits(KERNEL, edit("y = exp(x)\n", "y = x\n"))


# -- prices --------------------------------------------------------------------------------
@pytest.mark.parametrize("model, expected", [
    ("gpt-4o", (2.5, 10.0)), ("gpt-4o-2024-08-06", (2.5, 10.0)),
    ("gpt-4o-mini", (0.15, 0.6)), ("openai/gpt-4.1", (2.0, 8.0)), ("o3-mini", (1.1, 4.4)),
    ("claude-3-5-sonnet-20241022", (3.0, 15.0)), ("deepseek-chat", (0.27, 1.1)),
    ("qwen2.5-coder:7b", (0.0, 0.0)), ("my-local-model", (0.0, 0.0)),
])
def test_prices_come_from_the_table_by_longest_prefix(model, expected):
    assert price_of(model)[:2] == expected


def test_price_flags_override_the_table():
    assert price_of("gpt-4o", price_in=1.0)[:2] == (1.0, 10.0)
    assert price_of("local", price_in=0.5, price_out=2.0) == (0.5, 2.0, "--price-in/--price-out")


def test_every_price_is_a_pair_of_non_negative_numbers():
    assert all(len(p) == 2 and min(p) >= 0 for p in PRICES.values())


@pytest.mark.parametrize("headers, seconds", [
    ({"retry-after": "3"}, 3.0), ({"retry-after": "0.5"}, 0.5),
    ({"retry-after-ms": "250", "retry-after": "9"}, 0.25),
    ({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}, 0.0),   # a date in the past
    ({"retry-after": "soon"}, None), ({}, None),
])
def test_retry_after_is_read_as_seconds_milliseconds_or_a_date(headers, seconds):
    assert _retry_after(headers) == seconds


# -- prompts ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def softmax():
    machine = load_machine("mncore2")
    spec = load_spec(ROOT / "specs" / "softmax.py")
    return spec, machine, lower(spec, machine)


def test_default_templates_use_only_known_fields():
    templates = load_templates()
    assert set(templates) == set(FIELDS)


def test_prompt_carries_spec_kernel_profile_roofline_and_references(softmax):
    spec, machine, baseline = softmax
    builder = PromptBuilder(load_templates(), spec, machine, baseline)
    failure = {"outcome": "wrong", "cycles": 2102, "error": "expected 0.25, got 1.0",
               "code": "def bad(): pass"}
    system, user = (m["content"] for m in builder.messages(baseline, [failure]))
    assert "reduce_max" in system and "TensorLayout" in system      # docs/leir.md
    assert "roofline" in system and "dram_groups" in system          # docs/machine.md
    assert spec.source.strip() in user
    assert "7652 cycles" in user and "roofline 1536 cycles" in user
    assert "Bottleneck:\nvector" in user
    assert 'v4 = exp(v3)' in user and "2052  vector" in user         # the per-op profile
    assert "1. wrong (2102 cycles): expected 0.25, got 1.0" in user
    assert "def bad(): pass" in user
    assert len(system) + len(user) < 60_000                          # a sane size


def test_prompt_templates_can_be_replaced_one_by_one(softmax, tmp_path):
    spec, machine, baseline = softmax
    (tmp_path / "user.txt").write_text("Make $spec_name faster than $kernel_cycles cycles.")
    builder = PromptBuilder(load_templates(tmp_path), spec, machine, baseline)
    system, user = (m["content"] for m in builder.messages(baseline, []))
    assert user == "Make softmax faster than 7652 cycles."
    assert "LEIR language reference" in system                     # the default system.txt


def test_an_unknown_template_field_is_an_error_that_lists_the_fields(tmp_path):
    (tmp_path / "user.txt").write_text("Speed up $kernal please.")
    with pytest.raises(StochoptError, match=r"unknown field\(s\) \$kernal") as e:
        load_templates(tmp_path)
    assert "$kernel_cycles" in str(e.value)


def test_compacting_markdown_drops_table_rules_commands_and_named_sections():
    text = ("# Title\n\nIntro.\n\n    stochopt run k.leir\n\n| a | b |\n| --- | --- |\n"
            "| 1 | 2 |\n\n\n\n## 1. Keep\n\nkept\n\n```toml\nx = 1\n```\n## 2. Drop me\n\ngone\n")
    out = compact_markdown(text, drop_sections=("Drop me",))
    assert out == "Intro.\n\na | b\n1 | 2\n\n## 1. Keep\n\nkept"


# -- settings --------------------------------------------------------------------------------
def test_llm_options_fill_defaults_and_check_values(tmp_path):
    assert llm_options(None) is None and llm_options({"model": None}) is None
    o = llm_options({"model": "m", "cache": str(tmp_path / "cache")}, max_cost=2.0)
    assert o["concurrency"] == 2 and o["timeout_s"] == 60.0 and o["max_cost"] == 2.0
    assert (tmp_path / "cache").is_dir()
    with pytest.raises(StochoptError, match="unknown LLM setting"):
        llm_options({"model": "m", "temprature": 0.5})
    with pytest.raises(StochoptError, match="concurrency must be an integer"):
        llm_options({"model": "m", "concurrency": 0})
    with pytest.raises(StochoptError, match="is not a directory"):
        llm_options({"model": "m", "prompts": str(tmp_path / "missing")})
