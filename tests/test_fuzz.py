"""Fuzz the front door: hostile and mutated kernel texts may only ever raise StochoptError.

parse() is fed text written by LLMs and by mutation moves, so no text may crash it with
another exception, hang it, or run any of it as Python. The texts are generated from a
fixed seed, so a failure here reproduces exactly; the failing text is in the message.
"""

from __future__ import annotations

import builtins
import random
import re
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from stochopt.errors import StochoptError
from stochopt.leir import OPS, parse, render
from tests.tiers import QUICK_AND_FULL

EXAMPLES = Path(__file__).resolve().parents[1] / "docs" / "examples"
SECONDS_PER_TEXT = 10.0  # a real kernel parses in milliseconds; this guards hangs on a busy machine
MUTANTS = 1800
QUICK_MUTANTS = 600  # the fast tier's share of them (about 30 parse, 570 are refused)

# Valid kernels for the mncore2 preset, between them using every op; mutants start here.
SEEDS = [
    (EXAMPLES / "softmax_plain.leir").read_text(),
    (EXAMPLES / "softmax_fast.leir").read_text(),
    '''def kernel(a: "bf16[64,128] @ dram", b: "bf16[128,256] @ dram") -> "f32[64,256] @ dram":
    x = load(a, "(64,128)/((8_L2B,8),(128)); B@[MAB]")
    w = load(b, "(128,256)/((128),(16_MAB,16)); B@[L2B]")
    y = x @ w
    return store(y)
''',
    '''def kernel(x: "f32[64,64] @ dram") -> "f32[64,1] @ dram":
    acc = full((64, 1), 0.0, "f32", "(64,1)/((8_L2B,8_L1B),(1))")
    for i in range(4):
        t = load(x[:, 16 * i:16 * i + 16], "(64,16)/((8_L2B,8_L1B),(16))")
        acc = acc + reduce_sum(t * t, axis=1, keepdims=True)
    return store(sqrt(acc))
''',
    '''def kernel(x: "f32[16,32] @ dram") -> "f32[32,32] @ dram":
    a = load(x, "(16,32)/((16_MAB),(32))")
    b = relayout(a, "(16,32)/((16),(32)); B@[L2B]")
    c = transpose(b, (1, 0))
    d = reshape(c, (32, 4, 4))
    e = reshape(d, (32, 16))
    f = concat([e, e], axis=1)
    return store(f[:, 0:32])
''',
    '''def kernel(x: "f32[32,64] @ dram", m: "bool[32,64] @ dram") -> "bf16[32,64] @ dram":
    xs = load(x, "(32,64)/((8_L2B,4_PE),(64))")
    ms = load(m, "(32,64)/((8_L2B,4_PE),(64))")
    a = where(ms, xs, -inf)
    b = minimum(abs(maximum(a, -1.0e4)), 100.0)
    d = tanh(log(b + 1.0)) * rsqrt(b + 2.0) - reciprocal(b + 3.0)
    e = where(gt(d, 0.5), d, -d) / 2.0
    s = reduce_min(e, axis=0, keepdims=True)
    g = broadcast_to(reduce_max(e, axis=1, keepdims=True), (32, 64))
    return store(cast(e - s + g * exp(e), "bf16"))
''',
    '''def kernel(x: "i32[16,16] @ dram") -> "f32[16,16] @ dram":
    xs = load(x, "(16,16)/((4_L1B,4_PE),(16))")
    y = xs * 3 - 7
    z = where(eq(y, 2), 1.0, 0.0) + cast(ge(y, 0), "f32") - cast(le(y, 1), "f32")
    w = cast(lt(y, 5), "f32")
    return store(z * w + cast(reduce_max(y, axis=1, keepdims=True), "f32"))
''',
]

