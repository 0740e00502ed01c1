"""The shipped .pyi stubs describe the compiled module exactly: every name, every
parameter name and default, read-only vs writable attributes, and py.typed."""

from __future__ import annotations

import ast
import importlib.resources
import inspect
import os
import pathlib
import re
import subprocess
import sys
from typing import Tuple

import gpushare as gs
import gpushare._core as core
import pytest

PACKAGE = pathlib.Path(gs.__file__).parent
STUB = PACKAGE / "_core.pyi"

# Members pybind11 or pickling add to every class; not part of the API.
IGNORED = {"__repr__", "__getstate__", "__setstate__", "__hash__", "_pybind11_conduit_v1_",
           "__doc__", "__module__", "__dict__", "__weakref__", "__new__"}

# A parameter as (name, has_default, keyword_only).
Param = Tuple[str, bool, bool]


def split_top_level(text: str) -> list[str]:
    """Splits a parameter list at commas outside brackets and quotes."""
    parts, depth, quote, start = [], 0, "", 0
    for i, ch in enumerate(text):
        if quote:
            if ch == quote and text[i - 1] != "\\":
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    if text[start:].strip():
        parts.append(text[start:].strip())
    return parts


def runtime_signatures(name: str, fn: object) -> list[list[Param]]:
    """The signatures pybind11 writes at the top of a function's docstring."""
    doc = getattr(fn, "__doc__", None) or ""
    sigs = []
    for line in doc.splitlines():
        m = re.match(rf"^(?:\d+\. )?{re.escape(name)}\((.*)\) -> .*$", line.strip())
        if not m:
            continue
        params, kw_only = [], False
        for part in split_top_level(m.group(1)):
            if part == "*":
                kw_only = True
                continue
            pname = re.split(r"[:=]", part, maxsplit=1)[0].strip()
            if pname in ("self", "cls"):
                continue
            params.append((pname, " = " in part, kw_only))
        sigs.append(params)
    if not sigs:  # A function written in Python.
        sig = inspect.signature(fn)  # type: ignore[arg-type]
        sigs.append([(p.name, p.default is not p.empty, p.kind is p.KEYWORD_ONLY)
                     for p in list(sig.parameters.values())[1:]])
    return sigs


def stub_params(fn: ast.FunctionDef, method: bool) -> list[Param]:
    a = fn.args
    positional = a.posonlyargs + a.args
    if method and not any(isinstance(d, ast.Name) and d.id == "staticmethod"
                          for d in fn.decorator_list):
        positional = positional[1:]
    first_default = len(positional) - len(a.defaults)
    out = [(p.arg, i >= first_default, False) for i, p in enumerate(positional)]
    out += [(p.arg, d is not None, True) for p, d in zip(a.kwonlyargs, a.kw_defaults)]
    return out


def is_property(fn: ast.FunctionDef) -> bool:
    return any(isinstance(d, ast.Name) and d.id == "property" for d in fn.decorator_list)


def parse_stub() -> tuple[dict, dict]:
    """(module-level names -> node list, class name -> {member -> node list})."""
    tree = ast.parse(STUB.read_text())
    names: dict[str, list[ast.AST]] = {}
    classes: dict[str, dict[str, list[ast.AST]]] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            members: dict[str, list[ast.AST]] = {}
            for item in node.body:
                if isinstance(item, ast.FunctionDef):
                    members.setdefault(item.name, []).append(item)
                elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    members.setdefault(item.target.id, []).append(item)
            classes[node.name] = members
            names[node.name] = [node]
        elif isinstance(node, ast.FunctionDef):
            names.setdefault(node.name, []).append(node)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names[node.target.id] = [node]
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    names[target.id] = [node]
    return names, classes


def runtime_members(cls: type) -> dict[str, object]:
    """What the compiled module (or the package) defines on `cls` itself."""
    out = {}
    for klass in cls.__mro__:
        if klass.__module__.split(".")[0] != "gpushare":
            continue
        for key, value in vars(klass).items():
            if key == "__init__" and (value.__doc__ or "").startswith("Initialize self."):
                continue  # No constructor: pybind11's stand-in that raises TypeError.
            if key not in IGNORED and key not in out:
                out[key] = value
    return out


