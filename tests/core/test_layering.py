"""The layering of issue 12, checked by import-linter with the contracts in pyproject.toml: ep_core.sdk
imports nothing from the runtime or the tools, the runtime nothing from the tools, EP packages only
ep_core.sdk (never the ep_core root), and no import cycles inside the runtime or the sdk. And the
core names no concrete EP: no code in ep_core spells an installed EP's name or package.

ep_core.optimizer, like ep_core.host, sits between the sdk and the runtime and imports only the sdk.

The same command runs in `make lint`. The planted cases run it on a copy of the tree with one
violating module added, so a contract that matched nothing would fail here."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from ep_core.sdk import ENTRY_POINT_GROUP

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
CONTRIB = "plugins_contrib/ep_numba_cpu"  # the contrib EP's source root: read it, not its installed copy
CUDA = "ep_cuda_numba"  # the Numba-CUDA EP's distribution root (its package is ep_cuda_numba/ep_cuda_numba)
PACKAGES = ("ep_core", "ep_cpu_reference", f"{CUDA}/ep_cuda_numba", f"{CONTRIB}/ep_numba_cpu")


def lint_imports(root: Path, *contracts: str) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` run from ``root`` as `make lint` runs it (limited to ``contracts`` if given)."""
    if not LINT_IMPORTS.is_file():
        pytest.fail(f"{LINT_IMPORTS} is missing: install the dev extra (`pip install -e '.[dev]'`)")
    args = [str(LINT_IMPORTS), "--no-cache", "--no-logo"]
    for c in contracts:
        args += ["--contract", c]
    env = {**os.environ, "PYTHONPATH": f"{CONTRIB}:{CUDA}"}
    return subprocess.run(args, cwd=root, env=env, capture_output=True, text=True, timeout=120)


def test_the_tree_keeps_every_import_contract() -> None:
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Contracts: 7 kept, 0 broken." in result.stdout


@pytest.fixture
def tree_copy(tmp_path: Path) -> Path:
    """The packages and pyproject.toml, copied to a fresh folder in the repository's layout."""
    for pkg in PACKAGES:
        shutil.copytree(ROOT / pkg, tmp_path / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    return tmp_path


TYPE_ONLY = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ep_core.runtime.eps import EpInstance\n"
PLANTED = [
    ("sdk", {"ep_core/sdk/_planted.py": "from ep_core.runtime import session\n"}),
    ("sdk", {"ep_core/sdk/_planted.py": "if False:\n    import ep_core.tools.zoo\n"}),
    ("runtime", {"ep_core/runtime/_planted.py": "def f():\n    from ep_core.tools import zoo\n"}),
    ("runtime", {"ep_core/runtime/_planted.py": "import ep_core.onnxruntime\n"}),
    ("host", {"ep_core/host/_planted.py": "from ep_core.runtime import options\n"}),
    ("host", {"ep_core/host/_planted.py": "import ep_core.optimizer\n"}),
    ("optimizer", {"ep_core/optimizer/_planted.py": "from ep_core.runtime import build\n"}),
    ("optimizer", {"ep_core/optimizer/_planted.py": "def f():\n    from ep_core.host import logs\n"}),
    ("sdk", {"ep_core/sdk/_planted.py": "from ep_core.optimizer import optimize_model\n"}),
    ("eps", {"ep_cpu_reference/_planted.py": "from ep_core.host import threads\n"}),
    ("eps", {f"{CONTRIB}/ep_numba_cpu/_planted.py": "from ep_core.runtime.session import InferenceSession\n"}),
    ("eps", {f"{CUDA}/ep_cuda_numba/_planted.py": TYPE_ONLY}),  # TYPE_CHECKING imports count (see pyproject.toml)
    ("eps-root", {"ep_cpu_reference/kernels/_planted.py": "import ep_core\n"}),
    ("eps-root", {f"{CONTRIB}/ep_numba_cpu/_planted.py": "from ep_core import Tensor\n"}),
    (
        "acyclic",
        {
            "ep_core/runtime/_planted_a.py": "from ep_core.runtime import _planted_b\n",
            "ep_core/runtime/_planted_b.py": "def f():\n    from ep_core.runtime import _planted_a\n",
        },
    ),
]


@pytest.mark.parametrize(("contract", "files"), PLANTED, ids=[f"{c}-{i}" for i, (c, _) in enumerate(PLANTED)])
def test_a_planted_violation_breaks_its_contract(tree_copy: Path, contract: str, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (tree_copy / rel).write_text(text)
    result = lint_imports(tree_copy, contract)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "0 kept, 1 broken" in result.stdout
    assert "_planted" in result.stdout, result.stdout  # the violation named is the planted one


def test_the_copy_alone_keeps_the_planted_contracts(tree_copy: Path) -> None:
    """Without a plant the layering contracts hold on the copy: the breaks above are the plants'."""
    result = lint_imports(tree_copy, "sdk", "host", "optimizer", "runtime", "eps", "eps-root")
    assert result.returncode == 0, result.stdout + result.stderr


def installed_ep_names() -> set[str]:
    """Every installed EP's registered name and top-level package, from the entry points."""
    eps = entry_points(group=ENTRY_POINT_GROUP)
    return {ep.name for ep in eps} | {ep.value.split(".")[0].split(":")[0] for ep in eps}


def concrete_ep_mentions(source: str, names: set[str]) -> list[str]:
    """String literals (docstrings aside: an example in prose is not logic) and imports that name one
    of ``names``, as 'line: text'."""
    tree = ast.parse(source)
    docstrings = {
        id(body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and (body := node.body)
        and isinstance(body[0], ast.Expr)
        and isinstance(body[0].value, ast.Constant)
    }
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            text = node.value
        elif isinstance(node, ast.Import):
            text = " ".join(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            text = node.module or ""
        else:
            continue
        found += [f"{node.lineno}: {text[:80]!r} names {n}" for n in sorted(names) if n in text]
    return found


def test_the_core_names_no_concrete_ep() -> None:
    names = installed_ep_names()
    assert {"CpuReferenceExecutionProvider", "ep_cpu_reference"} <= names  # the built-in EP is installed
    found = {
        str(path.relative_to(ROOT)): hits
        for path in sorted((ROOT / "ep_core").rglob("*.py"))
        if (hits := concrete_ep_mentions(path.read_text(encoding="utf-8"), names))
    }
    assert found == {}, "take EP names from the installed EPs or a file under docs/, not from ep_core's code"


def test_a_named_ep_is_found_outside_docstrings_only() -> None:
    source = (
        '"""Runs on CpuReferenceExecutionProvider."""\n'
        "import ep_cpu_reference.factory\n"
        "def f():\n"
        '    """e.g. CpuReferenceExecutionProvider"""\n'
        '    return "CpuReferenceExecutionProvider"\n'
    )
    found = concrete_ep_mentions(source, {"CpuReferenceExecutionProvider", "ep_cpu_reference"})
    assert found == [
        "2: 'ep_cpu_reference.factory' names ep_cpu_reference",
        "5: 'CpuReferenceExecutionProvider' names CpuReferenceExecutionProvider",
    ]