# Python that would leave a trace if anything ran it; {marker} is a path under tmp_path.
EXECUTABLE = [
    'open("{marker}", "w")',
    '__import__("os").system("touch {marker}")',
    '__import__("pathlib").Path("{marker}").touch()',
    'setattr(__import__("builtins"), "STOCHOPT_FUZZ_RAN", 1)',
    '__import__("colorsys")',  # a harmless module nothing else imports
    '[open("{marker}", "w") for _ in range(1)]',
    '(lambda: open("{marker}", "w"))()',
    'exec("open(\'{marker}\', \'w\')")',
    'eval("__import__(\'os\').mkdir(\'{marker}\')")',
    'getattr(__builtins__, "open")("{marker}", "w")',
    'x.__class__.__base__.__subclasses__()',
]

HEAD = 'def kernel(x: "f32[8,16] @ dram") -> "f32[8,16] @ dram":\n'
LOAD = '    xs = load(x, "(8,16)/((8_L2B),(16))")\n'
TAIL = "    return store(xs)\n"


def _body(*lines: str) -> str:
    return HEAD + LOAD + "".join(f"    {line}\n" for line in lines) + TAIL


# Loops that unroll to the parser's caps: each builds up to 10,000 ops or runs 100,000
# statements before it is refused (up to a second). The fast tier leaves them to the full
# run; tests/leir/test_parser.py checks each cap quickly on its own.
LOOP_BOMBS = [
    ("for i in range(4096):", "    for j in range(4096):",
     "        for k in range(4096):", "            y = xs"),
    ("for i in range(4096):", "    for j in range(4096):", "        pass"),
    ("for i in range(4096):", "    for j in range(4096):", "        xs = xs + 1.0"),
]


