"""Where an EPContext model is being written, as EPs see it while they build their context nodes.

The core passes a ``ContextOutput`` to ``ep_get_ep_context_nodes(ep, output)``. It stages every
file an EP writes and commits them together with the model, so a failed generation leaves nothing
behind."""

from __future__ import annotations

import contextlib
import os
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ep_core.sdk.errors import ConfigError, InvalidArgument

if TYPE_CHECKING:
    from ep_core.sdk.config import SessionConfig

FILE_PATH_KEY = "ep.context_file_path"
EMBED_KEY = "ep.context_embed_mode"
PREFIX_KEY = "ep.context_node_name_prefix"
EXTERNAL_INIT_KEY = "ep.context_model_external_initializers_file_name"
OVERWRITE_KEY = "ep.context_overwrite"


@dataclass
class ContextOutput:
    """Where the context model goes, for the EPs building their EPContext nodes (the ``output``
    argument of ``ep_get_ep_context_nodes``)."""

    model_path: Path | None  # None when the model goes to bytes
    folder: Path | None
    model_name: str  # stem of the source model, for ``[model_name]_[ep].bin``
    embed_mode: int
    node_name_prefix: str
    options: "SessionConfig"
    source_model_filename: str = ""
    _pending: list[tuple[Path, Path]] = field(default_factory=list)
    _committed: list[Path] = field(default_factory=list)

    def binary_name(self, ep_name: str) -> str:
        """The design's context binary name: ``[model_name]_[ep].bin``."""
        return f"{self.model_name}_{ep_name}.bin"

    def write_file(self, relative: str | os.PathLike[str], data: bytes) -> Path:
        """Stage a context file beside the model (subfolders allowed); it appears under its final
        name only when the whole model is written. Returns the final path."""
        if self.folder is None:
            raise InvalidArgument(
                "a context binary needs a folder, but the model is compiled to bytes: embed the context "
                f"({EMBED_KEY}=1 / embed_compiled_data_into_model=True)"
            )
        rel = Path(relative)
        if rel.is_absolute() or ".." in rel.parts:
            raise InvalidArgument(f"context file {str(relative)!r} must be a relative path inside {str(self.folder)!r}")
        final = self.folder / rel
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = final.with_name(f".{final.name}.tmp-{uuid.uuid4().hex[:12]}")
        with open(tmp, "wb") as fh:
            fh.write(data)
        self._pending.append((tmp, final))
        return final

    def write_absolute(self, final: Path, data: bytes) -> Path:
        """Stage a file at an absolute path inside ``folder`` (shared binaries named by an earlier
        session of the group)."""
        if self.folder is None:
            raise InvalidArgument("a context binary needs a folder, but the model is compiled to bytes")
        return self.write_file(os.path.relpath(final, self.folder), data)

    def relative(self, path: Path) -> str:
        """``path`` relative to the model's folder, for ``ep_cache_context``; refuses a path outside."""
        assert self.folder is not None
        rel = os.path.relpath(Path(path).resolve(), self.folder.resolve())
        if rel.startswith(".."):
            raise ConfigError(
                f"context binary {str(path)!r} is outside the folder of the context model {str(self.folder)!r}; "
                f"write every model of a sharing group to one folder ({FILE_PATH_KEY})"
            )
        return Path(rel).as_posix()

    def _commit(self) -> None:
        for tmp, final in self._pending:
            os.replace(tmp, final)
            self._committed.append(final)
        self._pending.clear()

    def _abort(self) -> None:
        for tmp, _ in self._pending:
            with contextlib.suppress(OSError):
                tmp.unlink()
        self._pending.clear()
