"""The NumPy reference execution provider: the oracle for parity checks and the CPU fallback."""

EP_NAME = "CpuReferenceExecutionProvider"
__version__ = "0.1.0"