def hostile_texts(marker: str, full: bool = True) -> list[str]:
    """Hand-written attacks, each aimed at one way out of the language (not full: all but
    the LOOP_BOMBS)."""
    code = [c.format(marker=marker) for c in EXECUTABLE]
    texts = []
    for c in code:  # every place Python would evaluate an expression
        texts += [
            c + "\n" + SEEDS[0],
            SEEDS[0] + c + "\n",
            _body(f"y = {c}"),
            _body(c),
            _body(f"y = exp({c})"),
            _body(f"y = load({c}, \"(8,16)/((8),(16))\")"),
            _body(f"for i in range({c}):", "    y = xs"),
            f"@{c.split('(')[0]}\n" + SEEDS[0],
            HEAD.replace('"f32[8,16] @ dram")', f"{c})", 1) + LOAD + TAIL,
            HEAD.replace('-> "f32[8,16] @ dram"', f"-> {c}") + LOAD + TAIL,
            HEAD.replace("x:", f"x=({c}), q:") + LOAD + TAIL,
            f'def kernel(x: "f32[8,16] @ dram" = {c}) -> "f32[8,16] @ dram":\n' + LOAD + TAIL,
            _body(f'y = f"{{{c}}}"'),
            _body(f"y = [q for q in {c}]"),
        ]
    texts += [
        "import os\n" + SEEDS[0],
        "from os import system\n" + SEEDS[0],
        _body("import os"),
        _body("y = xs.__class__"),
        _body("y = xs.T"),
        _body("y = exp.__globals__"),
        _body("y = (lambda q: q)(xs)"),
        _body("while True:", "    pass"),
        _body("while 1: y = xs"),
        _body("for i in range(10 ** 12):", "    y = xs"),
        _body("for i in range(1099511627776):", "    y = xs + 1.0"),
        *(_body(*bomb) for bomb in LOOP_BOMBS if full),
        _body("y = " + "(" * 300 + "xs" + ")" * 300),
        _body("y = " + "exp(" * 150 + "xs" + ")" * 150),
        _body("y = " + "-" * 5000 + "xs"),
        _body("y = xs" + " + xs" * 3000),
        _body("y = xs" + "[0:8]" * 3000),
        _body("y = " + "[" * 120 + "]" * 120),
        _body("y = xs * " + "9" * 4000),
        _body("y = xs * " + "9" * 5000),
        _body("y = xs * 2**10**10"),
        _body("y = xs * (1 << 100000)"),
        _body("y = xs * 1e300 // 1e-300"),
        _body("y = xs * (5 % 0)"),
        _body("y = xs * (5.0 // 0.0)"),
        _body("y = xs * 1j"),
        _body('y = xs * b"bytes"'),
        _body("y = xs * ..."),
        _body("y = xs * None"),
        _body("y = xs * True"),
        _body('y = xs * "%s" % (1,)'),
        _body('y = "{0.__class__}".format(xs)'),
        _body("y = f'{xs!r:>{10}}'"),
        _body("y = (z := xs)"),
        _body("y = [q for q in range(3)]"),
        _body("y = {q: q for q in range(3)}"),
        _body("y = (q for q in range(3))"),
        _body("y = {xs}"),
        _body("y = xs if xs else xs"),
        _body("y = not xs"),
        _body("y = ~xs"),
        _body("y = xs < xs < xs"),
        _body("y = xs != xs"),
        _body("y = xs is xs"),
        _body("y = xs and xs"),
        _body("y = xs[0]"),
        _body("y = xs[::2]"),
        _body("y = xs[...]"),
        _body("y = xs[xs:1]"),
        _body("y = xs[-100:2]"),
        _body("y = xs[0:1, 0:1, 0:1]"),
        _body("y, z = xs, xs"),
        _body("y = z = xs"),
        _body("xs += 1.0"),
        _body("y: int = 3"),
        _body("y = *xs,"),
        _body("y = exp(*[xs])"),
        _body("y = reduce_sum(xs, **{'axis': 1})"),
        _body("y = reduce_sum(xs, axis=1, axis=1)"),
        _body("y = reduce_sum(xs, 1, True, 7)"),
        _body("y = reduce_sum(xs, axis=xs)"),
        _body("y = reduce_sum(xs, axis=1 << 39)"),
        _body("y = reduce_sum(xs, axis=1, keepdims=1)"),
        _body("y = transpose(xs, (0, 0))"),
        _body("y = transpose(xs, tuple(range(9)))"),
        _body("y = reshape(xs, (-1, 16))"),
        _body("y = reshape(xs, (1,) * 9)"),
        _body("y = reshape(xs, (16777216, 16777216))"),
        _body("y = broadcast_to(xs, (16777216, 8, 16))"),
        _body("y = concat([], axis=0)"),
        _body("y = concat(xs, axis=0)"),
        _body("y = concat([xs] * 3, axis=0)"),
        _body('y = full((16777216, 16777216), 1.0, "f32", '
              '"(16777216,16777216)/((16777216),(16777216))")'),
        _body('y = full((8, 16), xs, "f32", "(8,16)/((8),(16))")'),
        _body('y = full((8, 16), 1099511627776, "i32", "(8,16)/((8),(16))")'),
        _body('y = full((8, 16), nan, "i32", "(8,16)/((8),(16))")'),
        _body('y = cast(xs, "f64")'),
        _body('y = cast(xs, xs)'),
        _body("y = slice(xs, ((0, 1), (0, 1)))"),
        _body("y = input(xs)"),
        _body("y = range(3)"),
        _body("y = print(xs)"),
        _body("y = store"),
        _body("y = inf"),
        _body("inf = xs"),
        _body("range = xs"),
        _body("exp = xs"),
        _body("for exp in range(2):", "    y = xs"),
        _body("for i in range(3):", "    i = xs"),
        _body("for i in range(3):", "    for i in range(3):", "        y = xs"),
        _body("for i in range(0, 10, 0):", "    y = xs"),
        _body("for i in range(2.5):", "    y = xs"),
        _body("for i in range(3):", "    y = xs", "else:", "    y = xs"),
        _body("for i in [1, 2]:", "    y = xs"),
        _body("for i in range(3):", "    return store(xs)"),
        _body("return store(xs)"),
        _body("global g"),
        _body("nonlocal g"),
        _body("del xs"),
        _body("assert xs"),
        _body("raise ValueError"),
        _body("try:", "    y = xs", "except Exception:", "    pass"),
        _body("with xs as y:", "    pass"),
        _body("if xs:", "    pass"),
        _body("y = yield xs"),
        _body("y = await xs"),
        _body("class C:", "    pass"),
        _body("def inner():", "    pass"),
        _body("async def inner():", "    pass"),
        _body("match xs:", "    case _:", "        pass"),
        "class K:\n    pass\n",
        "async " + SEEDS[0].split("\n", 1)[1],
        SEEDS[0].replace("def kernel(", "def kernel(*args, "),
        SEEDS[0].replace("def kernel(", "def kernel(q, "),
        SEEDS[0].replace("def kernel(", "def kernel(x, "),
        SEEDS[0].replace("x: ", "inf: "),
        SEEDS[0].replace('-> "f32[128,1024] @ dram"', ""),
        SEEDS[0].replace('-> "f32[128,1024] @ dram"', '-> "f32[128,1024] @ pe"'),
        SEEDS[0].replace("return store(y)", "return"),
        SEEDS[0].replace("return store(y)", "return y"),
        SEEDS[0].replace("return store(y)", "return 1.0"),
        SEEDS[0] + SEEDS[0],
        SEEDS[0].replace("f32[128,1024] @ dram\")", "f32[100000000,100000000] @ dram\")", 1),
        SEEDS[0].replace("f32[128,1024] @ dram\")", "f32[" + "9" * 300 + "] @ dram\")", 1),
        SEEDS[0].replace("f32[128,1024] @ dram\")", "f32[1,1,1,1,1,1,1,1] @ dram\")", 1),
        SEEDS[0].replace("f32[128,1024] @ dram\")", "f32[] @ dram\")", 1),
        SEEDS[0].replace("f32[128,1024] @ dram\")", "f32[１２８,1024] @ dram\")", 1),
        SEEDS[0].replace("f32[128,1024]", "f64[128,1024]", 1),
        SEEDS[0].replace("f32[128,1024]", "f32[128 1024]", 1),
        SEEDS[0].replace("f32[128,1024]", "f32[12\x1f8,1024]", 1),
        SEEDS[0].replace("f32[128,1024]", "f32[128,,1024]", 1),
        "",
        "\n\n\n",
        "# just a comment\n",
        '"""only a docstring"""\n',
        "def",
        "\x00" + SEEDS[0],
        SEEDS[0].replace("xs", "x\x00s"),
        SEEDS[0].replace("xs", "\ud800"),
        "\ufeff" + SEEDS[0],
        SEEDS[0].replace("load(", "\u202eload("),
        SEEDS[0] + "#" + "x" * 300_000,
        "y = 1\n" * 40_000,
        "x" * 1_000_000,
        HEAD + "    y = " + "+".join(["xs"] * 120_000) + "\n" + TAIL,
        HEAD + "".join(f"    xs = xs + {i}.0\n" for i in range(10_500)) + TAIL,
    ]
    # absurd layouts, one per structural failure and then some
    for layout in ABSURD_LAYOUTS:
        texts.append(HEAD + f'    xs = load(x, "{layout}")\n' + TAIL)
        texts.append(_body(f'y = relayout(xs, "{layout}")'))
    return texts


