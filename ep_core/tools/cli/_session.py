"""Creating ``ep-core run``'s session: the EPContext cache, and a progress display while it compiles.

The cache (``$EP_CORE_CTX_CACHE`` or ``~/.cache/ep-core/ctx``) holds one folder per model and
provider choice, keyed by the model's sha256, the providers asked for and their options, the
provider config file's bytes, and the name and version of every installed EP and of ep-core. The
first session compiles with ``ep.context_enable=1`` writing the EPContext model there; later ones
load that model and skip compiling. A cached model that no longer loads is reported and rebuilt.

An entry is trusted as the kernel and optimizer caches are: its folder must be this user's and
not writable by others (else the session runs without the cache, saying so), and meta.json holds
an HMAC of the context model's sha256 by this user's key (``ep_core.sdk.epcontext.signing``): a
context model replaced by anyone else is reported and compiled again, never run."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ep_core.optimizer.cache import usable_folder
from ep_core.sdk.epcontext import signing
from ep_core.sdk.errors import EpCoreError, InvalidArgument
from ep_core.sdk.hookspecs import hookimpl

if TYPE_CHECKING:
    from ep_core.runtime.options import SessionOptions
    from ep_core.runtime.session import InferenceSession

CTX_CACHE_ENV = "EP_CORE_CTX_CACHE"
META = "meta.json"
_NOTHING_COMPILED = "nothing was compiled"


def cache_root() -> Path:
    root = os.environ.get(CTX_CACHE_ENV)
    return Path(root) if root else Path.home() / ".cache" / "ep-core" / "ctx"


@dataclass
class Made:
    """A created session and how: ``source`` is 'compiled' (the EPContext model written to the
    cache), 'cache' (loaded from it) or 'model' (no cache); ``notes`` are one-line remarks."""

    session: "InferenceSession"
    seconds: float
    source: str
    cache_dir: Path | None = None
    first_seconds: float | None = None
    notes: list[str] = field(default_factory=list)
    startup_seconds: float = 0.0


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def requested(providers: list[Any] | None, config: str | None) -> list[str]:
    """The EPs asked for (the CPU fallback is appended by the session), read before creating it."""
    if providers:
        return [p if isinstance(p, str) else p[0] for p in providers]
    path = config or os.environ.get("EP_CORE_CONFIG")
    if path:
        from ep_core.runtime.options import load_provider_config

        return [e.name for e in load_provider_config(path).providers]
    return []


def compiles(names: list[str]) -> bool:
    """Whether an EP asked for declares ops it fuses (so a session may have something to cache)."""
    from ep_core.runtime.discover import get_registry

    registry = get_registry()
    for name in names:
        handle = registry.handle(name)
        if handle.load() is not None and handle.call("ep_factory_get_fusable_ops"):
            return True
    return False


def cache_key(model: Path, providers: list[Any] | None, config: str | None, entries: dict[str, str]) -> str:
    from ep_core import __version__
    from ep_core.runtime.discover import get_registry

    eps = []
    for h in get_registry().handles():
        if h.load() is not None:
            eps.append([h.name, str(h.call("ep_factory_version")), h.distribution or ""])
    config_path = config or os.environ.get("EP_CORE_CONFIG")
    parts = {
        "model": _sha256(model),
        "ep_core": __version__,
        "python": sys.version.split()[0],
        "machine": platform.machine(),
        "eps": sorted(eps),
        "providers": [p if isinstance(p, str) else [p[0], p[1]] for p in providers or ()],
        "config": _sha256(Path(config_path)) if config_path else None,
        "entries": sorted(entries.items()),
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


class _CompileWatcher:
    """Observer plugin (wraps every EP's hooks) that narrates session creation to a spinner."""

    def __init__(self, say: Any) -> None:
        self.say = say
        self.writing_context = False  # set once an EP is asked for its EPContext nodes

    @staticmethod
    def _name(obj: Any) -> str:
        return str(getattr(obj, "ep_name", None) or getattr(obj, "name", None) or type(obj).__name__)

    @hookimpl(wrapper=True)
    def ep_factory_create_ep(self, factory: Any) -> Any:
        self.say(f"{self._name(factory)}: starting")
        return (yield)

    @hookimpl(wrapper=True)
    def ep_get_capability(self, ep: Any, graph: Any) -> Any:
        self.say(f"{self._name(ep)}: choosing among {len(graph)} node(s)")
        return (yield)

    @hookimpl(wrapper=True)
    def ep_compile(self, ep: Any, fused_nodes: Any) -> Any:
        self.say(f"{self._name(ep)}: compiling {len(fused_nodes)} fused group(s)")
        return (yield)

    @hookimpl(wrapper=True)
    def ep_get_ep_context_nodes(self, ep: Any) -> Any:
        self.writing_context = True
        self.say(f"{self._name(ep)}: writing its EPContext")
        return (yield)


def start_providers(opts: "SessionOptions", providers: list[Any] | None, config: str | None) -> float:
    """Start the providers once, on a model without nodes, and return how long it took. What a
    process pays once (importing an EP's stack, building its kernel registry) is not the session's
    cost: both the compiling and the cache-loading session are timed after it. A bad provider
    choice or option fails here, before the model is read."""
    from onnx import TensorProto, helper

    from ep_core.runtime.session import InferenceSession

    value = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    model = helper.make_model(
        helper.make_graph([], "start", [value], [value]), opset_imports=[helper.make_opsetid("", 21)]
    )
    t0 = time.perf_counter()
    quiet = opts.model_copy(update={"enable_profiling": False})
    InferenceSession(model.SerializeToString(), quiet, providers=providers, config=config).close()
    return time.perf_counter() - t0


def _timed(
    model: Path,
    opts: "SessionOptions",
    providers: list[Any] | None,
    config: str | None,
    label: str,
    watcher: _CompileWatcher | None = None,
) -> tuple["InferenceSession", float, list[str]]:
    """Create the session under a spinner; returns it, its creation time and the warnings raised."""
    from ep_core.runtime.discover import get_registry
    from ep_core.runtime.session import InferenceSession
    from ep_core.tools.progress import spinner

    registry = get_registry()
    watcher = watcher or _CompileWatcher(None)
    with spinner(label) as say, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        watcher.say = lambda text: say(f"{label}: {text}")
        registry.register_observer(watcher, name="ep-core-run-progress")
        try:
            t0 = time.perf_counter()
            sess = InferenceSession(str(model), opts, providers=providers, config=config)
            seconds = time.perf_counter() - t0
        finally:
            registry.unregister_observer(watcher)
    return sess, seconds, [" ".join(str(w.message).split()) for w in caught]


def _stale(ctx_model: Path) -> str | None:
    """Why the cached model should not be loaded, by the verdict of each EP it records compatibility
    info for (``ep_factory_validate_compiled_model_compatibility``: the machine or the EP changed)."""
    import onnx

    from ep_core.runtime.compatibility import METADATA_PREFIX, CompiledModelCompatibility, parse_verdict
    from ep_core.runtime.discover import get_registry
    from ep_core.runtime.select import ep_devices_for, hardware_devices

    try:
        props = onnx.load(str(ctx_model), load_external_data=False).metadata_props
    except Exception as exc:  # noqa: BLE001 - an unreadable cache entry is rebuilt
        return f"unreadable: {exc}"
    registry = get_registry()
    for p in props:
        if not p.key.startswith(METADATA_PREFIX):
            continue
        name = p.key[len(METADATA_PREFIX) :]
        handle = registry.handle(name) if name in registry.names() else None
        if handle is None or handle.load() is None:
            return f"{name} is not installed"
        devices = [d.device for d in ep_devices_for(handle, hardware_devices(registry))]
        answer = handle.call(
            "ep_factory_validate_compiled_model_compatibility", devices=devices, compatibility_info=p.value
        )
        verdict, reason = parse_verdict(answer)
        if verdict in (
            CompiledModelCompatibility.UNSUPPORTED,
            CompiledModelCompatibility.SUPPORTED_PREFER_RECOMPILATION,
        ):
            return f"{name}: {verdict.value}" + (f", {reason}" if reason else "")
    return None


def _context_nodes(path: Path) -> int:
    """EPContext nodes in the main graph of the written context model."""
    import onnx

    if not path.is_file():
        return 0
    return sum(n.op_type == "EPContext" for n in onnx.load(str(path), load_external_data=False).graph.node)


def _fused_groups(sess: "InferenceSession") -> int:
    return len({a["fused_node"] for a in sess.get_node_assignment().values() if a["fused_node"]})


def create(
    model: Path,
    opts: "SessionOptions",
    providers: list[Any] | None,
    config: str | None,
    use_cache: bool,
) -> Made:
    """The session for ``model``: from the EPContext cache when it holds this model and provider
    choice, else compiled (writing the cache when an EP asked for fuses anything)."""
    names = requested(providers, config)
    startup = start_providers(opts, providers, config)
    stem = model.name[:-5] if model.name.endswith(".onnx") else model.name
    folder = cache_root() / f"{stem}-{cache_key(model, providers, config, dict(opts.config_entries))[:16]}"
    why = usable_folder(folder) or usable_folder(folder.parent) if use_cache and compiles(names) else ""
    if use_cache and compiles(names) and not why:
        notes: list[str] = []
        made = _load_cached(folder / f"{stem}_ctx.onnx", opts, providers, config, notes)
        made = made or _compile_into(folder / f"{stem}_ctx.onnx", model, opts, providers, config, notes)
    else:
        sess, seconds, caught = _timed(model, opts, providers, config, "creating the session")
        unused = [f"not using the EPContext cache {folder}: {why}; set {CTX_CACHE_ENV} to a folder of your own"]
        made = Made(sess, seconds, "model", None, None, (unused if why else []) + caught)
    made.startup_seconds = startup
    return made


def _load_cached(
    ctx_model: Path, opts: "SessionOptions", providers: list[Any] | None, config: str | None, notes: list[str]
) -> Made | None:
    """The session from the cached context model, or None (with a note when one exists but is unusable)."""
    folder, meta_path = ctx_model.parent, ctx_model.parent / META
    if not (ctx_model.is_file() and meta_path.is_file()):
        return None
    stale = _stale(ctx_model)
    if stale:
        notes.append(f"the cached EPContext model in {folder} should be rebuilt ({stale}); compiling it again")
        return None
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        first = float(meta["first_session_s"])
        signature = meta.get("signature")
        verdict = signing.verify(
            _signed(folder, _sha256(ctx_model), first), signature if isinstance(signature, str) else None
        )
        if not verdict.trusted:  # replaced by someone who could write the folder: never run it
            notes.append(
                f"the cached EPContext model in {folder} is not one this user wrote ({verdict.reason}); compiling it again"
            )
            return None
        sess, seconds, caught = _timed(ctx_model, opts, providers, config, "loading the cached EPContext model")
    except (EpCoreError, ValueError, KeyError) as exc:
        why = exc.message if isinstance(exc, EpCoreError) else f"{type(exc).__name__}: {exc}"
        notes.append(f"the cached EPContext model in {folder} did not load ({why}); compiling it again")
        return None
    return Made(sess, seconds, "cache", folder, first, notes + caught)


def _signed(folder: Path, ctx_sha256: str, first_seconds: float) -> dict[str, str]:
    """What a cache entry's signature covers: its folder (the model and provider key), the context
    model's bytes (which hold its EPContext nodes' own signatures over their payloads) and the time
    it reports."""
    return {"kind": "ep-core run context cache", "folder": folder.name, "ctx": ctx_sha256, "first": repr(first_seconds)}


def _compile_into(
    ctx_model: Path,
    model: Path,
    opts: "SessionOptions",
    providers: list[Any] | None,
    config: str | None,
    notes: list[str],
) -> Made:
    """Compile ``model`` writing its context model as ``ctx_model``; kept (with the first session's
    time) only when it holds EPContext nodes. A context model that cannot be written is reported and
    the session is made without it."""
    folder = ctx_model.parent
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise InvalidArgument(
            f"cannot create the EPContext cache folder {folder}: {exc.strerror}; set {CTX_CACHE_ENV} or pass --no-cache"
        ) from None
    ctx_opts = opts.model_copy(deep=True)
    ctx_opts.add_session_config_entry("ep.context_enable", "1")
    ctx_opts.add_session_config_entry("ep.context_file_path", str(ctx_model))
    ctx_opts.add_session_config_entry("ep.context_overwrite", "1")
    watcher = _CompileWatcher(None)
    try:
        sess, seconds, caught = _timed(model, ctx_opts, providers, config, "creating the session", watcher)
    except EpCoreError as exc:
        if not watcher.writing_context:
            raise
        shutil.rmtree(folder, ignore_errors=True)
        notes.append(
            f"the session compiled but its EPContext model could not be written ({exc.message}); "
            "it runs without the cache (--no-cache skips the attempt)"
        )
        sess, seconds, caught = _timed(model, opts, providers, config, "creating the session")
        return Made(sess, seconds, "model", None, None, notes + caught)
    notes.extend(c for c in caught if not c.startswith(_NOTHING_COMPILED))
    if _fused_groups(sess) and _context_nodes(ctx_model):
        meta = {"model": str(model), "first_session_s": seconds, "created": time.strftime("%Y-%m-%d %H:%M:%S")}
        meta["signature"] = signing.sign(_signed(folder, _sha256(ctx_model), seconds))
        (folder / META).write_text(json.dumps(meta, indent=1), encoding="utf-8")
        return Made(sess, seconds, "compiled", folder, None, notes)
    shutil.rmtree(folder, ignore_errors=True)
    notes.append("no provider wrote EPContext nodes (nothing compiled, or no context support): nothing to cache")
    return Made(sess, seconds, "model", None, None, notes)
