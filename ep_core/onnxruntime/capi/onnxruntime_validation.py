"""``onnxruntime.capi.onnxruntime_validation``: the platform and package checks onnxruntime runs at
import. ep-core is pure Python and needs none of onnxruntime's native-library checks."""

from __future__ import annotations

import platform
import warnings


def check_distro_info() -> None:
    """Warn on a platform Python packages of ep-core are not tested on (onnxruntime warns on
    platforms its binaries do not support; ep-core has no binaries, so only the OS family matters)."""
    system = platform.system().lower()
    if system not in ("linux", "darwin", "windows"):
        warnings.warn(f"Unsupported platform ({system}). ep-core is tested on Linux, macOS and Windows.", stacklevel=2)


def get_package_name_and_version_info() -> tuple[str, str, str]:
    """(package name, onnxruntime API version, CUDA version of the build: '' as ep-core has no build)."""
    from ep_core.onnxruntime.capi.build_and_package_info import __version__, package_name

    return package_name, __version__, ""


def check_training_module() -> tuple[bool, str, str, str]:
    """(has ORTModule, package name, version, CUDA version): ep-core has no training module."""
    package_name, version, cuda_version = get_package_name_and_version_info()
    return False, package_name, version, cuda_version