ABSURD_LAYOUTS = [
    "", "/", "()/()", "(8,16)", "(8,16)/", "(8,16)/((8),(16)", "(8,16)/((8),(16)))",
    "(8,16)/((8)(16))", "(8,16)/((8),(16),(1))", "(8,16)/((8,),(16))", "(8,16)/((8),())",
    "(8,16)/((0,8),(16))", "(8,16)/((-8),(16))", "(8,16)/((8_L3B),(16))",
    "(8,16)/((8_l2b),(16))", "(8,16)/((8_),(16))", "(8,16)/((_L2B),(16))",
    "(8,16)/((4),(16))", "(8,16)/((8),(16)); B@", "(8,16)/((8),(16)); B@[L2B,L2B]",
    "(8,16)/((8),(16)); B@[XYZ]", "(8,16)/((8),(16)); B@[L2B];B@[PE]",
    "(8,16)/((8_L2B),(16)); B@[L2B]", "(8,16)/((8),(16_PE))", "(8,16)/((8),(2_PE,8_PE))",
    "(8,16)/((2_L2B,8_L2B),(1))", "(99999999999999999999,16)/((99999999999999999999),(16))",
    "(8,16)/((" + "1," * 300 + "8),(16))", "(8,16)/((8),(16))" + " " * 600,
    "(²,16)/((8),(16))", "(٨,16)/((٨),(16))", "(8,16)/((８),(16))", "(8,16)/((8_Ｌ2B),(16))",
    "(8,16)\\/((8),(16))", "(8,16)/((8),(16))\\n", "((8,16))/(((8)),((16)))",
]

