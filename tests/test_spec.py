"""Specs at the boundary: tensor(), @spec and load_spec check every argument and say what
to write instead."""

from __future__ import annotations

import textwrap

import pytest

from stochopt import spec, tensor
from stochopt.errors import StochoptError
from stochopt.spec import DEFAULT_RANGE, Spec, TensorSpec, load_spec

HEADER = "import numpy as np\n\nfrom stochopt import spec, tensor\n\n"


@pytest.fixture
def spec_file(tmp_path):
    def write(body: str, name: str = "myspec"):
        path = tmp_path / f"{name}.py"
        path.write_text(HEADER + textwrap.dedent(body).lstrip("\n"))
        return path
    return write


# ---------------------------------------------------------------------------------
# tensor()
# ---------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["f32", "bf16", "i32", "bool"])
def test_tensor_accepts_every_design_dtype(dtype):
    t = tensor(dtype, (2, 3))
    assert t == TensorSpec(dtype, (2, 3))


@pytest.mark.parametrize("dtype", ["f64", "float32", "int", None, 3])
def test_unknown_dtype_lists_the_dtypes_to_use(dtype):
    with pytest.raises(StochoptError, match="unknown dtype") as info:
        tensor(dtype, (4,))
    assert "'f32', 'bf16', 'i32', 'bool'" in str(info.value)


def test_shape_may_be_an_int_or_a_list_and_becomes_a_tuple():
    assert tensor("f32", 7).shape == (7,)
    assert tensor("f32", [2, 3]).shape == (2, 3)


@pytest.mark.parametrize("shape", [(), (0, 4), (-1,), (2.0, 3), (True, 2), "4,4", None, (4, None)])
def test_shape_must_be_a_tuple_of_positive_ints(shape):
    with pytest.raises(StochoptError, match="tuple of positive ints") as info:
        tensor("f32", shape)
    assert 'tensor("f32", (128, 1024))' in str(info.value)


def test_low_above_high_says_to_swap_them():
    with pytest.raises(StochoptError, match="low=2.0 is greater than high=1.0; swap them"):
        tensor("f32", (4,), low=2.0, high=1.0)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), "1", True])
def test_bounds_must_be_finite_numbers(bad):
    with pytest.raises(StochoptError, match="finite number"):
        tensor("f32", (4,), low=bad)


def test_bounds_do_not_apply_to_bool_tensors():
    with pytest.raises(StochoptError, match="not bool"):
        tensor("bool", (4,), low=0.0)


def test_bounds_default_to_the_design_range_and_bool_is_zero_one():
    assert tensor("f32", (4,)).bounds == DEFAULT_RANGE == (-10.0, 10.0)
    assert tensor("bf16", (4,), low=-1).bounds == (-1.0, 10.0)
    assert tensor("bool", (4,)).bounds == (0.0, 1.0)
    assert tensor("i32", (4,), low=0, high=5).bounds == (0.0, 5.0)


# ---------------------------------------------------------------------------------
# @spec
# ---------------------------------------------------------------------------------

def test_spec_decorator_makes_a_callable_spec_with_defaults():
    @spec(inputs={"x": tensor("f32", (4,))})
    def double(x):
        return x * 2

    assert isinstance(double, Spec)
    assert double.name == "double" and double.output_dtype == "f32"
    assert double.rtol is None and double.atol is None
    assert double(3.0) == 6.0
    assert double.line is not None and "def double" in double.source


def test_spec_options_are_kept():
    @spec(inputs={"x": tensor("bf16", (4,))}, output=tensor("bf16", (4,)), rtol=1e-2,
          atol=0, name="renamed")
    def f(x):
        return x

    assert (f.name, f.output_dtype, f.rtol, f.atol) == ("renamed", "bf16", 0.01, 0.0)


@pytest.mark.parametrize("kwargs, words", [
    ({"inputs": {}}, "non-empty dict"),
    ({"inputs": [("x", tensor("f32", (4,)))]}, "non-empty dict"),
    ({"inputs": {"not a name": tensor("f32", (4,))}}, "not a Python identifier"),
    ({"inputs": {"x": (4, 4)}}, "must be tensor(...)"),
    ({"inputs": {"exp": tensor("f32", (4,))}}, "'exp' is a LEIR op or constant name"),
    ({"inputs": {"inf": tensor("f32", (4,))}}, "'inf' is a LEIR op or constant name"),
    ({"inputs": {"lambda": tensor("f32", (4,))}}, "not a Python identifier"),
    ({"inputs": {"x": tensor("f32", (4,))}, "output": "f32"}, "output must be tensor"),
    ({"inputs": {"x": tensor("f32", (4,))}, "rtol": -1.0}, "rtol must be a non-negative"),
    ({"inputs": {"x": tensor("f32", (4,))}, "atol": "0.1"}, "atol must be a non-negative"),
    ({"inputs": {"x": tensor("f32", (4,))}, "name": "two words"}, "name must be an identifier"),
])
def test_bad_spec_arguments_are_errors(kwargs, words):
    with pytest.raises(StochoptError, match=words):
        spec(**kwargs)


