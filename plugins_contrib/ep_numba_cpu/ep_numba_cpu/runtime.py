"""Running one fused group: its contraction steps through NumPy/BLAS, its elementwise clusters
through their Numba kernels, its delegated nodes through the reference EP's kernels (``delegate``).
A plan is plain data (``generate.expand`` makes it from the stored declarative record, naming
kernels by key); the compiled kernels and the weights are handed in beside it. Steps whose inputs
are all constants run once when the runner is built (folded), as the core folds constant nodes."""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ep_core.sdk.errors import EpCoreError, Fail
from ep_cpu_reference.kernels.conv_plan import plan_conv
from ep_cpu_reference.kernels.nn_common import few_rows, frozen, is_frozen
from ep_numba_cpu import delegate, generate
from ep_numba_cpu.delegate import Host
from ep_numba_cpu.fold_size import fold_bytes
from ep_numba_cpu.recurrent import readonly
from ep_numba_cpu.spec import SpecError

if TYPE_CHECKING:
    from ep_numba_cpu import direct_conv


def _pads_for(auto_pad: str, size: int, k: int, s: int, d: int) -> tuple[int, int]:
    if auto_pad == "VALID":
        return 0, 0
    out = -(-size // s)
    total = max(0, (out - 1) * s + (k - 1) * d + 1 - size)
    if auto_pad == "SAME_LOWER":
        return total - total // 2, total // 2
    return total // 2, total - total // 2


Workspace = dict  # (step, tag) -> buffer kept between runs
# ops whose outputs differ between runs with the same inputs: never folded
NONDETERMINISTIC = frozenset(
    "RandomNormal RandomUniform RandomNormalLike RandomUniformLike Bernoulli Multinomial Dropout".split()
)
FOLD_FLOOR = 64 << 20  # bytes constant folding may always add (the core's floor is alike)
SHAPES_KEPT = 4  # per step: input shapes whose prepared calls (buffers, conv plans) a workspace keeps


def _buf(ws: Workspace | None, key: Any, shape: tuple[int, ...], dtype: Any, zero: bool = False) -> np.ndarray:
    """A buffer of ``shape``: fresh without a workspace, else the one kept under ``key`` (made on
    first use; ``zero`` buffers are zeroed then, callers only ever write their interior)."""
    if ws is not None:
        got = ws.get(key)
        if got is not None and got.shape == shape and got.dtype == dtype:
            return got
    out = np.zeros(shape, dtype=dtype) if zero else np.empty(shape, dtype=dtype)
    if ws is not None:
        ws[key] = out
    return out


def conv2d(
    x: np.ndarray,
    w: np.ndarray,
    b: np.ndarray | None,
    attrs: Mapping[str, Any],
    depthwise: Any = None,
    direct: Any = None,
    ws: Workspace | None = None,
    key: Any = 0,
    internal: bool = False,
) -> np.ndarray:
    """ONNX Conv for 1-D and 2-D inputs: depthwise ones through the compiled ``depthwise`` kernel,
    dense ones through the compiled ``direct`` kernel where the plan chose it (``direct_conv``; at
    every run, whatever its threads: one compiled model sums one way), the rest
    through the reference EP's convolution plan (``conv_plan.plan_conv``: blocked im2col,
    few-output-channel and 1x1 fast paths; one implementation serves both EPs). The plan for an
    input shape (geometry parsed, weights laid out) is kept in the workspace ``ws`` while ``w``
    and ``b`` are the same read-only arrays (stored weights: every run). A depthwise output lives
    in the workspace when ``internal`` (read only inside the fused group)."""
    plans = ws.setdefault((key, "plans"), {}) if ws is not None else {}
    cached = plans.get(x.shape)
    if cached is not None and cached[0] is w and cached[1] is b:
        return cached[2](x)
    run = _conv_plan(x.shape, x.dtype, w, b, attrs, depthwise, direct, ws, key, internal)
    if ws is not None and not w.flags.writeable and (b is None or not b.flags.writeable):
        if len(plans) >= SHAPES_KEPT:  # dynamic shapes: each plan holds laid-out weights
            plans.clear()
        plans[x.shape] = (w, b, run)
    return run(x)


def _conv_plan(
    x_shape: tuple[int, ...],
    dt: np.dtype,
    w: np.ndarray,
    b: np.ndarray | None,
    attrs: Mapping[str, Any],
    depthwise: Any,
    direct: Any,
    ws: Workspace | None,
    key: Any,
    internal: bool,
) -> Callable[[np.ndarray], np.ndarray]:
    one_d = len(x_shape) == 3
    if one_d:
        x_shape, w = (x_shape[0], x_shape[1], 1, x_shape[2]), w[:, :, None, :]
    n, c, h, wd = x_shape
    m, cg, kh, kw = w.shape
    sh, sw = (list(attrs.get("strides") or [1, 1]) + [1])[:2] if not one_d else (1, (attrs.get("strides") or [1])[0])
    dh, dw = (
        (list(attrs.get("dilations") or [1, 1]) + [1])[:2] if not one_d else (1, (attrs.get("dilations") or [1])[0])
    )
    group = int(attrs.get("group", 1))
    auto_pad = attrs.get("auto_pad", "NOTSET")
    if auto_pad not in ("NOTSET", ""):
        pt, pb = _pads_for(auto_pad, h, kh, sh, dh) if not one_d else (0, 0)
        pl, pr = _pads_for(auto_pad, wd, kw, sw, dw)
    else:
        pads = list(attrs.get("pads") or [])
        if one_d:
            pads = pads or [0, 0]
            pt, pb, pl, pr = 0, 0, pads[0], pads[1]
        else:
            pads = pads or [0, 0, 0, 0]
            pt, pl, pb, pr = pads
    ho = (h + pt + pb - dh * (kh - 1) - 1) // sh + 1
    wo = (wd + pl + pr - dw * (kw - 1) - 1) // sw + 1
    if group == c and cg == 1 and m == c and depthwise is not None and not one_d:
        # geometry compiled in; padding and bias handled inside the kernel: no padded copy, no extra pass
        wr = readonly(np.ascontiguousarray(w.reshape(m, kh, kw)))
        br = readonly(np.ascontiguousarray(np.zeros(m, dtype=dt) if b is None else b.astype(dt, copy=False)))

        from numba import get_num_threads  # (the kernel is compiled: numba is loaded)

        plane = generate.depthwise_plane((kh, kw, sh, sw, dh, dw, pt, pl), (h, wd), (ho, wo))

        def run_depthwise(x: np.ndarray) -> np.ndarray:
            out = _buf(ws if internal else None, (key, "out"), (n, m, ho, wo), dt)
            scratch = _buf(ws, (key, "planes"), (get_num_threads(), plane), dt)  # a plane per thread
            if depthwise(out, readonly(np.ascontiguousarray(x)), wr, br, scratch):
                raise Fail(f"depthwise convolution: a scratch buffer of {scratch.shape} is smaller than its planes")
            return out

        return run_depthwise

    run: Callable[[np.ndarray], np.ndarray] | None = None
    if direct is not None and dt == np.float32:  # the plan chose the direct kernel: every run takes it
        from ep_numba_cpu import direct_conv

        dp = direct_conv.plan((n, c, h, wd), w, group, (sh, sw), (dh, dw), (pt, pl), (ho, wo))
        run = None if dp is None else _run_direct(dp, direct, b, ws, key, internal)
    if run is None:  # (and shapes the direct kernel does not serve)
        bias = None if b is None else np.ascontiguousarray(b.astype(dt, copy=False)).reshape(1, m, 1, 1)
        run = plan_conv((n, c, h, wd), dt, w, group, (kh, kw), (sh, sw), (dh, dw), (pt, pl), (pb, pr), (ho, wo), bias)
    if one_d:
        return lambda x: run(x[:, :, None, :])[:, :, 0, :]
    return run


def _scratch(ws: Workspace | None, name: str, size: int) -> np.ndarray:
    """A float32 buffer of at least ``size`` values, shared by the steps of a workspace (grown,
    never shrunk): the direct kernel's padded input and flat output, which every call rewrites."""
    got = ws.get(("direct", name)) if ws is not None else None
    if got is None or got.shape[0] < size:
        got = np.empty(size, dtype=np.float32)
        if ws is not None:
            ws[("direct", name)] = got
    return got


def _run_direct(
    dp: direct_conv.Plan, direct: Any, b: np.ndarray | None, ws: Workspace | None, key: Any, internal: bool
) -> Callable[[np.ndarray], np.ndarray]:
    m = dp.out_shape[1]
    br = readonly(np.ascontiguousarray(np.zeros(m, np.float32) if b is None else b.astype(np.float32, copy=False)))

    def run(x: np.ndarray) -> np.ndarray:
        out = _buf(ws if internal else None, (key, "out"), dp.out_shape, np.float32)
        xpad, yflat = _scratch(ws, "xpad", dp.xpad_size), _scratch(ws, "yflat", dp.yflat_size)
        dp.fill(x, xpad)
        if direct(out, xpad, dp.weights, dp.offsets, br, yflat, dp.geometry):
            raise Fail(f"direct convolution: its buffers do not fit the geometry {dp.geometry.tolist()}")
        return out

    return run


def matmul(a: np.ndarray, b: np.ndarray, ws: Workspace | None = None, key: Any = 0) -> np.ndarray:
    """MatMul; a stack times a matrix is one BLAS call (np.dot is much faster than np.matmul's
    stacked loop here), into the workspace's buffer when one is given."""
    if b.ndim == 2 and a.ndim >= 2 and a.dtype == b.dtype:
        a2 = np.ascontiguousarray(a).reshape(math.prod(a.shape[:-1]), a.shape[-1])  # (-1, 0) is ambiguous
        out = _buf(ws, (key, "out"), (a2.shape[0], b.shape[1]), a.dtype)
        if few_rows(a2, b, out) is None:  # the reference EP's gemv per row, where it pays
            np.dot(a2, b, out=out)
        return out.reshape(a.shape[:-1] + (b.shape[1],))
    return np.matmul(a, b)


class GraphRunner:
    """Executes one plan: ``run(*inputs)`` returns the fused node's outputs in order.

    Delegated nodes (``delegate``) are built once here (``host`` gives their kernel context) and
    called with plain arrays; they may return views of their inputs or read-only arrays."""

    def __init__(
        self,
        plan: Mapping[str, Any],
        kernels: Mapping[str, Any],
        weights: Mapping[str, np.ndarray],
        host: Host | None = None,
        exposed: Collection[str] | None = None,
    ) -> None:
        """``exposed``: the outputs that leave the graph the group is in (None: all of them); only
        those are copied when they may view a weight, the rest stay read-only views."""
        self.plan = plan
        self.inputs: tuple[str, ...] = tuple(plan["inputs"])
        self.outputs: tuple[str, ...] = tuple(plan["outputs"])
        self.weights = dict(weights)
        self.steps: list[Any] = []
        for k, step in enumerate(plan["steps"]):
            kind = step["kind"]
            key = step.get("kernel")
            fn = kernels[key] if key else None
            if kind == "kernel":
                spec = step.get("kernel_spec")
                fn = (fn, kernels[spec] if spec else None)
            elif kind == "conv":  # (depthwise kernel, direct kernel)
                fn = (fn, kernels[step["direct"]] if step.get("direct") else None)
            elif kind == "node":
                fn = _node_compute(step, kernels, self.weights, host or Host(), k)
            self.steps.append((kind, step, fn))
        self._shape_plans: list[dict[Any, Any]] = [{} for _ in self.steps]  # per kernel step: shapes -> call plan
        self._live = self._fold()
        live = [self.steps[k] for k in self._live]
        needed = {n for _, step, _ in live for n in step["inputs"]} | set(self.outputs)
        self.weights = {n: w for n, w in self.weights.items() if n in needed}  # what runs read, no more
        # values whose buffers are kept between runs (no fresh pages to fault in on every run): those
        # of compiled steps no fused-node output can alias. Delegated nodes may return views of their
        # inputs (Reshape, Squeeze, Identity ...), so what reaches an output through them is fresh
        escapes = set(self.outputs)
        for kind, step, _ in reversed(live):
            if kind == "node" and escapes.intersection(step["outputs"]):
                escapes.update(n for n in step["inputs"] if n)
        self._internal = [kind != "node" and not escapes.intersection(_names(step)) for kind, step, _ in self.steps]
        # weights (stored and folded) are frozen: read-only views registered as computed from
        # constants (nn_common.frozen), so is any view of them: an output that may view one and leaves
        # the graph is copied when it does (a bounds check per run), so the caller can write into what
        # it gets; one read inside the graph (a folded LSTM weight under If) is passed on as it is
        self.weights = {n: w if is_frozen(w) else frozen(w) for n, w in self.weights.items()}
        self._aliasing = tuple(
            (i, tuple(self.weights[w] for w in ws))
            for i, o in enumerate(self.outputs)
            if (exposed is None or o in exposed) and (ws := _reached(live, o, set(self.weights)))
        )
        self._pool: list[Workspace] = []  # one workspace per concurrent run
        self._calls = [self._bind(k) for k in self._live]

    def __call__(self, *inputs: Any) -> list[Any]:
        try:
            ws = self._pool.pop()
        except IndexError:
            ws = {}
        try:
            return self._run(ws, inputs)
        finally:
            self._pool.append(ws)

    def _run(self, ws: Workspace, inputs: Sequence[Any]) -> list[Any]:
        env: dict[str, Any] = dict(self.weights)
        for name, value in zip(self.inputs, inputs, strict=True):
            env[name] = value
        k = -1
        try:
            for k, call in enumerate(self._calls):  # noqa: B007 - k names the failing step
                call(env, ws)
        except Exception as exc:
            raise self._failed(self._live[k], exc) from exc
        result = [env[o] for o in self.outputs]
        for i, weights in self._aliasing:
            if any(np.may_share_memory(result[i], w) for w in weights):
                result[i] = np.array(result[i], copy=True)
        return result

    def _failed(self, k: int, exc: Exception) -> EpCoreError:
        """``exc`` of step ``k`` naming the node or kernel inside the group (the core names the
        fused node around it): an ep-core error keeps its status code, any other is FAIL."""
        kind, step, _ = self.steps[k]
        made = ", ".join(repr(n) for n in _names(step) if n)
        what = f"{step['node']['op']} node making {made}" if kind == "node" else f"{kind} step making {made}"
        if isinstance(exc, EpCoreError):
            return type(exc)(f"{what}: {exc.message}")
        return Fail(f"{what} failed: {type(exc).__name__}: {exc}")

    def _step(self, k: int, env: dict[str, Any], ws: Workspace | None, internal: bool) -> None:
        """Run step ``k`` over ``env``; ``internal``: its outputs may live in kept buffers of ``ws``."""
        kind, step, fn = self.steps[k]
        ins = step["inputs"]
        if kind == "kernel":
            self._run_kernel(step, fn, env, ws if internal else None, k, self._shape_plans[k])
        elif kind == "conv":
            depthwise, direct = fn
            bias = env[ins[2]] if ins[2] else None
            env[step["outputs"][0]] = conv2d(
                env[ins[0]], env[ins[1]], bias, step["attrs"], depthwise, direct, ws, k, internal
            )
        elif kind == "matmul":
            env[step["outputs"][0]] = matmul(env[ins[0]], env[ins[1]], ws if internal else None, k)
        elif kind == "node":
            outs = fn(*[env[i] if i else None for i in ins])
            for name, value in zip(step["outputs"], outs, strict=True):
                if name:
                    env[name] = value
        else:
            raise RuntimeError(f"unknown step kind {kind!r}")

    def _bind(self, k: int) -> Callable[[dict[str, Any], Workspace], None]:
        """Step ``k`` as one call with everything that does not change between runs bound: the
        per-step cost is what small models (silero's branches: a few microseconds a node) pay."""
        kind, step, fn = self.steps[k]
        internal = self._internal[k]
        if kind == "node":
            ins, outs = tuple(step["inputs"]), tuple(step["outputs"])
            if len(ins) <= 2 and all(ins) and len(outs) == 1 and outs[0]:  # most nodes: no loops
                out, first, second = outs[0], ins[0] if ins else "", ins[1] if len(ins) == 2 else ""

                def unary(env: dict[str, Any], ws: Workspace) -> None:
                    env[out] = fn(env[first])[0]

                def binary(env: dict[str, Any], ws: Workspace) -> None:
                    env[out] = fn(env[first], env[second])[0]

                def nullary(env: dict[str, Any], ws: Workspace) -> None:
                    env[out] = fn()[0]

                return (nullary, unary, binary)[len(ins)]
            rest = ins[1:]
            if (
                len(outs) == 1
                and outs[0]
                and ins
                and ins[0]
                and all(not i or (i in self.weights and i not in self.inputs) for i in rest)
            ):
                # Slice, Pad, Reshape ...: the inputs after the first are stored or folded constants
                # (not fed: an initializer a group input overrides is read from the run)
                out, first, fixed = outs[0], ins[0], [self.weights[i] if i else None for i in rest]

                def one_value(env: dict[str, Any], ws: Workspace) -> None:
                    env[out] = fn(env[first], *fixed)[0]

                return one_value

            def node(env: dict[str, Any], ws: Workspace) -> None:
                for name, value in zip(outs, fn(*[env[i] if i else None for i in ins])):
                    if name:
                        env[name] = value

            return node
        if kind != "kernel":
            return lambda env, ws: self._step(k, env, ws, internal)
        names, spec_fn, plans, key = tuple(step["inputs"]), fn[1], self._shape_plans[k], (k, "calls")
        ndarray = np.ndarray
        if not internal:  # outputs leave the group: fresh buffers every run
            run = self._run_kernel
            return lambda env, ws: run(step, fn, env, None, k, plans)

        def kernel(env: dict[str, Any], ws: Workspace) -> None:
            # outputs in kept buffers: per input shapes, the flat views the kernel writes and the
            # views the group reads are made once
            args = [env[n] for n in names]
            if any(type(a) is not ndarray for a in args):
                args = [np.asarray(a) for a in args]
            shapes = tuple([a.shape for a in args])
            calls = ws.get(key)
            if calls is None:
                calls = ws[key] = {}
            got = calls.get(shapes)
            if got is None:
                if len(calls) >= SHAPES_KEPT:  # dynamic shapes: each kept call holds its buffers alive
                    calls.clear()
                got = calls[shapes] = _kept_call(step, k, shapes, spec_fn is not None, ws)
            if got is False:  # shapes off the specialised kernel's pattern: the general kernel
                self._run_kernel(step, fn, env, ws, k, plans)
                return
            flat, dims, views = got
            spec_fn(*flat, *[_flat(a) for a in args], dims)
            for name, view in views:
                env[name] = view

        return kernel

    def _fold(self) -> list[int]:
        """Run once, here, every step whose inputs are all stored weights or values folded before
        (int8 weights cast and scaled to float, shapes of constants ...), as the core folds
        constant nodes: their values join the runner's weights (in memory only; the context keeps
        the record). A step folds only when the bytes it makes are known before it runs
        (``fold_size``: a ConstantOfShape of a huge shape in a model or a context is not computed)
        and fit what is left of 4x the bytes of the stored weights (plus ``FOLD_FLOOR``), as the
        core's budget does. Memory is charged once per array owning it (a folded view of a
        weight costs nothing); a folded value whose last reader folded and that no live step or
        output reads is dropped, and its owner's bytes given back once no folded value views it
        (the float copy of an int8 weight that a folded Mul by its scale consumed). Returns the
        steps left to run on every call."""
        budget = 4 * sum(w.nbytes for w in self.weights.values()) + FOLD_FLOOR
        stored, kept = set(self.weights), set(self.outputs)
        last_read = {n: k for k, (_, step, _) in enumerate(self.steps) for n in step["inputs"] if n}
        owners = {id(_owner(w)) for w in self.weights.values()}  # memory the stored weights hold already
        held: dict[int, list[Any]] = {}  # id(owner) -> [owner, folded values over it]: charged once
        live: list[int] = []
        for k, (kind, step, _) in enumerate(self.steps):
            random = kind == "node" and step["node"]["op"] in NONDETERMINISTIC  # new values every run
            constant = not random and all(n in self.weights for n in step["inputs"] if n)
            size = fold_bytes(kind, step, self.weights) if constant else None  # known before it runs
            if size is not None:  # what folding it gives back: inputs read last here, viewed by nothing else
                last = {n for n in step["inputs"] if n and last_read[n] == k and n not in stored and n not in kept}
                owned = [held.get(id(_owner(self.weights[n]))) for n in last]
                size -= sum(e[0].nbytes for e in owned if e is not None and e[1] == 1)
            if size is None or size > budget:
                live.append(k)
                kept.update(n for n in step["inputs"] if n)  # read on every run: never dropped
                continue
            env = dict(self.weights)
            try:
                self._step(k, env, None, False)
            except Exception as exc:
                raise SpecError(f"plan.steps[{k}]: computing it from its constant inputs failed: {exc}") from exc
            made = {n: frozen(np.asarray(env[n])) for n in _names(step) if n}
            for v in made.values():
                owner = _owner(v)
                if id(owner) not in owners:
                    entry = held.setdefault(id(owner), [owner, 0])
                    budget -= owner.nbytes if entry[1] == 0 else 0
                    entry[1] += 1
            self.weights.update(made)
            for n in step["inputs"]:
                if n and last_read[n] == k and n not in stored and n not in kept and n in self.weights:
                    gone = held.get(id(_owner(self.weights.pop(n))))
                    if gone is not None:
                        gone[1] -= 1
                        budget += gone[0].nbytes if gone[1] == 0 else 0  # no folded value views it any more
        return live

    @staticmethod
    def _run_kernel(
        step: Mapping[str, Any],
        fns: Any,
        env: dict[str, Any],
        ws: Workspace | None = None,
        k: int = 0,
        shape_plans: dict[Any, Any] | None = None,
    ) -> None:
        fn, spec_fn = fns
        args = [a if type(a) is np.ndarray else np.asarray(a) for a in (env[n] for n in step["inputs"])]
        shapes = tuple(a.shape for a in args)
        sp = shape_plans.get(shapes) if shape_plans is not None else None
        if sp is None:
            sp = _shape_plan(step, shapes, spec_fn is not None)
            if shape_plans is not None:
                if len(shape_plans) >= 64:  # many dynamic shapes: keep the cache bounded
                    shape_plans.clear()
                shape_plans[shapes] = sp
        full, dims, size, dtypes, finals = sp
        outs = [_buf(ws, (k, m), full, dt) for m, dt in enumerate(dtypes)]
        if dims is not None:
            spec_fn(*[o.reshape(size) for o in outs], *[_flat(a) for a in args], dims)
        else:
            rank = len(full)
            views = [np.broadcast_to(a.reshape((1,) * (rank - a.ndim) + a.shape), full) for a in args]
            fn(*outs, *views)
        for (name, cut, real), buf in zip(finals, outs, strict=True):
            env[name] = (buf[cut] if cut is not None else buf).reshape(real)


def _shape_plan(step: Mapping[str, Any], shapes: tuple[tuple[int, ...], ...], has_spec: bool) -> tuple[Any, ...]:
    """Everything about one kernel call that depends only on its input shapes (cached per shapes):
    the broadcast shape, the specialised kernel's dims when the shapes follow its pattern (else
    None: the general kernel), each output's dtype, slice and final shape."""
    rank = step["rank"]
    full = np.broadcast_shapes(*shapes) if shapes else ()
    full = (1,) * (rank - len(full)) + tuple(full)
    dims = None
    if has_spec and _follows(step.get("spec"), shapes, full, rank):
        dims = np.array([_prod(full, g) for g in step["spec"]["groups"]], dtype=np.int64)
        dims.flags.writeable = False
    finals = []
    for o in step["outputs"]:
        deps = [shapes[i] for i in o["deps"]]
        real = tuple(np.broadcast_shapes(*deps)) if deps else ()
        real = (1,) * (o["rank"] - len(real)) + real
        real_r = (1,) * (rank - len(real)) + real
        cut = None
        if real_r != full:
            cut = tuple(slice(None) if r == f else slice(0, 1) for r, f in zip(real_r, full, strict=True))
        finals.append((o["name"], cut, real))
    return full, dims, _prod(full, range(rank)), [np.dtype(o["dtype"]) for o in step["outputs"]], finals


def _kept_call(
    step: Mapping[str, Any], k: int, shapes: tuple[tuple[int, ...], ...], has_spec: bool, ws: Workspace
) -> Any:
    """``(flat outputs, dims, [(name, view)])`` of a specialised kernel call writing kept buffers of
    ``ws``, or False when these shapes need the general kernel."""
    full, dims, size, dtypes, finals = _shape_plan(step, shapes, has_spec)
    if dims is None:
        return False
    outs = [_buf(ws, (k, m), full, dt) for m, dt in enumerate(dtypes)]
    views = [
        (name, (b[cut] if cut is not None else b).reshape(real))
        for (name, cut, real), b in zip(finals, outs, strict=True)
    ]
    return [o.reshape(size) for o in outs], dims, views


def _node_compute(
    step: Mapping[str, Any], kernels: Mapping[str, Any], weights: Mapping[str, np.ndarray], host: Host, k: int
) -> Any:
    """A delegated node's compute: compiled kernels' (``generate.node_sources``), else the reference
    kernel. ``SpecError`` naming the step when the reference registry does not serve it as stored."""
    try:
        if step.get("kernels"):
            return generate.node_compute(step["node"], [kernels[key] for key in step["kernels"]], weights, host)
        return delegate.build(step["node"], weights, host)
    except delegate.BuildError as exc:
        raise SpecError(f"plan.steps[{k}] ({step['node']['op']}): {exc}") from None


def _reached(steps: Sequence[Any], name: str, sources: set[str]) -> list[str]:
    """The ``sources`` value ``name`` may be (a view of) through delegated nodes."""
    made = {o: step for kind, step, _ in steps if kind == "node" for o in step["outputs"] if o}
    todo, seen, found = [name], set(), []
    while todo:
        n = todo.pop()
        if n in seen:
            continue
        seen.add(n)
        if n in sources:
            found.append(n)
        elif n in made:
            todo.extend(i for i in made[n]["inputs"] if i)
    return found


def _owner(a: np.ndarray) -> np.ndarray:
    """The array at the end of ``a``'s chain of views: the one its memory is charged to."""
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a


def _names(step: Mapping[str, Any]) -> list[str]:
    return [o["name"] if isinstance(o, Mapping) else o for o in step["outputs"]]


def _prod(shape: Sequence[int], dims: Any) -> int:
    n = 1
    for d in dims:
        n *= shape[d]
    return n


def _follows(
    spec: Mapping[str, Any] | None, shapes: Sequence[tuple[int, ...]], full: tuple[int, ...], rank: int
) -> bool:
    """Whether the real shapes follow the broadcast pattern the specialised kernel was built for."""
    if spec is None:
        return False
    for shape, flags in zip(shapes, spec["full"], strict=True):
        pad = rank - len(shape)
        for d in range(rank):
            n = shape[d - pad] if d >= pad else 1
            if n != (full[d] if flags[d] else 1):
                return False
    return True


def _flat(a: np.ndarray) -> np.ndarray:
    """``a`` as a 1-D C-contiguous array, a copy only when ``a`` is not contiguous (the specialised
    kernels read flat buffers; Numba takes a writable one for their read-only parameters)."""
    return a.reshape(-1) if a.flags.c_contiguous else np.ascontiguousarray(a).reshape(-1)


def run_plan_inputs(runner: GraphRunner, inputs: Sequence[Any]) -> list[Any]:
    return runner(*inputs)