def test_py_typed_and_stub_are_installed() -> None:
    files = importlib.resources.files("gpushare")
    assert files.joinpath("py.typed").is_file()
    assert files.joinpath("_core.pyi").is_file()


def test_every_runtime_name_is_in_the_stub_and_back() -> None:
    names, _ = parse_stub()
    runtime = {n for n in dir(core) if not n.startswith("__")}
    stub = {n for n in names if not (n.startswith("_") and n.endswith("Like"))}
    assert runtime - stub == set(), "missing from _core.pyi"
    assert stub - runtime == set(), "in _core.pyi but not in the module"
    # The rest of gs.__all__ is written in Python (typed in its own module).
    python_only = {n for n in set(gs.__all__) - runtime
                   if getattr(gs, n).__module__.startswith("gpushare._")}
    assert set(gs.__all__) - python_only <= runtime
    assert python_only == {"sweep"}


def test_every_member_and_signature_matches_the_stub() -> None:
    names, classes = parse_stub()
    problems = []
    for cname, stub_members in classes.items():
        cls = getattr(core, cname)
        if issubclass(cls, BaseException):
            continue
        members = runtime_members(cls)
        for key in sorted(set(members) - set(stub_members)):
            problems.append(f"{cname}.{key}: not in the stub")
        for key in sorted(set(stub_members) - set(members)):
            problems.append(f"{cname}.{key}: in the stub only")
        for key in sorted(set(members) & set(stub_members)):
            value, stubbed = members[key], stub_members[key]
            if isinstance(value, property):
                writable = value.fset is not None
                stub_writable = isinstance(stubbed[0], ast.AnnAssign)
                if writable != stub_writable or not (
                        stub_writable or is_property(stubbed[0])):  # type: ignore[arg-type]
                    problems.append(f"{cname}.{key}: writable={writable} but the stub differs")
                continue
            fn = getattr(cls, key)
            want = runtime_signatures(key, fn)
            have = [stub_params(f, method=True) for f in stubbed
                    if isinstance(f, ast.FunctionDef)]
            if sorted(want) != sorted(have):
                problems.append(f"{cname}.{key}: runtime {want} != stub {have}")
    for fname, nodes in names.items():
        fn = getattr(core, fname, None)
        if not callable(fn) or isinstance(fn, type):
            continue
        want = runtime_signatures(fname, fn)
        have = [stub_params(f, method=False) for f in nodes if isinstance(f, ast.FunctionDef)]
        if sorted(want) != sorted(have):
            problems.append(f"{fname}: runtime {want} != stub {have}")
    assert problems == []


def test_the_signature_check_catches_a_wrong_stub() -> None:
    fn = ast.parse("def place(self, request, policy='binpack'): ...").body[0]
    want = runtime_signatures("place", gs.Cluster.place)
    assert want == [[("request", False, False), ("policy", True, False)]]
    assert stub_params(fn, method=True) == want[0]  # type: ignore[arg-type]
    wrong = ast.parse("def place(self, req, policy='binpack'): ...").body[0]
    assert stub_params(wrong, method=True) != want[0]  # type: ignore[arg-type]


def test_mypy_stubtest_agrees(tmp_path: pathlib.Path) -> None:
    pytest.importorskip("mypy", reason="mypy is not installed")
    allowlist = pathlib.Path(__file__).with_name("stubtest_allowlist.txt")
    # mypy's cache goes to a temporary directory, not into the source tree.
    env = dict(os.environ, MYPY_CACHE_DIR=str(tmp_path / "mypy_cache"))
    run = subprocess.run(
        [sys.executable, "-m", "mypy.stubtest", "gpushare", "--allowlist", str(allowlist)],
        capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env)
    assert run.returncode == 0, run.stdout + run.stderr
