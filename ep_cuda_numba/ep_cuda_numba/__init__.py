"""The Numba-CUDA execution provider: ONNX kernels written in Python with ``numba.cuda``.

Importing this package never imports numba: the factory probes GPUs and imports the CUDA stack
only when a session or ``get_ep_devices`` asks for them. Under ``NUMBA_ENABLE_CUDASIM=1`` the
EP offers one *simulated* device so the whole suite runs on machines without a GPU."""

EP_NAME = "NumbaCudaExecutionProvider"
__version__ = "0.2.0"
NVIDIA_VENDOR_ID = 0x10DE