# Texts that look hostile but are LEIR: the fuzz must not pass by rejecting everything.
ODD_BUT_VALID = [
    _body("y = xs * 1099511627776 * 1099511627776"),  # one literal at a time stays small
    _body("y = xs * 1e400"),  # inf
    _body("y = xs * 1e300 * 1e300"),
    _body("y = xs * (inf % 2)"),  # nan, folded here, never by eval
    _body("y = xs * -(-(-1.0))"),
    _body("y = xs[:][:][:][:]"),  # full slices of a spread axis are no slices
    _body('y = relayout(xs, "(8,16)/((2_L2B,2_L2B,2_L2B),(16))")'),
    _body('y = relayout(xs, "(8,16)/((' + "1," * 100 + '8),(16))")'),
    _body('y = relayout(xs, "  ( 8 , 16 ) / ( ( 8 ) , ( 16 ) ) ")'),
    _body('y = relayout(xs, "(8,16)/((8),(16)); B@[]")'),
    SEEDS[0].replace("xs", "𝔵𝔰"),  # unicode identifiers are Python identifiers
    SEEDS[0].replace("xs", "ｘｓ"),
    SEEDS[0].replace("    ", "\t"),
    SEEDS[0].replace("\n", "\r"),
    SEEDS[0].replace("\n", "\r\n"),
    SEEDS[0].replace("\n", "  # comment\n"),
    '"""docstring"""\n' + SEEDS[0],
]

# pieces a mutation may drop into a text: LEIR words, Python that is not LEIR, noise
TOKENS = [
    *OPS, "import os", "__import__('os')", ".__class__", "lambda q: q", "while True:",
    "range(10**9)", "**", "yield", "await", "global g", "nonlocal g", "class", "def", "async",
    "(", ")", "[", "]", "{", "}", ":", ",", ";", "\n", "\t", "    ", "\\", "'", '"', '"""',
    "#", "@", "=", "==", ":=", "...", "->", "*", "/", "//", "%", "-", "+", "~", "<", ">",
    "f'{x}'", "None", "True", "not", "and", "is", "in", "for", "return", "if", "else",
    "1e999", "nan", "inf", "-inf", "0", "-1", "4097", "1099511627776", "10**30", "0.5",
    "x", "xs", "y", "kernel", "range", "store(", "load(", "exp(", "axis=", "keepdims=",
    "_L2B", "_L1B", "_MAB", "_PE", "_XYZ", "4096_PE", "B@[L2B,L1B,MAB,PE]", "; B@[PE]",
    "f32", "bf16", "i32", "bool", "f64", "@ dram", "@ pe", "[8,16]",
    "\x00", "é", "𝔵", "\u202e", "\ufeff", "\r", "\x0c", "\ud800", "２",
]
NUMBERS = ["0", "1", "-1", "2", "3", "7", "4096", "4097", "65536", "16777217", "1099511627777",
           "9" * 50, "1e999", "0.5", "-0.0", "nan", "inf"]


def random_layout(rng: random.Random, shape: tuple[int, ...]) -> str:
    """A layout text for a shape: often legal, often over a fan-out or slightly wrong."""
    levels = ["L2B", "L1B", "MAB", "PE", None, None, "XYZ"]
    axes = []
    for size in shape:
        factors, rest = [], size
        for _ in range(rng.randint(0, 3)):
            d = rng.choice([2, 4, 8, 16, 3])
            level = rng.choice(levels)
            if rest % d == 0 and rng.random() < 0.9:
                rest //= d
                factors.append(f"{d}_{level}" if level else str(d))
        factors.append(str(rest if rng.random() < 0.95 else rest + 1))
        axes.append("(" + ",".join(factors) + ")")
    text = "(" + ",".join(map(str, shape)) + ")/(" + ",".join(axes) + ")"
    if rng.random() < 0.3:
        text += "; B@[" + ",".join(rng.sample(["L2B", "L1B", "MAB", "PE"], rng.randint(1, 4))) + "]"
    return text


