"""parse(text) -> Kernel: LEIR's Python-like syntax read with ``ast`` and interpreted.

Nothing here ever runs Python code: the tree from ``ast.parse`` is walked by hand and
only the forms listed in docs/leir.md are accepted; anything else is a ParseError with
its line and column. ``for i in range(N)`` is unrolled while building.
"""

from __future__ import annotations

import ast
import math
import re
import warnings
from typing import Any

from stochopt.errors import ConstraintError, ParseError, StochoptError
from stochopt.leir.ir import MAX_OPS, RETURN_RULE, Builder, Kernel, is_stored
from stochopt.leir.layout import parse_layout
from stochopt.leir.ops import (
    AXIS,
    BOOL,
    BOUNDS,
    DTYPE,
    LAYOUT,
    OPS,
    PERM,
    REQUIRED,
    SHAPE,
    SUBSCRIPT,
    TENSOR,
    TENSORS,
    Op,
    operator_op,
)
from stochopt.leir.rules import Const
from stochopt.leir.types import parse_signature
from stochopt.machine import load_machine

MAX_TEXT = 256 * 1024
MAX_LINES = 2 * MAX_OPS  # a line makes at most one op outside loops; more lines is no kernel
MAX_TRIP = 4096
MAX_DEPTH = 64
# statements run while unrolling: loops whose bodies make no ops (pass, y = x) would
# otherwise run 4096**depth times without ever reaching MAX_OPS
MAX_STEPS = 100_000
MAX_INT = 1 << 40
NAMED_CONSTANTS = {"inf": math.inf, "nan": math.nan}
RESERVED_WORDS = frozenset({"range", "True", "False", "None"} | set(NAMED_CONSTANTS))
# Python's operators as the op table spells them (Op.operator); which op each one reads
# as is the table's to say (ops.operator_op)
_SYMBOLS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.MatMult: "@",
            ast.USub: "-", ast.Gt: ">", ast.GtE: ">=", ast.Lt: "<", ast.LtE: "<=",
            ast.Eq: "=="}
_HEADER_LINE = re.compile(r"^#\s*(spec|machine):\s*(.+?)\s*$")


def is_reserved(name: str) -> bool:
    """Whether a name cannot be a parameter, an assigned name or a loop variable: every
    op's name and the few words LEIR gives a meaning."""
    return name in OPS or name in RESERVED_WORDS


def _operator_op(op: ast.AST, operands: int) -> str | None:
    """The op a Python operator node reads as, or None when no op is spelled so."""
    symbol = _SYMBOLS.get(type(op))
    return None if symbol is None else operator_op(symbol, operands)


def header_of(text: str, key: str) -> str | None:
    """The ``# spec: PATH`` or ``# machine: NAME`` comment on the first lines of a
    kernel, if any."""
    for line in text.splitlines()[:5]:
        m = _HEADER_LINE.match(line.strip())
        if m and m.group(1) == key:
            return m.group(2)
    return None


def spec_path_of(text: str) -> str | None:
    """The ``# spec: PATH`` comment on the first lines of a kernel, if any."""
    return header_of(text, "spec")


def machine_of(text: str) -> str | None:
    """The ``# machine: NAME`` comment a kernel file records its machine with, if any."""
    return header_of(text, "machine")


def parse(text: str, machine=None) -> Kernel:
    """Parse kernel text into a checked Kernel for a machine (default mncore2)."""
    machine = load_machine(machine)
    if not isinstance(text, str):
        raise ParseError(f"kernel text must be a string, got {type(text).__name__}")
    if len(text) > MAX_TEXT:
        raise ParseError(f"kernel text is {len(text)} characters; at most {MAX_TEXT} allowed")
    if (lines := text.count("\n") + 1) > MAX_LINES:  # refused before Python's parser spends seconds
        raise ParseError(f"kernel text has {lines} lines; at most {MAX_LINES} allowed")
    if "\x00" in text:
        raise ParseError("kernel text contains a NUL character")
    try:
        with warnings.catch_warnings():  # SyntaxWarnings ("\\d", "1 is 1") are not ours to print
            warnings.simplefilter("ignore")
            tree = ast.parse(text, mode="exec")
    except SyntaxError as e:
        raise ParseError(f"syntax error: {e.msg}", line=e.lineno, col=e.offset) from None
    except (RecursionError, MemoryError, ValueError, OverflowError):
        raise ParseError("kernel text is nested too deeply or is malformed") from None
    try:
        return _Reader(machine, spec_path_of(text)).module(tree)
    except RecursionError:
        raise ParseError("kernel text is nested too deeply") from None


