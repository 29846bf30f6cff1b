"""Every integer code has one definition (codelets/Codes.hpp): Python's names come
from the extension, and no Python module writes a code by hand."""

import ast
import re
from pathlib import Path

import snn_ipu
from snn_ipu import _codes, surrogate
from snn_ipu._native import _C
from snn_ipu.overflow import OVERFLOW_POLICIES


def test_python_names_are_the_extensions_codes():
    assert _codes.MODELS == dict(_C.codes["models"])
    assert _codes.RESETS == dict(_C.codes["resets"])
    assert _codes.SURROGATES == dict(_C.codes["surrogates"])
    assert _codes.OVERFLOWS == dict(_C.codes["overflow_policies"])
    assert _codes.VALUE_RANGES == dict(_C.codes["value_ranges"])
    assert OVERFLOW_POLICIES == tuple(_C.codes["overflow_policies"])
    kinds = {cls.__name__: cls().kind for cls in (
        surrogate.ATan, surrogate.FastSigmoid, surrogate.Sigmoid, surrogate.Triangle,
        surrogate.StraightThrough)}
    assert kinds == {"ATan": _C.codes["surrogates"]["atan"],
                     "FastSigmoid": _C.codes["surrogates"]["fast_sigmoid"],
                     "Sigmoid": _C.codes["surrogates"]["sigmoid"],
                     "Triangle": _C.codes["surrogates"]["triangle"],
                     "StraightThrough": _C.codes["surrogates"]["straight_through"]}


def test_no_module_writes_the_codes_by_hand():
    """No dict or tuple literal in the package maps the code names to numbers or lists
    them: such a table would be a second definition."""
    names = {name for table in _C.codes.values() for name in table}
    offenders = []
    for path in Path(snn_ipu.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Dict):
                keys = [k.value for k in node.keys if isinstance(k, ast.Constant)]
                values = [v for v in node.values if isinstance(v, ast.Constant)]
                if len(keys) >= 3 and set(keys) <= names and all(
                        isinstance(v.value, int) for v in values):
                    offenders.append(f"{path.name}:{node.lineno}")
            elif isinstance(node, ast.Tuple):
                items = [e.value for e in node.elts if isinstance(e, ast.Constant)]
                if len(items) >= 3 and len(items) == len(node.elts) and set(items) <= names:
                    offenders.append(f"{path.name}:{node.lineno}")
    assert offenders == []


def test_no_native_source_writes_the_codes_by_hand():
    """No C++ source but Codes.hpp declares a run of constants 0, 1, 2, ... (a model,
    reset, surrogate or policy table of its own): the others include Codes.hpp."""
    root = Path(snn_ipu.__file__).parent.parent
    table = re.compile(r"\b\w+\s*=\s*0\s*,\s*\w+\s*=\s*1\s*,\s*\w+\s*=\s*2\b")
    offenders = []
    for folder in ("codelets", "popops_ext"):
        for path in sorted((root / folder).rglob("*.[ch]pp")):
            if path.name != "Codes.hpp" and table.search(path.read_text()):
                offenders.append(str(path.relative_to(root)))
    assert offenders == []
