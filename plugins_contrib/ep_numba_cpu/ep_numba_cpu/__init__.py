"""A CPU execution provider that fuses elementwise chains (and elementwise tails after Conv
and MatMul) into generated Numba kernels, and ships their machine code in EPContext models so
that loading a compiled model runs no LLVM compilation."""

EP_NAME = "NumbaCpuExecutionProvider"
__version__ = "0.1.0"
CONTEXT_FORMAT = "ep_numba_cpu/4"  # declarative specs with delegated nodes, signed; no source
# formats this EP refuses, with why (each message ends in "regenerate the context model")
OLD_FORMATS = {
    "ep_numba_cpu/1": "stored kernel source and unsigned machine code",
    "ep_numba_cpu/2": "stored kernel source and unsigned machine code",
    "ep_numba_cpu/3": "has no delegated node steps and Gemm steps this EP no longer runs",
}
