"""Run code written for onnxruntime on ep-core, unchanged, when (and only when) asked.

``install()`` makes ``import onnxruntime`` and its submodules resolve to ``ep_core.onnxruntime`` in
this process (a meta-path finder that aliases the very module objects, so ``onnxruntime.capi...
InvalidArgument`` *is* ep-core's class). ``ep-core exec -- python app.py`` does it for a command and
the Python processes it starts, through a one-file ``onnxruntime`` package put first on
``PYTHONPATH`` for that command only.

Nothing happens by default: importing ep-core never touches ``onnxruntime``. ``install()`` refuses
when the real onnxruntime is already imported (objects of both would mix in one process), and says
which one is in use when asked (``active()``)."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.metadata
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import ModuleType

from ep_core.sdk.errors import Fail, NoSuchFile

TARGET = "onnxruntime"
PACKAGE = "ep_core.onnxruntime"
ENV = "EP_CORE_DROPIN"  # set to "1" in the environment of `ep-core exec`

# The one file of the shim package `ep-core exec` puts first on PYTHONPATH.
SHIM = '''"""ep-core's stand-in for onnxruntime, put first on PYTHONPATH by `ep-core exec`."""
import sys

from ep_core.onnxruntime import dropin

del sys.modules[__name__]  # this file steps aside: install() puts ep_core.onnxruntime in its place
dropin.install()
'''


def _metadata() -> str:
    """The METADATA of the ``onnxruntime`` distribution the drop-in stands for: programs check
    ``importlib.metadata.version("onnxruntime")`` before using it (Hugging Face optimum and
    transformers do); the version is the onnxruntime API mirrored, as ``onnxruntime.__version__``."""
    from ep_core.onnxruntime.functions import API_VERSION

    return (
        f"Metadata-Version: 2.1\nName: {TARGET}\nVersion: {API_VERSION}\n"
        "Summary: ep-core's onnxruntime drop-in (ep_core.onnxruntime): onnxruntime's Python API on ep-core's EPs\n"
    )


class _Distribution(importlib.metadata.Distribution):
    """``onnxruntime``'s distribution as the drop-in answers for it (see ``_metadata``)."""

    def read_text(self, filename: str) -> str | None:
        return {"METADATA": _metadata(), "top_level.txt": TARGET + "\n"}.get(filename)

    def locate_file(self, path: str | os.PathLike[str]) -> Path:
        return Path(__file__).parent / path


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds ``onnxruntime[.x]`` as ``ep_core.onnxruntime[.x]``: the same module objects."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != TARGET and not fullname.startswith(TARGET + "."):
            return None
        real = PACKAGE + fullname[len(TARGET) :]
        if importlib.util.find_spec(real) is None:
            raise ModuleNotFoundError(
                f"No module named {fullname!r}: ep-core's onnxruntime drop-in does not provide it "
                "(docs/onnxruntime-compat.md lists what it does)",
                name=fullname,
            )
        return importlib.util.spec_from_loader(fullname, self, origin=real)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        assert spec.origin is not None
        return importlib.import_module(spec.origin)

    def exec_module(self, module: ModuleType) -> None:
        """The module ran when ``create_module`` imported it under its own name."""

    def find_distributions(
        self, context: importlib.metadata.DistributionFinder.Context = importlib.metadata.DistributionFinder.Context()
    ) -> Iterator[importlib.metadata.Distribution]:
        """The ``onnxruntime`` distribution, found before an installed one (importlib.metadata asks
        the meta path's finders in order)."""
        name = context.name
        if name is None or name.lower().replace("-", "_").replace(".", "_") == TARGET:
            yield _Distribution()


def active() -> bool:
    """Whether ``import onnxruntime`` gives ep-core's drop-in in this process."""
    return any(isinstance(f, _Alias) for f in sys.meta_path)


def install() -> ModuleType:
    """Make ``import onnxruntime`` give ``ep_core.onnxruntime`` in this process; returns it.

    Call it before anything imports onnxruntime. Refused (``Fail``) when the real onnxruntime is
    already imported. Idempotent."""
    loaded = sys.modules.get(TARGET)
    if loaded is not None and not getattr(loaded, "__name__", "").startswith(PACKAGE):
        raise Fail(
            f"the real onnxruntime is already imported in this process (from {getattr(loaded, '__file__', '?')}); "
            "call ep_core.onnxruntime.dropin.install() before anything imports onnxruntime, or start the program "
            "with `ep-core exec -- python ...`"
        )
    if not active():
        sys.meta_path.insert(0, _Alias())
    module = importlib.import_module(PACKAGE)
    sys.modules[TARGET] = module
    return module


def uninstall() -> None:
    """Undo ``install()``: ``import onnxruntime`` finds the installed package again (modules
    already imported under the alias keep working)."""
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _Alias)]
    for name in [n for n in sys.modules if n == TARGET or n.startswith(TARGET + ".")]:
        if getattr(sys.modules[name], "__name__", "").startswith(PACKAGE):
            del sys.modules[name]


def run_command(argv: Sequence[str]) -> int:
    """Run ``argv`` with ``import onnxruntime`` resolving to ep-core in every Python process it
    starts; returns its exit code."""
    if not argv:
        raise Fail("give the command to run after `--`, e.g. `ep-core exec -- python app.py`")
    shim_root = Path(tempfile.mkdtemp(prefix="ep-core-dropin-"))
    try:
        (shim_root / TARGET).mkdir()
        (shim_root / TARGET / "__init__.py").write_text(SHIM, encoding="utf-8")
        from ep_core.onnxruntime.functions import API_VERSION

        info = shim_root / f"{TARGET}-{API_VERSION}.dist-info"
        info.mkdir()  # found by importlib.metadata before `import onnxruntime` installs the finder
        (info / "METADATA").write_text(_metadata(), encoding="utf-8")
        (info / "top_level.txt").write_text(TARGET + "\n", encoding="utf-8")
        paths = [str(shim_root), os.environ.get("PYTHONPATH", "")]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p), ENV: "1"}
        command = list(argv)
        if command[0] in ("python", "python3"):  # the Python ep-core runs on: it can import ep_core
            command[0] = sys.executable
        try:
            return subprocess.call(command, env=env)
        except FileNotFoundError:  # what the user typed: a usage error (exit 2 from the CLI)
            raise NoSuchFile(f"command not found: {command[0]!r}") from None
    finally:
        shutil.rmtree(shim_root, ignore_errors=True)
