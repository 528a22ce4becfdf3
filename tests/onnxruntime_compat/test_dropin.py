"""The explicit ways to run onnxruntime code on ep-core: ``ep-core exec -- COMMAND`` and
``ep_core.onnxruntime.dropin.install()``. Never by default, never over an onnxruntime already imported."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

EP_CORE = str(Path(sys.executable).with_name("ep-core"))

PROBE = textwrap.dedent(
    """
    import json, sys
    import onnxruntime
    from onnxruntime.capi import onnxruntime_pybind11_state as state
    import ep_core.sdk.errors as errors
    print(json.dumps({
        "module": onnxruntime.__name__,
        "same_errors": state.InvalidArgument is errors.InvalidArgument and state.Fail is errors.Fail,
    }))
    sys.exit(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
    """
)


def _script(tmp_path: Path, text: str, name: str = "app.py") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_exec_runs_an_unchanged_program_on_ep_core_and_returns_its_exit_code(tmp_path: Path) -> None:
    app = _script(tmp_path, PROBE)
    done = subprocess.run([EP_CORE, "exec", "--", "python", str(app), "3"], capture_output=True, text=True)
    assert done.returncode == 3, done.stderr
    assert '"module": "ep_core.onnxruntime"' in done.stdout and '"same_errors": true' in done.stdout


def test_without_exec_the_same_program_gets_the_real_onnxruntime(tmp_path: Path) -> None:
    app = _script(tmp_path, PROBE)
    done = subprocess.run([sys.executable, str(app)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert '"module": "onnxruntime"' in done.stdout


def test_exec_reaches_the_python_processes_the_command_starts(tmp_path: Path) -> None:
    """A multiprocessing 'spawn' child is a new interpreter: it finds the stand-in through the
    environment ``ep-core exec`` set."""
    app = _script(
        tmp_path,
        textwrap.dedent(
            """
            import multiprocessing as mp

            def name(_):
                import onnxruntime
                return onnxruntime.__name__

            if __name__ == "__main__":
                with mp.get_context("spawn").Pool(1) as pool:
                    print(pool.map(name, [0])[0])
            """
        ),
    )
    done = subprocess.run([EP_CORE, "exec", "--", "python", str(app)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ep_core.onnxruntime"


def test_install_refuses_when_the_real_onnxruntime_is_already_imported(tmp_path: Path) -> None:
    code = textwrap.dedent(
        """
        import onnxruntime
        from ep_core.onnxruntime import dropin
        from ep_core.sdk.errors import Fail
        try:
            dropin.install()
        except Fail as exc:
            print("refused:", exc.message)
        print(onnxruntime.__name__, dropin.active())
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "refused: the real onnxruntime is already imported" in done.stdout
    assert done.stdout.strip().endswith("onnxruntime False")


def test_install_and_uninstall_in_process(tmp_path: Path) -> None:
    code = textwrap.dedent(
        """
        from ep_core.onnxruntime import dropin
        dropin.install()
        import onnxruntime
        print(onnxruntime.__name__)
        try:
            import onnxruntime.transformers.optimizer
        except ModuleNotFoundError as exc:
            print("missing:", exc.name)
        dropin.uninstall()
        import importlib, sys
        sys.modules.pop("onnxruntime", None)
        print(importlib.import_module("onnxruntime").__name__, dropin.active())
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:3] == [
        "ep_core.onnxruntime",
        "missing: onnxruntime.transformers.optimizer",
        "onnxruntime False",
    ]


def test_exec_without_a_command_is_a_usage_error() -> None:
    done = subprocess.run([EP_CORE, "exec"], capture_output=True, text=True)
    assert done.returncode == 2
    assert "give the command to run" in done.stderr
