"""``onnxruntime.ModelCompiler`` over ep-core's compile API (``ep_core.runtime.compile_api``):
onnxruntime's arguments, defaults (no flags, optimizations off) and output naming."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ep_core.onnxruntime.refusals import refuse
from ep_core.onnxruntime.session import _for_ep_core
from ep_core.runtime import compile_api
from ep_core.runtime.compile_api import CompileApiFlags as OrtCompileApiFlags
from ep_core.runtime.options import GraphOptimizationLevel, SessionOptions
from ep_core.sdk.errors import InvalidArgument


class ModelCompiler(compile_api.ModelCompiler):
    """``ModelCompiler(sess_options, input_model_path_or_bytes, embed_compiled_data_into_model,
    external_initializers_file_path, external_initializers_size_threshold, flags,
    graph_optimization_level, get_initializer_location_func)``: the EPs come from
    ``sess_options`` (added devices or providers, a policy)."""

    def __init__(
        self,
        sess_options: SessionOptions,
        input_model_path_or_bytes: str | os.PathLike[str] | bytes,
        embed_compiled_data_into_model: bool = False,
        external_initializers_file_path: str | os.PathLike[str] | None = None,
        external_initializers_size_threshold: int = 1024,
        flags: int = OrtCompileApiFlags.NONE,
        graph_optimization_level: GraphOptimizationLevel = GraphOptimizationLevel.ORT_DISABLE_ALL,
        get_initializer_location_func: Callable[..., Any] | None = None,
    ) -> None:
        if isinstance(input_model_path_or_bytes, (str, os.PathLike)):
            if not os.fspath(input_model_path_or_bytes):
                raise ValueError("Input model path is empty")
            self._input_path: str | None = os.fspath(input_model_path_or_bytes)
        elif isinstance(input_model_path_or_bytes, bytes):
            if not input_model_path_or_bytes:
                raise ValueError("Input model bytes array is empty")
            self._input_path = None
        else:
            raise TypeError(f"Unable to load from type '{type(input_model_path_or_bytes)}'")
        if get_initializer_location_func is not None:
            refuse("ModelCompiler(get_initializer_location_func=...)")
        if external_initializers_file_path and external_initializers_size_threshold > 0:
            refuse("ModelCompiler(external_initializers_size_threshold=...)")
        options = (_for_ep_core(sess_options) or SessionOptions()).model_copy(deep=True)
        options.graph_optimization_level = GraphOptimizationLevel(graph_optimization_level)
        super().__init__(
            options,
            input_model_path_or_bytes,
            embed_compiled_data_into_model,
            os.fspath(external_initializers_file_path) if external_initializers_file_path else None,
            OrtCompileApiFlags(int(flags)),
        )

    def compile_to_file(self, output_model_path: str | os.PathLike[str] | None = None) -> str:  # type: ignore[override]
        """Compile and write the model; without a path, beside the input as ``<name>_ctx.onnx``."""
        if output_model_path is None:
            if self._input_path is None:
                raise InvalidArgument("compile_to_file needs an output path when the input model was given as bytes")
            src = Path(self._input_path)
            output_model_path = src.with_name(f"{src.stem}_ctx.onnx")
        if not isinstance(output_model_path, (str, os.PathLike)):
            raise TypeError(f"Output model's filepath is of unexpected type '{type(output_model_path)}'")
        return super().compile_to_file(output_model_path)

    def compile_to_stream(self, write_function: Callable[[bytes], Any]) -> None:
        """Compile and hand the model's bytes to ``write_function`` (the context embedded)."""
        write_function(self.compile_to_bytes())

    def set_ep_context_data_write_func(self, write_func: Callable[..., Any]) -> None:
        refuse("ModelCompiler.set_ep_context_data_write_func")

    def clear_ep_context_data_write_func(self) -> None:
        """Nothing to clear: no write function can be set (``set_ep_context_data_write_func``)."""


__all__ = ["ModelCompiler", "OrtCompileApiFlags"]
