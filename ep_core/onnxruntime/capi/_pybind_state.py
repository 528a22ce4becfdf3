"""``onnxruntime.capi._pybind_state`` (``C`` in onnxruntime's own code): the extension module's
names, as ``onnxruntime_pybind11_state`` has them."""

from ep_core.onnxruntime.capi.onnxruntime_pybind11_state import *  # noqa: F403
from ep_core.onnxruntime.capi.onnxruntime_pybind11_state import __all__  # noqa: F401
