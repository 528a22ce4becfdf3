"""The compile API: build a compiled (EPContext) model ahead of time, like ORT's
``ModelCompilationOptions`` + ``CompileModel``, without keeping a session around."""

from __future__ import annotations

import os
from collections.abc import Sequence
from enum import IntFlag
from pathlib import Path
from typing import Any

from ep_core.runtime.context_write import CompileRequest
from ep_core.runtime.options import SessionOptions
from ep_core.sdk.epcontext.output import EMBED_KEY, EXTERNAL_INIT_KEY, FILE_PATH_KEY, OVERWRITE_KEY
from ep_core.sdk.errors import InvalidArgument


class CompileApiFlags(IntFlag):
    """How ``ModelCompiler`` treats the two questionable outcomes."""

    NONE = 0
    ERROR_IF_NO_NODES_COMPILED = 1  # fail when no EP produced an EPContext node
    ERROR_IF_OUTPUT_FILE_EXISTS = 2  # fail instead of replacing an existing output


class ModelCompiler:
    """Compiles ``model`` (path, bytes or ModelProto) on the EPs chosen by ``sess_options`` /
    ``providers`` / ``config`` and writes the EPContext model.

    ``embed_compiled_data_into_model`` puts context payloads in the model (required for
    ``compile_to_bytes``); ``external_initializers_file_path`` puts every initializer of the
    compiled model in that file (relative to the output's folder)."""

    def __init__(
        self,
        sess_options: SessionOptions | None,
        model: str | os.PathLike[str] | bytes | Any,
        embed_compiled_data_into_model: bool = False,
        external_initializers_file_path: str | os.PathLike[str] | None = None,
        flags: CompileApiFlags = CompileApiFlags.ERROR_IF_NO_NODES_COMPILED
        | CompileApiFlags.ERROR_IF_OUTPUT_FILE_EXISTS,
        *,
        providers: Sequence[Any] | None = None,
        config: Any = None,
        registry: Any = None,
    ) -> None:
        self.options = sess_options.model_copy(deep=True) if sess_options is not None else SessionOptions()
        self.model = model
        self.embed = bool(embed_compiled_data_into_model)
        self.external_initializers = (
            None if external_initializers_file_path is None else str(external_initializers_file_path)
        )
        self.flags = CompileApiFlags(flags)
        self.providers = providers
        self.config = config
        self.registry = registry
        self.nodes_compiled = 0

    def _options_for(self, output: Path | None) -> SessionOptions:
        opts = self.options.model_copy(deep=True)
        opts.add_session_config_entry("ep.context_enable", "1")
        opts.add_session_config_entry(EMBED_KEY, "1" if self.embed else "0")
        if output is not None:
            opts.add_session_config_entry(FILE_PATH_KEY, str(output))
        overwrite = not (self.flags & CompileApiFlags.ERROR_IF_OUTPUT_FILE_EXISTS)
        opts.add_session_config_entry(OVERWRITE_KEY, "1" if overwrite else "0")
        if self.external_initializers is not None:
            if output is None:
                raise InvalidArgument(
                    "external_initializers_file_path needs an output folder: use compile_to_file, or leave it unset"
                )
            ext = Path(self.external_initializers)
            if ext.is_absolute():
                try:
                    ext = ext.resolve().relative_to(output.resolve().parent)
                except ValueError:
                    raise InvalidArgument(
                        f"external_initializers_file_path {self.external_initializers!r} must be in the output's folder "
                        f"{str(output.parent)!r}"
                    ) from None
            opts.add_session_config_entry(EXTERNAL_INIT_KEY, ext.as_posix())
        return opts

    def _run(self, output: Path | None) -> CompileRequest:
        from ep_core.runtime.build import build, resolve_request
        from ep_core.runtime.discover import get_registry

        request = CompileRequest(
            error_if_no_nodes_compiled=bool(self.flags & CompileApiFlags.ERROR_IF_NO_NODES_COMPILED),
            error_if_output_exists=bool(self.flags & CompileApiFlags.ERROR_IF_OUTPUT_FILE_EXISTS),
            to_bytes=output is None,
        )
        build_request = resolve_request(
            self.model, self._options_for(output), self.providers, None, self.config, self.registry or get_registry()
        )
        build_request.compile = request
        build(build_request).release()
        self.nodes_compiled = request.nodes_compiled
        return request

    def compile_to_file(self, path: str | os.PathLike[str]) -> str:
        """Compile and write the model to ``path`` (context binaries beside it); returns the path."""
        out = Path(path)
        if out.is_dir():
            raise InvalidArgument(f"compile_to_file: {str(out)!r} is a folder; give the .onnx file's path")
        self._run(out)
        return str(out)

    def compile_to_bytes(self) -> bytes:
        """Compile and return the model's bytes; the context must be embedded."""
        if not self.embed:
            raise InvalidArgument(
                "compile_to_bytes needs embed_compiled_data_into_model=True: a model returned as bytes has no folder "
                "for a context binary"
            )
        request = self._run(None)
        assert request.result_bytes is not None
        return request.result_bytes
