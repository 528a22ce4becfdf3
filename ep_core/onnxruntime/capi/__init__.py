"""``onnxruntime.capi``: the modules applications import from below onnxruntime's package
(``onnxruntime_pybind11_state`` for the exceptions and enums above all), over ep-core. ep-core has
no C extension: these are Python modules with the names applications use."""