def test_parameter_names_must_match_the_inputs():
    with pytest.raises(StochoptError) as info:
        @spec(inputs={"x": tensor("f32", (4,)), "y": tensor("f32", (4,))})
        def f(x, z):
            return x + z
    assert "f(x, z) does not take exactly the inputs x, y" in str(info.value)
    assert "name the parameters like the inputs dict" in str(info.value)


def test_parameters_may_come_in_any_order():
    @spec(inputs={"x": tensor("f32", (4,)), "y": tensor("f32", (4,))})
    def f(y, x):
        return x - y

    assert f(x=3.0, y=1.0) == 2.0


# ---------------------------------------------------------------------------------
# load_spec
# ---------------------------------------------------------------------------------

def test_load_spec_reads_the_file_its_path_and_line(spec_file):
    path = spec_file('''
        @spec(inputs={"x": tensor("f32", (8,))})
        def twice(x):
            return x * 2.0
        ''')
    s = load_spec(path)
    assert s.name == "twice" and s.path == str(path) and s.line == 5
    assert s.source == path.read_text()


def test_missing_file_and_wrong_suffix_are_errors(tmp_path):
    with pytest.raises(StochoptError, match="does not exist"):
        load_spec(tmp_path / "nope.py")
    other = tmp_path / "spec.txt"
    other.write_text("")
    with pytest.raises(StochoptError, match="not a .py file"):
        load_spec(other)


def test_a_file_without_a_spec_says_to_decorate_the_reference(spec_file):
    path = spec_file("def f(x):\n    return x\n")
    with pytest.raises(StochoptError, match="has no @spec function") as info:
        load_spec(path)
    assert "@spec(inputs=" in str(info.value)


TWO = '''
    @spec(inputs={"x": tensor("f32", (8,))})
    def first(x):
        return x + 1.0


    @spec(inputs={"x": tensor("f32", (8,))})
    def second(x):
        return x * 3.0
    '''


def test_two_specs_need_a_name_and_the_error_lists_them(spec_file):
    with pytest.raises(StochoptError, match="several specs: first, second") as info:
        load_spec(spec_file(TWO))
    assert "--name" in str(info.value)


def test_name_chooses_one_of_several_specs(spec_file):
    path = spec_file(TWO)
    assert load_spec(path, "second").name == "second"
    assert load_spec(path, "second")(2.0) == 6.0
    with pytest.raises(StochoptError, match="no spec named 'third'; it has first, second"):
        load_spec(path, "third")


def test_a_spec_file_that_raises_on_import_names_the_line(spec_file):
    path = spec_file('''
        SIZE = 128
        raise RuntimeError("no such size")
        ''')
    with pytest.raises(StochoptError) as info:
        load_spec(path)
    e = info.value
    assert e.source == str(path) and e.line == 6
    assert "RuntimeError: no such size" in e.message and "import cleanly" in str(e)


def test_a_spec_file_with_bad_syntax_names_the_line(spec_file):
    path = spec_file("def f(x:\n    return x\n")
    with pytest.raises(StochoptError, match="not valid Python") as info:
        load_spec(path)
    assert info.value.line in (5, 6) and info.value.source == str(path)


def test_a_bad_tensor_in_a_spec_file_names_the_file_and_line(spec_file):
    path = spec_file('''
        @spec(inputs={"x": tensor("f64", (8,))})
        def f(x):
            return x
        ''')
    with pytest.raises(StochoptError) as info:
        load_spec(path)
    assert str(info.value).startswith(f"{path}: line 5: tensor(): unknown dtype 'f64'")


def test_mismatched_parameters_in_a_spec_file_name_the_file(spec_file):
    path = spec_file('''
        @spec(inputs={"x": tensor("f32", (8,))})
        def f(y):
            return y
        ''')
    with pytest.raises(StochoptError, match="does not take exactly the inputs x") as info:
        load_spec(path)
    assert info.value.source == str(path)


def test_loading_twice_gives_equal_independent_specs(spec_file):
    path = spec_file('''
        @spec(inputs={"x": tensor("f32", (8,))})
        def f(x):
            return x + 1.0
        ''')
    a, b = load_spec(path), load_spec(path)
    assert a.name == b.name and a.inputs == b.inputs and a.reference is not b.reference


def test_an_edit_of_the_same_size_within_a_second_is_seen(spec_file):
    # a .pyc cached by mtime seconds and size would run the old spec
    path = spec_file('''
        @spec(inputs={"x": tensor("f32", (8,))})
        def f(x):
            return x + 1.0
        ''')
    assert load_spec(path)(1.0) == 2.0
    path.write_text(path.read_text().replace("x + 1.0", "x + 2.0"))
    assert load_spec(path)(1.0) == 3.0
