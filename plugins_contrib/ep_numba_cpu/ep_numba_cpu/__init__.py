"""A CPU execution provider that fuses elementwise chains (and elementwise tails after Conv,
MatMul and Gemm) into generated Numba kernels, and ships their machine code in EPContext models so
that loading a compiled model runs no LLVM compilation."""

EP_NAME = "NumbaCpuExecutionProvider"
__version__ = "0.1.0"
CONTEXT_FORMAT = "ep_numba_cpu/2"
