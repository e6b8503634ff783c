"""LEIR, the tensor-level kernel language: types, layouts, the op table, parser, renderer."""

from stochopt.errors import ConstraintError, ParseError
from stochopt.leir.ir import Builder, Kernel, Node, build, typecheck
from stochopt.leir.layout import LEVELS, Factor, Layout, parse_layout
from stochopt.leir.ops import OPS, Op
from stochopt.leir.parser import parse
from stochopt.leir.render import render
from stochopt.leir.rules import Const
from stochopt.leir.types import DTYPES, TensorType

__all__ = ["ConstraintError", "ParseError", "Builder", "Kernel", "Node", "build", "typecheck",
           "LEVELS", "Factor", "Layout", "parse_layout", "OPS", "Op", "parse", "render",
           "Const", "DTYPES", "TensorType"]