def _semantic_edit(text: str, rng: random.Random) -> str:
    """An edit that keeps the text Python, so the kernel reaches the type and layout rules."""
    choice = rng.randrange(6)
    if choice == 0:  # another layout for a quoted layout string
        quoted = re.findall(r'"(\([0-9,]+\)/[^"]*)"', text)
        if quoted:
            old = rng.choice(quoted)
            shape = tuple(int(v) for v in re.findall(r"[0-9]+", old.split("/")[0]))
            return text.replace(old, random_layout(rng, shape), 1)
    if choice == 1:  # another number
        numbers = list(re.finditer(r"(?<![\w.])[0-9]+(?:\.[0-9]*)?", text))
        if numbers:
            m = rng.choice(numbers)
            return text[:m.start()] + rng.choice(NUMBERS) + text[m.end():]
    if choice == 2:  # another op
        calls = list(re.finditer(r"\b(" + "|".join(OPS) + r")\(", text))
        if calls:
            m = rng.choice(calls)
            return text[:m.start(1)] + rng.choice(list(OPS)) + text[m.end(1):]
    if choice == 3:  # another dtype, or another operator
        words = list(re.finditer(r"\b(f32|bf16|i32|bool)\b| [-+*/@] ", text))
        if words:
            m = rng.choice(words)
            new = (rng.choice(["f32", "bf16", "i32", "bool", "f16"]) if m.group(1)
                   else rng.choice([" + ", " - ", " * ", " / ", " @ ", " > ", " == ", " % "]))
            return text[:m.start()] + new + text[m.end():]
    if choice == 4:  # another variable
        names = sorted(set(re.findall(r"^\s+(\w+) =", text, re.M)) | {"x", "xs", "inf"})
        uses = list(re.finditer(r"\b(" + "|".join(names) + r")\b", text))
        if uses:
            m = rng.choice(uses)
            return text[:m.start()] + rng.choice(names) + text[m.end():]
    lines = text.split("\n")  # drop, duplicate or swap whole lines
    i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
    if rng.random() < 0.4:
        del lines[i]
    elif rng.random() < 0.5:
        lines.insert(i, lines[j])
    else:
        lines[i], lines[j] = lines[j], lines[i]
    return "\n".join(lines)


def _noise_edit(text: str, rng: random.Random) -> str:
    """An edit that mostly breaks the syntax: the text of a truncated or garbled reply."""
    choice = rng.randrange(6)
    pos = rng.randrange(len(text) + 1)
    if choice == 0:  # insert a token
        return text[:pos] + rng.choice(TOKENS) + text[pos:]
    if choice == 1:  # delete a span
        return text[:pos] + text[pos + rng.randint(1, 20):]
    if choice == 2:  # truncate
        return text[:pos]
    if choice == 3:  # shuffle all lines
        lines = text.split("\n")
        rng.shuffle(lines)
        return "\n".join(lines)
    if choice == 4:  # replace a character
        return text[:pos] + rng.choice(TOKENS)[:1] + text[pos + 1:]
    # flip a byte and decode leniently, as a corrupted file would read
    data = bytearray(text.encode("utf-8", "surrogatepass"))
    if data:
        data[rng.randrange(len(data))] = rng.randrange(256)
    return data.decode("utf-8", "replace")


def mutate(text: str, rng: random.Random) -> str:
    """One to three random edits, mostly ones that keep the text Python."""
    for _ in range(rng.randint(1, 3)):
        edit = _semantic_edit if rng.random() < 0.75 else _noise_edit
        text = edit(text, rng)
    return text


