"""The graph optimizer a session runs once the model is checked: ``graph_optimization_level`` with
onnxruntime's levels, built on onnxscript's optimizer and rewriter (docs/optimizer.md).

Below the runtime, beside the sdk and the host services: imports nothing of ep-core but the sdk,
and onnxscript only when a model is optimized, so ``import ep_core`` stays light. The runtime
calls ``optimize_model`` in one place (``build.py``) with a predicate saying which ops the
session's first EP has kernels for: a fusion into an op it lacks is not made."""

from ep_core.optimizer.api import DISABLE_ALL, ENABLE_BASIC, ENABLE_EXTENDED, SupportsOp, optimize_model

__all__ = ["DISABLE_ALL", "ENABLE_BASIC", "ENABLE_EXTENDED", "SupportsOp", "optimize_model"]
