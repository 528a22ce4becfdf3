"""Where an EPContext model is being written, as EPs see it while they build their context nodes.

The core passes a ``ContextOutput`` to ``ep_get_ep_context_nodes(ep, output)``. Every file of a
generation (an EP's context files, the external initializers, the model) is claimed here before a
byte of it is written: its path, symlinks resolved, must lie in the output folder and must not be
the source model, its external data, another file of this generation, or an existing file unless
``ep.context_overwrite=1``. Files are staged as ``.epctx-<host>-<pid>-<random>-<name>`` and renamed
at commit (the model last, after re-checking); a later generation removes what a killed one left."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import secrets
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ep_core.sdk.errors import ConfigError, EpCoreError, Fail, InvalidArgument

if TYPE_CHECKING:
    from ep_core.sdk.config import SessionConfig

FILE_PATH_KEY = "ep.context_file_path"
EMBED_KEY = "ep.context_embed_mode"
PREFIX_KEY = "ep.context_node_name_prefix"
EXTERNAL_INIT_KEY = "ep.context_model_external_initializers_file_name"
OVERWRITE_KEY = "ep.context_overwrite"

STAGED_PREFIX = ".epctx-"
_HOST = hashlib.sha256(socket.gethostname().encode("utf-8", "surrogateescape")).hexdigest()[:8]
_STAGED = re.compile(r"\.epctx-([0-9a-f]{8})-([0-9]{1,10})-[0-9a-f]{12}-")
_NAME_MAX = 255  # bytes per path component on common file systems


def staged_name(final_name: str) -> str:
    """The staging name of ``final_name``: this host, this process and a random part, so a later
    run can tell a killed generation's leftovers from a live one's."""
    return f"{STAGED_PREFIX}{_HOST}-{os.getpid()}-{secrets.token_hex(6)}-{final_name[:40]}"


def remove_stale_staged(folder: Path) -> list[Path]:
    """Remove the staged files a killed generation left in ``folder``: regular files with a staging
    name of this host whose process no longer exists. Never a live process's files, nothing else."""
    removed: list[Path] = []
    try:
        entries = list(os.scandir(folder))
    except (FileNotFoundError, NotADirectoryError):
        return removed
    for entry in entries:
        m = _STAGED.match(entry.name)
        if m is None or m.group(1) != _HOST or not entry.is_file(follow_symlinks=False):
            continue
        if not _process_alive(int(m.group(2))):
            with contextlib.suppress(FileNotFoundError):  # another generation may be sweeping too
                os.unlink(entry.path)
            removed.append(Path(entry.path))
    return removed


def _process_alive(pid: int) -> bool:
    if pid <= 0 or pid == os.getpid() or os.name == "nt":  # Windows' os.kill would end the process
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True


def check_name(relative: str | os.PathLike[str], option: str) -> Path:
    """A file name that goes into the model: relative, inside the folder, valid UTF-8, no control
    characters, components the file system can hold."""
    text = os.fspath(relative)
    rel = Path(text)
    why = ""
    if not rel.parts or rel.name in ("", ".", "..") or rel.is_absolute() or ".." in rel.parts:
        why = "must be a file name relative to the context model's folder, without '..'"
    elif any(ord(c) < 32 or ord(c) == 127 for c in text):
        why = "contains a control character"
    else:
        try:
            parts = [p.encode("utf-8") for p in rel.parts]
        except UnicodeEncodeError:
            why = "is not valid UTF-8 (file names are stored in the model as text)"
        else:
            if any(len(p) > _NAME_MAX for p in parts):
                why = f"has a component longer than {_NAME_MAX} bytes"
    if why:
        raise InvalidArgument(f"context file name {text!r} ({option}) {why}; choose another name")
    return rel


def os_error(exc: OSError, path: Path | str, option: str) -> EpCoreError:
    """An OSError of writing ``path`` as a typed error naming the file and the option to change."""
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return InvalidArgument(f"cannot write {str(path)!r}: the folder is not writable ({exc.strerror}); set {option}")
    if exc.errno in (errno.ENOTDIR, errno.EEXIST, errno.ENAMETOOLONG, errno.EINVAL):
        return InvalidArgument(f"cannot write {str(path)!r}: {exc.strerror}; set {option} to another path")
    return Fail(f"writing {str(path)!r} failed: {exc}")


