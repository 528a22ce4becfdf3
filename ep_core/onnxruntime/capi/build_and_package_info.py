"""The package name and the onnxruntime API version of ep-core's stand-in (onnxruntime's build
writes its own here)."""

from ep_core.onnxruntime.functions import API_VERSION

package_name = "ep-core"
__version__ = API_VERSION