def mutated_texts(count: int, seed: int = 20261129) -> list[str]:
    rng = random.Random(seed)
    return [mutate(rng.choice(SEEDS), rng) for _ in range(count)]


class _TooSlow(BaseException):
    """Raised by the alarm; a BaseException so no except clause in the parser can eat it."""


@contextmanager
def _deadline(seconds: float) -> Iterator[None]:
    if not hasattr(signal, "setitimer"):  # no SIGALRM (Windows): run without the guard
        yield
        return

    def fire(signum, frame):
        raise _TooSlow

    previous = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def check_text(text: str, machine: str | None = None) -> str:
    """Parse one text; it must give a kernel that round-trips, or a StochoptError that says
    where. Returns "ok" or "error" so callers can check both outcomes happen."""
    try:
        with _deadline(SECONDS_PER_TEXT):
            kernel = parse(text, machine)
            assert parse(render(kernel), machine) == kernel, render(kernel)
        return "ok"
    except _TooSlow:
        pytest.fail(f"parse took over {SECONDS_PER_TEXT} s on:\n{text[:2000]!r}")
    except StochoptError as e:
        assert str(e), "an error with no message"
        if e.line is not None:
            assert 1 <= e.line <= text.count("\n") + text.count("\r") + 2, (e.line, str(e))
        return "error"
    except Exception as e:  # noqa: BLE001 -- the point of the test: name the escapee
        pytest.fail(f"{type(e).__name__}: {e} escaped parse() on:\n{text[:2000]!r}")


# ---------------------------------------------------------------------------------
# tests
# ---------------------------------------------------------------------------------

def test_every_seed_kernel_parses_and_round_trips():
    for text in SEEDS:
        assert check_text(text) == "ok", text


def test_seeds_use_every_op_so_mutants_reach_every_rule():
    used = {node.op for text in SEEDS for node in parse(text).nodes}
    assert set(OPS) - used == set()


@pytest.mark.parametrize("full", QUICK_AND_FULL)
def test_hostile_texts_raise_only_stochopt_errors_and_run_nothing(tmp_path, full):
    marker = tmp_path / "ran"
    imported_before = "colorsys" in sys.modules
    texts = hostile_texts(str(marker), full=full)
    outcomes = [check_text(t) for t in texts]
    assert outcomes.count("error") == len(texts), [
        t[:200] for t, o in zip(texts, outcomes, strict=True) if o != "error"]
    assert not marker.exists(), "a kernel text was executed"
    assert not hasattr(builtins, "STOCHOPT_FUZZ_RAN"), "a kernel text was executed"
    assert imported_before or "colorsys" not in sys.modules, "a kernel text imported a module"


def test_odd_but_valid_texts_parse_and_round_trip():
    for text in ODD_BUT_VALID:
        assert check_text(text) == "ok", text


@pytest.mark.parametrize("full", QUICK_AND_FULL)
def test_mutated_kernels_raise_only_stochopt_errors_or_round_trip(full):
    count = MUTANTS if full else QUICK_MUTANTS
    texts = mutated_texts(count)
    outcomes = [check_text(t) for t in texts]
    # both branches must be exercised, or the mutator has drifted into noise or no-ops
    assert outcomes.count("ok") > 20
    assert outcomes.count("error") > count // 2


def test_mutants_are_checked_on_the_small_machine_too():
    # the small preset's fan-outs are smaller: the same texts break other limits there
    texts = mutated_texts(300, seed=7)
    on_small = [check_text(t, "small") for t in texts]
    on_mncore2 = [check_text(t) for t in texts]
    assert on_small.count("ok") < on_mncore2.count("ok")


def test_mutation_is_deterministic_for_a_seed():
    assert mutated_texts(50) == mutated_texts(50)
    assert mutated_texts(50) != mutated_texts(50, seed=1)


@pytest.mark.parametrize("bad", [None, 42, b"def kernel(): pass", ["text"]])
def test_parse_rejects_what_is_not_text(bad):
    with pytest.raises(StochoptError, match="string"):
        parse(bad)