@dataclass
class ContextOutput:
    """Where the context model goes, for the EPs building their EPContext nodes (the ``output``
    argument of ``ep_get_ep_context_nodes``)."""

    model_path: Path | None  # None when the model goes to bytes
    folder: Path | None  # resolved (symlinks followed)
    model_name: str  # stem of the source model, for ``[model_name]_[ep].bin``
    embed_mode: int
    node_name_prefix: str
    options: "SessionConfig"
    source_model_filename: str = ""
    overwrite: bool = False  # ep.context_overwrite=1: existing files in the folder may be replaced
    overwrite_hint: str = f"set {OVERWRITE_KEY}=1"  # how the caller allows it (the compile API: its flag)
    protected: dict[str, str] = field(default_factory=dict)  # real path -> what it is (source, its data)
    writer: str = "an execution provider"  # whose files are staged now (the core sets the EP's name)
    _claims: dict[str, str] = field(default_factory=dict)  # real path -> which output of this run
    _pending: list[tuple[Path, Path]] = field(default_factory=list)
    _committed: list[Path] = field(default_factory=list)
    _made_dirs: list[Path] = field(default_factory=list)
    _swept: set[Path] = field(default_factory=set)

    def binary_name(self, ep_name: str) -> str:
        """The design's context binary name: ``[model_name]_[ep].bin``."""
        return f"{self.model_name}_{ep_name}.bin"

    def write_file(self, relative: str | os.PathLike[str], data: bytes) -> Path:
        """Stage a context file beside the model (subfolders allowed); it appears under its final
        name only when the whole model is written. Returns the final path. Refuses (before writing)
        a file outside the folder, the source model or its data, a file this generation already
        writes, or an existing file without ``ep.context_overwrite=1``."""
        folder = self._need_folder()
        final = folder / check_name(relative, FILE_PATH_KEY)
        self._claim(final, f"context file {str(relative)!r} of {self.writer}", FILE_PATH_KEY)
        return self._stage(final, data)

    def write_absolute(self, final: Path, data: bytes) -> Path:
        """Stage a file at an absolute path inside ``folder`` (shared binaries named by an earlier
        session of the group)."""
        return self.write_file(os.path.relpath(final, self._need_folder()), data)

    def relative(self, path: Path) -> str:
        """``path`` relative to the model's folder, for ``ep_cache_context``. Refuses a path outside,
        or one this generation may not write (a file of a sharing group's last session)."""
        folder = self._need_folder()
        rel = os.path.relpath(os.path.realpath(path), folder)
        if rel.startswith(".."):
            raise ConfigError(
                f"context binary {str(path)!r} is outside the folder of the context model {str(folder)!r}; "
                f"write every model of a sharing group to one folder ({FILE_PATH_KEY})"
            )
        if os.path.realpath(path) not in self._claims:
            self._refused(Path(path), f"context file {str(path)!r} of {self.writer}", FILE_PATH_KEY)
        return Path(rel).as_posix()

    def _need_folder(self) -> Path:
        if self.folder is None:
            raise InvalidArgument(
                "a context binary needs a folder, but the model is compiled to bytes: embed the context "
                f"({EMBED_KEY}=1 / embed_compiled_data_into_model=True)"
            )
        return self.folder

    def _refused(self, final: Path, what: str, option: str) -> str:
        """``final``'s real path, or the typed error saying why this generation may not write it."""
        folder = os.path.realpath(self._need_folder())
        real = os.path.realpath(final)
        if real in self.protected:
            why = f"is {self.protected[real]}; generation never writes over its input"
        elif os.path.commonpath([folder, real]) != folder:
            why = f"resolves to {real!r}, outside the output folder {folder!r} (through a symlink)"
        elif real in self._claims:
            why = f"is the same file as {self._claims[real]} of this generation"
        elif os.path.lexists(final) and not self.overwrite:
            raise InvalidArgument(
                f"{what} {str(final)!r} already exists; delete it, set {option} to another path, or "
                f"{self.overwrite_hint} to replace it"
            )
        else:
            parent = final.parent
            while not os.path.lexists(parent):
                parent = parent.parent
            if not parent.is_dir():
                why = f"is below {str(parent)!r}, which is a file, not a folder"
            elif not os.access(parent, os.W_OK | os.X_OK):
                why = f"is in {str(parent)!r}, which is not writable"
            else:
                return real
        raise InvalidArgument(f"{what} {str(final)!r} {why}: set {option} to another path")

    def _claim(self, final: Path, what: str, option: str) -> None:
        """Check ``final`` and record it as one of this generation's outputs."""
        self._claims[self._refused(final, what, option)] = what

    def _write_claimed(self, final: Path, data: bytes) -> Path:
        """Stage a file the core claimed up front (the model, the external initializers)."""
        assert os.path.realpath(final) in self._claims, final
        return self._stage(final, data)

    def _stage(self, final: Path, data: bytes) -> Path:
        self._make_dirs(final.parent)
        self._sweep(final.parent)
        tmp = final.with_name(staged_name(final.name))
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0)
        try:
            fd = os.open(tmp, flags, 0o666)
            self._pending.append((tmp, final))
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
        except OSError as exc:
            raise os_error(exc, final, FILE_PATH_KEY) from exc
        return final

    def _make_dirs(self, folder: Path) -> None:
        missing: list[Path] = []
        while not folder.is_dir():
            missing.append(folder)
            folder = folder.parent
        for d in reversed(missing):
            try:
                os.mkdir(d)
            except OSError as exc:
                raise os_error(exc, d, FILE_PATH_KEY) from exc
            self._made_dirs.append(d)

    def _sweep(self, folder: Path) -> None:
        """Remove a killed generation's staged files, once per folder and generation."""
        if folder not in self._swept:
            self._swept.add(folder)
            remove_stale_staged(folder)

    def _commit(self) -> None:
        """Re-check every file, then rename them in staging order (the model is staged last). Without
        overwrite a file is linked, not renamed, so one created since the check is never replaced."""
        claims, self._claims = self._claims, {}
        for _, final in self._pending:
            real = os.path.realpath(final)
            what = claims.get(real, f"context file {str(final)!r}")
            if real not in claims:
                raise InvalidArgument(f"{what} resolves to {real!r} since it was checked: the folder changed")
            self._claims[self._refused(final, what, FILE_PATH_KEY)] = what
        for tmp, final in self._pending:
            try:
                if self.overwrite:
                    os.replace(tmp, final)
                else:
                    _link_new(tmp, final)
            except FileExistsError:
                raise InvalidArgument(
                    f"{str(final)!r} appeared while the context model was generated; it is left as it is: "
                    f"delete it or {self.overwrite_hint}, then generate again"
                ) from None
            except OSError as exc:
                raise os_error(exc, final, FILE_PATH_KEY) from exc
            self._committed.append(final)
        self._pending.clear()

    def _abort(self) -> None:
        """Remove everything this generation staged, committed or created (folders included)."""
        for path in [tmp for tmp, _ in self._pending] + self._committed:
            with contextlib.suppress(OSError):
                path.unlink()
        for d in reversed(self._made_dirs):
            with contextlib.suppress(OSError):
                d.rmdir()
        self._pending.clear()
        self._committed.clear()
        self._made_dirs.clear()


def _link_new(tmp: Path, final: Path) -> None:
    """Give ``tmp``'s file the name ``final`` only if nothing has that name (a hard link fails when
    it exists; a file system without hard links gets a check right before the rename)."""
    try:
        os.link(tmp, final, follow_symlinks=False)
    except FileExistsError:
        raise
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK, errno.ENOSYS):
            raise
        if os.path.lexists(final):
            raise FileExistsError(errno.EEXIST, "exists", str(final)) from exc
        os.replace(tmp, final)
        return
    tmp.unlink()