class _Reader:
    def __init__(self, machine, spec_path: str | None) -> None:
        self.builder = Builder(machine)
        self.spec_path = spec_path
        self.env: dict[str, Any] = {}    # name -> node index, or int for loop variables
        self.loop_vars: set[str] = set()
        self.depth = 0
        self.steps = 0
        self.temp = 0

    # -- structure ------------------------------------------------------------------
    def module(self, tree: ast.Module) -> Kernel:
        body = [s for s in tree.body if not _is_docstring(s)]
        if len(body) != 1 or not isinstance(body[0], ast.FunctionDef):
            where = body[1] if len(body) > 1 else (body[0] if body else None)
            raise ParseError("a kernel is exactly one def and nothing else",
                             line=getattr(where, "lineno", None),
                             col=_col(where) if where else None,
                             hint="def kernel(x: \"f32[128] @ dram\") -> \"f32[128] @ dram\": ...")
        return self.function(body[0])

    def function(self, fn: ast.FunctionDef) -> Kernel:
        if fn.decorator_list:
            raise _err(fn.decorator_list[0], "decorators are not allowed")
        a = fn.args
        if a.posonlyargs or a.vararg or a.kwonlyargs or a.kwarg or a.defaults or a.kw_defaults:
            raise _err(fn, "kernel parameters are plain names with type annotations")
        for arg in a.args:
            if is_reserved(arg.arg) or arg.arg in self.env:
                raise _err(arg, f"parameter name {arg.arg!r} is reserved or repeated")
            type_ = parse_signature(self._annotation(arg.annotation, arg), arg.lineno,
                                    _col(arg))
            self.env[arg.arg] = self.builder.input(arg.arg, type_)
        if fn.returns is None:
            raise _err(fn, "the kernel needs a return annotation",
                       hint='-> "f32[128,1024] @ dram"')
        ret_type = parse_signature(self._annotation(fn.returns, fn.returns),
                                   fn.returns.lineno, _col(fn.returns))
        body = [s for s in fn.body if not _is_docstring(s)]
        if not body or not isinstance(body[-1], ast.Return):
            raise _err(fn, "the kernel must end with return store(...)")
        self.block(body[:-1])
        ret = body[-1]
        if ret.value is None:
            raise _err(ret, "return needs a value: return store(y)")
        out = self.expr(ret.value)
        if not isinstance(out, int):
            raise _err(ret, "the kernel must return a tensor: return store(y)")
        node = self.builder.nodes[out]
        if not is_stored(node):
            raise _err(ret, RETURN_RULE, hint="return store(y)")
        if (node.type.dtype, node.type.shape) != (ret_type.dtype, ret_type.shape):
            raise ConstraintError(
                f"the kernel returns {node.type.signature()} but is annotated "
                f"{ret_type.signature()}", line=ret.lineno, col=_col(ret),
                hint="cast or reshape the result, or fix the annotation")
        return self.builder.finish(fn.name, out, self.spec_path)

    def _annotation(self, node, where) -> str:
        if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
            raise _err(where, "types are written as strings", hint='"bf16[16,512] @ dram"')
        return node.value

    def block(self, stmts: list[ast.stmt]) -> None:
        for s in stmts:
            self.steps += 1
            if self.steps > MAX_STEPS:
                raise _err(s, f"kernel unrolls to more than {MAX_STEPS} statements",
                           hint="use fewer or shorter loops")
            if isinstance(s, ast.Assign):
                self.assign(s)
            elif isinstance(s, ast.For):
                self.loop(s)
            elif _is_docstring(s) or isinstance(s, ast.Pass):
                continue
            elif isinstance(s, ast.Return):
                raise _err(s, "return is allowed only as the last statement of the kernel")
            else:
                raise _err(s, f"{type(s).__name__} statements are not part of LEIR",
                           hint="use assignments, for i in range(N) loops and return")

    def assign(self, s: ast.Assign) -> None:
        if len(s.targets) != 1 or not isinstance(s.targets[0], ast.Name):
            raise _err(s, "assign to one plain name: y = exp(x)")
        name = s.targets[0].id
        if is_reserved(name) or name in self.loop_vars:
            raise _err(s.targets[0], f"cannot assign to {name!r}: it is reserved or a loop "
                       "variable")
        value = self.expr(s.value, name)
        if isinstance(value, Const):
            raise _err(s, "assign tensors only; write numbers where they are used")
        self.env[name] = value

    def loop(self, s: ast.For) -> None:
        if s.orelse or not isinstance(s.target, ast.Name):
            raise _err(s, "loops are for NAME in range(N) with no else")
        it = s.iter
        if not (isinstance(it, ast.Call) and isinstance(it.func, ast.Name)
                and it.func.id == "range" and not it.keywords and 1 <= len(it.args) <= 3):
            raise _err(s.iter, "loops run over range(N) with constant bounds")
        bounds = [self.static_int(a) for a in it.args]
        trips = range(*bounds) if bounds[-1] != 0 or len(bounds) < 3 else None
        if trips is None:
            raise _err(it, "range() step must not be zero")
        if len(trips) > MAX_TRIP:
            raise _err(it, f"loop of {len(trips)} iterations; at most {MAX_TRIP}")
        var = s.target.id
        if is_reserved(var) or var in self.env or var in self.loop_vars:
            raise _err(s.target, f"loop variable {var!r} shadows another name")
        self.loop_vars.add(var)
        for i in trips:
            self.env[var] = i
            self._enter(s)
            self.block(s.body)
            self.depth -= 1
            if len(self.builder.nodes) > MAX_OPS:
                raise _err(s, f"kernel has more than {MAX_OPS} ops after unrolling")
        self.loop_vars.discard(var)
        self.env.pop(var, None)

    # -- expressions ----------------------------------------------------------------
    def _enter(self, node) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise _err(node, "expression or loops nested too deeply")

    def expr(self, e: ast.expr, name: str = "") -> int | Const:
        """A tensor (node index) or a scalar literal."""
        self._enter(e)
        try:
            return self._expr(e, name)
        finally:
            self.depth -= 1

    def _expr(self, e: ast.expr, name: str) -> int | Const:
        if isinstance(e, ast.Name):
            if e.id in NAMED_CONSTANTS:
                return Const(NAMED_CONSTANTS[e.id])
            if e.id not in self.env:
                if e.id in OPS:
                    raise _err(e, f"{e.id} is an op; call it: {e.id}(...)")
                raise _err(e, f"unknown name {e.id!r}", hint="define it before use")
            v = self.env[e.id]
            return Const(v) if e.id in self.loop_vars else v
        if isinstance(e, ast.Constant):
            if isinstance(e.value, bool) or not isinstance(e.value, int | float):
                raise _err(e, f"literal {repr(e.value)[:40]} cannot stand here",
                           hint="only numbers are operands")
            return Const(self._check_number(e.value, e))
        if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.USub | ast.UAdd):
            v = self.expr(e.operand)
            if isinstance(v, Const):
                value = -v.value if isinstance(e.op, ast.USub) else v.value
                return Const(self._check_number(value, e))  # -nan becomes the one nan
            if isinstance(e.op, ast.UAdd):
                return v
            return self.apply(_operator_op(e.op, 1), e, [v], {}, name)
        if isinstance(e, ast.BinOp):
            return self.binop(e, name)
        if isinstance(e, ast.Compare):
            compare = _operator_op(e.ops[0], 2) if len(e.ops) == 1 else None
            if compare is None:
                raise _err(e, "compare two values with one of > >= < <= ==")
            args = [self.expr(e.left), self.expr(e.comparators[0])]
            return self.apply(compare, e, args, {}, name)
        if isinstance(e, ast.Call):
            return self.call(e, name)
        if isinstance(e, ast.Subscript):
            return self.subscript(e, name)
        raise _err(e, f"{type(e).__name__} expressions are not part of LEIR",
                   hint="use LEIR ops, + - * / @, numbers and static slices")

    def binop(self, e: ast.BinOp, name: str) -> int | Const:
        left, right = self.expr(e.left), self.expr(e.right)
        if isinstance(left, Const) and isinstance(right, Const):
            return Const(self._fold(e, left.value, right.value))
        op = _operator_op(e.op, 2)
        if op is None:
            raise _err(e, f"operator {type(e.op).__name__} is not defined on tensors",
                       hint="use + - * / @")
        return self.apply(op, e, [left, right], {}, name)

    def _fold(self, e: ast.BinOp, a, b):
        """Arithmetic on numbers and loop indices, done here, never by eval."""
        op = type(e.op)
        try:
            if op is ast.Add:
                v = a + b
            elif op is ast.Sub:
                v = a - b
            elif op is ast.Mult:
                v = a * b
            elif op is ast.Div:
                v = a / b
            elif op is ast.FloorDiv:
                v = a // b
            elif op is ast.Mod:
                v = a % b
            else:
                raise _err(e, f"operator {type(e.op).__name__} is not allowed on numbers")
        except ZeroDivisionError:
            raise _err(e, "division by zero in a constant expression") from None
        return self._check_number(v, e)

    def _check_number(self, v, e):
        if isinstance(v, float) and v != v:
            return math.nan  # one nan object: attrs holding it compare equal (tuple identity)
        if isinstance(v, int) and abs(v) > MAX_INT:
            raise _err(e, "integer constant too large")
        if isinstance(v, float) and math.isfinite(v) and abs(v) > 1e300:
            raise _err(e, "number too large")
        return v

    def static_int(self, e: ast.expr) -> int:
        v = self.expr(e)
        if not (isinstance(v, Const) and isinstance(v.value, int)
                and not isinstance(v.value, bool)):
            raise _err(e, "expected a constant integer (numbers and loop indices only)")
        return v.value

    def subscript(self, e: ast.Subscript, name: str) -> int:
        base = self.expr(e.value)
        if isinstance(base, Const):
            raise _err(e, "only tensors can be sliced")
        shape = self.builder.nodes[base].type.shape
        items = e.slice.elts if isinstance(e.slice, ast.Tuple) else [e.slice]
        if len(items) > len(shape):
            raise _err(e, f"{len(items)} indices for a tensor of rank {len(shape)}")
        bounds = []
        for axis, size in enumerate(shape):
            if axis >= len(items):
                bounds.append((0, size))
                continue
            it = items[axis]
            if not isinstance(it, ast.Slice) or it.step is not None:
                raise _err(it, "index with static slices a:b (no steps, no single indices)",
                           hint="x[0:64, :]")
            lo = self.static_int(it.lower) if it.lower is not None else 0
            hi = self.static_int(it.upper) if it.upper is not None else size
            lo, hi = (lo + size if lo < 0 else lo), (hi + size if hi < 0 else hi)
            bounds.append((lo, hi))
        return self.apply(operator_op(SUBSCRIPT, 1), e, [base], {"bounds": tuple(bounds)},
                          name)

    def call(self, e: ast.Call, name: str) -> int:
        if not isinstance(e.func, ast.Name):
            raise _err(e, "only LEIR ops can be called: no attributes, no methods")
        fname = e.func.id
        if fname not in OPS:
            raise _err(e.func, f"{fname!r} is not a LEIR op",
                       hint="see docs/leir.md for the ops")
        op = OPS[fname]
        if any(isinstance(a, ast.Starred) for a in e.args) or any(k.arg is None
                                                                 for k in e.keywords):
            raise _err(e, "*args and **kwargs are not allowed")
        if len(e.args) > len(op.params):
            raise _err(e, f"{fname}() takes at most {len(op.params)} arguments",
                       hint=op.doc)
        given: dict[str, ast.expr] = {}
        for p, a in zip(op.params, e.args, strict=False):
            given[p.name] = a
        names = {p.name for p in op.params}
        for k in e.keywords:
            if k.arg not in names:
                raise _err(k.value, f"{fname}() has no argument {k.arg!r}", hint=op.doc)
            if k.arg in given:
                raise _err(k.value, f"{fname}() got {k.arg!r} twice")
            given[k.arg] = k.value
        args: list[int | Const] = []
        attrs: dict[str, Any] = {}
        for p in op.params:
            if p.name not in given:
                if p.default is REQUIRED:
                    raise _err(e, f"{fname}() is missing its argument {p.name!r}", hint=op.doc)
                attrs[p.name] = p.default
                continue
            node = given[p.name]
            if p.kind == TENSOR:
                args.append(self.expr(node))
            elif p.kind == TENSORS:
                if not isinstance(node, ast.List | ast.Tuple) or not node.elts:
                    raise _err(node, f"{fname}() takes a list of tensors: [a, b]")
                args.extend(self.expr(x) for x in node.elts)
            else:
                attrs[p.name] = self.static(p.kind, node, op)
        return self.apply(fname, e, args, attrs, name)

    def static(self, kind: str, node: ast.expr, op: Op) -> Any:
        if kind in (LAYOUT, DTYPE):
            if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
                raise _err(node, f"{op.name}() takes the {kind} as a string", hint=op.doc)
            if kind == DTYPE:
                return node.value
            try:
                return parse_layout(node.value)
            except StochoptError as err:
                raise ConstraintError(err.message, line=node.lineno, col=_col(node),
                                      hint=err.hint) from None
        if kind == BOOL:
            if not (isinstance(node, ast.Constant) and isinstance(node.value, bool)):
                raise _err(node, f"{op.name}() takes True or False here")
            return node.value
        if kind == AXIS:
            return self.static_int(node)
        if kind in (SHAPE, PERM):
            if kind == PERM and isinstance(node, ast.Constant) and node.value is None:
                return None
            if not isinstance(node, ast.Tuple | ast.List) or len(node.elts) > 8:
                raise _err(node, f"{op.name}() takes a tuple of integers here: (16, 512)")
            values = tuple(self.static_int(x) for x in node.elts)
            if kind == SHAPE and (not values or any(v < 1 or v > 1 << 24 for v in values)):
                raise _err(node, "a shape is 1 to 8 positive integers")
            return values
        if kind == BOUNDS:
            raise _err(node, "write slices as x[a:b]")
        v = self.expr(node)  # a number
        if not isinstance(v, Const):
            raise _err(node, f"{op.name}() takes a number here")
        return v.value

    def apply(self, op: str, e: ast.AST, args, attrs, name: str) -> int:
        if not name:
            self.temp += 1
            name = f"t{self.temp}"
        return self.builder.add(op, args, attrs, name, getattr(e, "lineno", None), _col(e))


def _is_docstring(s: ast.stmt) -> bool:
    return isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant) and isinstance(
        s.value.value, str)


def _col(node) -> int | None:
    c = getattr(node, "col_offset", None)
    return None if c is None else c + 1


def _err(node, message: str, hint: str | None = None) -> ParseError:
    return ParseError(message, line=getattr(node, "lineno", None), col=_col(node), hint=hint)
