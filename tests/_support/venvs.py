"""A private venv that sees the test environment's packages after its own: installs into it test
how a distribution installs and upgrades without changing the environment the suite runs in."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path


def child_venv(folder: Path) -> tuple[str, Path]:
    """A venv at ``folder`` without pip (this environment's pip installs into it with ``--python``);
    returns its python and its site-packages, where a .pth appends this environment's packages."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    python = str(folder / "bin" / "python")
    site = Path(
        subprocess.run(
            [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    (site / "zz_parent.pth").write_text(f"import site; site.addsitedir({sysconfig.get_paths()['purelib']!r})\n")
    return python, site
