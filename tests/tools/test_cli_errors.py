"""Every way a person can get `ep-core` wrong: one line naming the fault and the way out, exit
code 2, no traceback (``--verbose`` adds it); with ``--json`` the error is JSON on stdout."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from _support.models import add_mul_chain, make_model
from onnx import TensorProto, helper

CPU = "CpuReferenceExecutionProvider"
NUMBA = "NumbaCpuExecutionProvider"


@pytest.fixture
def chain(tmp_path: Path) -> Path:
    path = tmp_path / "chain.onnx"
    path.write_bytes(add_mul_chain(2).SerializeToString())
    return path


CASES = [
    (["run", "/no/such/model.onnx"], "model file '/no/such/model.onnx' does not exist"),
    (["run", "README.md"], "is not a valid ONNX model"),
    (["run", "--zoo", "no_such_model"], "unknown zoo model 'no_such_model'; known: captcha_crnn"),
    (["run"], "give either MODEL or --zoo NAME"),
    (["run", "MODEL", "--zoo", "magika"], "give either MODEL or --zoo NAME"),
    (["run", "MODEL", "--dim", "N=abc"], "--dim 'N=abc': size 'abc' is not an integer"),
    (["run", "MODEL", "--dim", "batch=5"], "the model has no symbolic dim 'batch'"),
    (["run", "MODEL", "--dim", "x:0=5"], "axis 0 of input 'x' is fixed at 2"),
    (["run", "MODEL", "--dim", "x:7=5"], "input 'x' has rank 2, no axis 7"),
    (["run", "MODEL", "--dim", "nothing"], "must look like SYMBOL=N or INPUT:AXIS=N"),
    (["run", "MODEL", "--input", "x=/no/such.npy"], "file '/no/such.npy' does not exist"),
    (["run", "MODEL", "--input", "z=/no/such.npy"], "the model has no input 'z'; its inputs: x, y"),
    (["run", "MODEL", "--input", "x"], "must look like NAME=FILE"),
    (["run", "MODEL", "--input", "x=/no/*.npy"], "no file matches"),
    (["run", "MODEL", "--input", "x=BADNPY"], "not a readable .npy file"),
    (["run", "MODEL", "--input", "x=WRONGSHAPE"], "input 'x'"),
    (
        ["run", "MODEL", "--providers", "NoSuchExecutionProvider"],
        "unknown execution provider 'NoSuchExecutionProvider'",
    ),
    (["run", "MODEL", "--providers", ","], "names no provider"),
    (["run", "MODEL", "--config", "/no/such.toml"], "provider config file '/no/such.toml' does not exist"),
    (["run", "MODEL", "--provider-option", "oops"], "must look like EP:KEY=VALUE"),
    (["run", "MODEL", "--provider-option", f"{NUMBA}:parallel=1"], f"{NUMBA} is not among the providers"),
    (["run", "MODEL", "--providers", NUMBA, "--provider-option", f"{NUMBA}:bogus=1"], "has no option(s) ['bogus']"),
    (["run", "MODEL", "--providers", NUMBA, "--provider-option", f"{NUMBA}:parallel=7"], "parallel='7'"),
    (["run", "MODEL", "--repeat", "0"], "--repeat must be at least 1, got 0"),
    (["run", "MODEL", "--repeat", "abc"], "argument --repeat: invalid int value: 'abc'"),
    (["run", "MODEL", "--top-k", "0"], "--top-k must be at least 1"),
    (["run", "MODEL", "--save-outputs", "AFILE/out.npz"], "is not a writable folder"),
    (["run", "MODEL", "--no-such-flag"], "unrecognized arguments: --no-such-flag"),
    (["no-such-command"], "invalid choice: 'no-such-command'"),
    (["compile", "/no/such/model.onnx"], "does not exist"),
    (["compile", "MODEL", "--option", "nokey"], "must look like KEY=VALUE"),
    (["ctx-gen", "/no/such.onnx", "-e", NUMBA], "does not exist"),
    (["conformance", "--ep", "NoSuchExecutionProvider"], "unknown execution provider"),
]


def _args(args: list[str], chain: Path, tmp_path: Path) -> list[str]:
    import numpy as np

    bad = tmp_path / "bad.npy"
    bad.write_bytes(b"not numpy")
    wrong = tmp_path / "wrong.npy"
    np.save(wrong, np.zeros((5, 5), np.float32))
    afile = tmp_path / "afile"
    afile.write_text("x")
    subst = {
        "MODEL": str(chain),
        "x=BADNPY": f"x={bad}",
        "x=WRONGSHAPE": f"x={wrong}",
        "AFILE/out.npz": f"{afile}/o.npz",
    }
    return [subst.get(a, a) for a in args]


@pytest.mark.parametrize(("args", "message"), CASES, ids=[" ".join(a) for a, _ in CASES])
def test_a_user_error_is_one_line_and_exit_code_2(
    args: list[str], message: str, chain: Path, tmp_path: Path, cli: Callable
) -> None:
    r = cli(*_args(args, chain, tmp_path))
    assert r.code == 2, (r.out, r.err)
    lines = r.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("ep-core"), r.err
    assert ": error: " in lines[0] and message in lines[0], lines[0]
    assert "Traceback" not in r.err and r.out == ""


@pytest.mark.parametrize(
    ("args", "message"), CASES[:6] + CASES[-8:-4], ids=[" ".join(a) for a, _ in CASES[:6] + CASES[-8:-4]]
)
def test_json_errors_are_json_on_stdout(
    args: list[str], message: str, chain: Path, tmp_path: Path, cli: Callable
) -> None:
    r = cli(*_args(args, chain, tmp_path), "--json")
    assert r.code == 2 and r.err == ""
    error = json.loads(r.out)["error"]
    assert error["exit_code"] == 2 and message in error["message"] and error["code"]


def test_a_model_that_no_provider_can_run_exits_1_in_one_line(tmp_path: Path, cli: Callable) -> None:
    model = make_model(
        [helper.make_node("Frobnicate", ["x"], ["y"], domain="com.example")],
        [("x", TensorProto.FLOAT, [2])],
        [("y", TensorProto.FLOAT, [2])],
        extra_opsets=[("com.example", 1)],
    )
    path = tmp_path / "custom.onnx"
    path.write_bytes(model.SerializeToString())
    r = cli("run", str(path))
    assert r.code == 1 and len(r.err.splitlines()) == 1 and "no execution provider can run" in r.err
    r = cli("run", str(path), "--json")
    assert r.code == 1 and json.loads(r.out)["error"]["code"] == "NOT_IMPLEMENTED"


def test_verbose_shows_the_traceback(chain: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "EP_CORE_CONFIG"}
    cmd = [sys.executable, "-m", "ep_core.tools.cli", "run", str(chain), "--dim", "N=abc"]
    quiet = subprocess.run(cmd, capture_output=True, text=True, env=env)
    assert quiet.returncode == 2 and "Traceback" not in quiet.stderr and len(quiet.stderr.splitlines()) == 1
    loud = subprocess.run([*cmd, "--verbose"], capture_output=True, text=True, env=env)
    assert loud.returncode == 2 and "Traceback (most recent call last)" in loud.stderr
    assert loud.stderr.rstrip().splitlines()[-1] == quiet.stderr.rstrip()


def test_help_and_version_exit_0(cli: Callable) -> None:
    assert cli("--help").code == 0
    r = cli("run", "--help")
    assert r.code == 0 and "--provider-option" in r.out and "magika" in r.out
    assert cli("--version").code == 0
