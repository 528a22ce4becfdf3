"""A CPU execution provider that fuses elementwise chains (and elementwise tails after Conv
and MatMul) into generated Numba kernels, and ships their machine code in EPContext models so
that loading a compiled model runs no LLVM compilation."""

EP_NAME = "NumbaCpuExecutionProvider"
__version__ = "0.1.0"
CONTEXT_FORMAT = "ep_numba_cpu/3"  # declarative specs, signed; no source
OLD_FORMATS = ("ep_numba_cpu/1", "ep_numba_cpu/2")  # stored kernel source: refused
