"""numpy outside the lowering's subset (docs/specs.md), and specs that are wrong as numpy,
stop the lowering with an error that names the construct, the spec file and line, and what
to do instead."""

from __future__ import annotations

import pytest

from stochopt.errors import StochoptError
from stochopt.lower import TraceError, lower
from stochopt.lower.lowering import LoweringError

INIT = "--init kernel.leir"

# construct -> (body of f(x) for x: f32 (4, 8), words the message must hold)
UNSUPPORTED = {
    "np.sort": ("return np.sort(x, axis=1)", "np.sort"),
    "np.cumsum": ("return np.cumsum(x, axis=1)", "np.cumsum"),
    "fancy indexing": ("return x[[0, 2, 3]]", "fancy indexing"),
    "fancy indexing by array": ("return x[np.array([0, 1])]", "fancy indexing"),
    "boolean indexing": ("return x[x > 0]", "boolean-mask indexing"),
    "if on an array": ("return x if x.sum() > 0 else -x", "if/while"),
    "float()": ("return x * float(x.max())", "float()"),
    "np.einsum": ("return np.einsum('ij,ij->i', x, x)", "np.einsum"),
    "constant array": ("return x + np.ones((4, 8))", "constant numpy arrays"),
    "newaxis": ("return x[..., None]", "np.newaxis"),
    "strided slice": ("return x[:, ::2]", "strided slice"),
    "unknown method": ("return x.std(axis=1)", ".std"),
    "unknown ufunc": ("return np.sin(x)", "np.sin"),
    "fractional power": ("return x ** 1.5", "x ** 1.5"),
    "floor division": ("return x // 2", "//"),
    "item assignment": ("x[0] = 1.0\n    return x", "assigning into an array"),
    "reduction dtype": ("return x.sum(axis=1, dtype=np.float64)", "dtype"),
    "astype complex": ("return x.astype(np.complex64)", "astype"),
}

# numpy errors in the spec itself: (body, words the message must hold, hint words)
WRONG = {
    "reshape to an incompatible shape": ("return x.reshape(5, 7)",
                                         "cannot reshape an array of shape (4, 8) into (5, 7)",
                                         "multiply to 32"),
    "axis out of range": ("return x.sum(axis=2)", "axis 2 is out of range", "-2..1"),
    "negative axis out of range": ("return x.max(axis=-3)", "axis -3 is out of range",
                                   "-2..1"),
    "shapes that do not broadcast": ("return x + x[:, :3]", "(4, 8) and (4, 3) do not broadcast",
                                     "match or be 1"),
    "matmul inner sizes": ("return x @ x", "inner sizes 8 and 4 differ", "(..., K, N)"),
    "index out of range": ("return x[7]", "index 7 of axis 0", INIT),
}


def _spec_file(write_spec, body: str):
    return write_spec('@spec(inputs={"x": tensor("f32", (4, 8))})\n'
                      f"def f(x):\n    {body}\n")


@pytest.mark.parametrize("construct", sorted(UNSUPPORTED))
def test_unsupported_construct_names_itself_the_spec_line_and_init(construct, write_spec):
    from stochopt.spec import load_spec

    body, words = UNSUPPORTED[construct]
    path = _spec_file(write_spec, body)
    with pytest.raises(TraceError) as info:
        lower(load_spec(path))
    e = info.value
    text = str(e)
    assert words in e.message
    first = body.splitlines()[0].strip()
    assert path.read_text().splitlines()[8] == f"    {first}"  # line 9 of the file
    assert e.source == str(path) and e.line == 9
    assert text.startswith(f"{path}: line 9: the lowering does not support ")
    assert f"(in `{first}`)" in text and INIT in text


@pytest.mark.parametrize("mistake", sorted(WRONG))
def test_numpy_mistake_in_a_spec_is_a_clear_error_at_its_line(mistake, write_spec):
    from stochopt.spec import load_spec

    body, words, hint = WRONG[mistake]
    path = _spec_file(write_spec, body)
    with pytest.raises(TraceError) as info:
        lower(load_spec(path))
    e = info.value
    assert words in e.message and hint in str(e)
    assert e.source == str(path) and e.line == 9
    if "reshape" in mistake or "axis" in mistake:  # the issue asks these to point to --init
        assert INIT in str(e)


@pytest.mark.parametrize("body, words", [
    ("return x, x", "returns 2 values"),
    ("return 1.0", "returns float"),
    ("return x", "returns an input unchanged"),
])
def test_a_reference_must_return_one_computed_array(body, words, write_spec):
    from stochopt.spec import load_spec

    path = _spec_file(write_spec, body)
    with pytest.raises(TraceError, match=words) as info:
        lower(load_spec(path))
    assert info.value.source == str(path) and info.value.line == 7  # the decorator's line


def test_an_exception_inside_the_reference_is_reported_at_its_line(write_spec):
    from stochopt.spec import load_spec

    path = write_spec('''
        @spec(inputs={"x": tensor("f32", (4, 8))})
        def f(x):
            y = x * 2.0
            raise ValueError("boom")
        ''')
    with pytest.raises(TraceError, match="ValueError: boom") as info:
        lower(load_spec(path))
    assert info.value.line == 10 and info.value.source == str(path)


def test_a_prime_sized_tensor_too_big_for_one_pe_is_a_lowering_error(load):
    spec = load('''
        @spec(inputs={"x": tensor("f32", (997, 997))})
        def f(x):
            return x * 2.0
        ''')
    with pytest.raises(LoweringError) as info:
        lower(spec)
    assert "(997, 997)" in info.value.message and INIT in str(info.value)


def test_a_matmul_too_big_for_the_chip_is_a_lowering_error(load):
    spec = load('''
        @spec(inputs={"a": tensor("bf16", (4096, 4096)), "b": tensor("bf16", (4096, 4096))})
        def f(a, b):
            return a @ b
        ''')
    with pytest.raises(LoweringError, match="no layout fits in PE memory"):
        lower(spec)


def test_every_lowering_failure_is_a_stochopt_error():
    assert issubclass(TraceError, StochoptError) and issubclass(LoweringError, StochoptError)
