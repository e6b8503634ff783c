"""Fingerprints: formatting does not make another spec, shapes and ranges do; the family
keeps the computation and leaves the shapes out."""

import json
import re

from stochopt.machine import MNCORE2, SMALL, machine_from_dict
from stochopt.spec import load_spec
from stochopt.tuning.fingerprints import machine_print, spec_print, verifier_version

from .conftest import SOFTMAX, softmax_spec

REFORMATTED = '''"""Another docstring, other comments, other formatting."""
import numpy as np
from stochopt import spec, tensor

# the reference
@spec(
    inputs = {"x": tensor("f32", (128, 1024), low = -8.0, high = 8.0)},
)
def renamed(x):
    """A docstring of its own."""
    m = x.max(axis = 1, keepdims = True)   # the row max
    e = np.exp(x - m)

    return e / e.sum(axis=1, keepdims=True)
'''


def test_formatting_comments_docstrings_and_the_name_do_not_count(tmp_path):
    plain = spec_print(softmax_spec(tmp_path))
    path = tmp_path / "reformatted.py"
    path.write_text(REFORMATTED)
    again = spec_print(load_spec(path))
    assert again.fingerprint == plain.fingerprint and again.family == plain.family
    assert again.name == "renamed" and plain.name == "softmax"


def test_shapes_and_ranges_make_another_spec_of_the_same_family(tmp_path):
    plain = spec_print(softmax_spec(tmp_path))
    taller = spec_print(softmax_spec(tmp_path, rows=256))
    assert taller.fingerprint != plain.fingerprint
    assert (taller.family, taller.ops) == (plain.family, plain.ops)
    path = tmp_path / "ranged.py"
    path.write_text(SOFTMAX.format(rows=128, cols=1024, name="softmax")
                    .replace("low=-8.0", "low=-4.0"))
    ranged = spec_print(load_spec(path))
    assert ranged.fingerprint != plain.fingerprint and ranged.family == plain.family


def test_another_computation_or_dtype_is_another_family(tmp_path):
    plain = spec_print(softmax_spec(tmp_path))
    path = tmp_path / "other.py"
    path.write_text(SOFTMAX.format(rows=128, cols=1024, name="softmax")
                    .replace("e / e.sum", "e * e.sum"))
    other = spec_print(load_spec(path))
    assert other.family != plain.family and other.ops != plain.ops
    path.write_text(SOFTMAX.format(rows=128, cols=1024, name="softmax")
                    .replace('"f32"', '"bf16"'))
    assert spec_print(load_spec(path)).family != plain.family


def test_the_measurement_specs_share_a_family_with_their_bundled_twins():
    for twin, other in (("attention_decode", "attention_decode_long"),
                        ("mla_decode", "mla_decode_wide")):
        a = spec_print(load_spec(f"specs/{twin}.py"))
        b = spec_print(load_spec(f"benchmarks/specs/{other}.py"))
        assert a.family == b.family and a.fingerprint != b.fingerprint
    assert spec_print(load_spec("specs/softmax.py")).ops == \
        "div:1 exp:1 reduce_max:1 reduce_sum:1 sub:1"


def test_a_machine_is_its_constants_not_its_name():
    constants = json.loads(json.dumps(MNCORE2.summary()))  # as a TOML file writes them
    copy = machine_from_dict({**constants, "name": "my_chip"}, "my_chip")
    assert machine_print(copy)[0] == machine_print(MNCORE2)[0]
    assert machine_print(copy)[1] == "my_chip"
    assert machine_print(SMALL)[0] != machine_print(MNCORE2)[0]


def test_the_verifier_version_names_the_release_and_a_digest():
    assert re.fullmatch(r"\d+\.\d+\.\d+\+[0-9a-f]{12}", verifier_version())
