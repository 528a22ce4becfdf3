"""The simple ``ai.onnx.ml`` ops, natively: Binarizer, Scaler, Normalizer, Imputer,
LinearRegressor, OneHotEncoder, FeatureVectorizer, ArrayFeatureExtractor, ZipMap, CategoryMapper,
DictVectorizer, CastMap, LinearClassifier, LabelEncoder.
Tree ensembles are native in trees.py, SVMs in svm.py.

Where the spec text and onnxruntime disagree (Normalizer's L1/L2 keep the sign and divide by the
sum of |x| / the L2 norm), these kernels follow onnxruntime, the runtime models are built for."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from ep_core.sdk.errors import InvalidArgument, InvalidGraph
from ep_core.sdk.graph import NodeView
from ep_core.sdk.kernels import KernelContext
from ep_cpu_reference.kernels.trees import POSTS, as_2d, option, post_scores
from ep_cpu_reference.registry import REGISTRY

Fn = Callable[..., Any]
ML = "ai.onnx.ml"


def _text(v: Any) -> Any:
    return v.decode() if isinstance(v, bytes) else v


@REGISTRY.register("Binarizer", since=1, domain=ML)
def build_binarizer(node: NodeView, ctx: KernelContext) -> Fn:
    threshold = float(node.attr("threshold", 0.0))
    return lambda x: ((x > threshold).astype(x.dtype),)


@REGISTRY.register("Scaler", since=1, domain=ML)
def build_scaler(node: NodeView, ctx: KernelContext) -> Fn:
    """(x - offset) * scale per feature (or one value for all), in float32."""
    offset = np.array(node.attr("offset", [0.0]), dtype=np.float32)
    scale = np.array(node.attr("scale", [1.0]), dtype=np.float32)
    return lambda x: (((x.astype(np.float32) - offset) * scale).astype(np.float32),)


@REGISTRY.register("Normalizer", since=1, domain=ML)
def build_normalizer(node: NodeView, ctx: KernelContext) -> Fn:
    """Each row divided by its max, sum of |x| or L2 norm; a zero divisor leaves the row as is."""
    norm = _text(node.attr("norm", "MAX"))
    if norm not in ("MAX", "L1", "L2"):
        raise ValueError(f"{node.describe()}: norm must be MAX, L1 or L2, got {norm!r}")

    def compute(x: Any) -> tuple[Any]:
        v = x.astype(np.float64)
        v2 = v.reshape(1, -1) if v.ndim == 1 else v
        if norm == "MAX":  # a NaN never wins onnxruntime's scan for the largest value
            d = np.fmax.reduce(v2, axis=1, keepdims=True) if v2.shape[1] else v2[:, :0]
        elif norm == "L1":
            d = np.abs(v2).sum(axis=1, keepdims=True)
        else:
            d = np.sqrt((v2 * v2).sum(axis=1, keepdims=True))
        y = np.where(d == 0, v2, v2 / np.where(d == 0, 1, d))
        return (y.reshape(x.shape).astype(np.float32),)

    return compute


@REGISTRY.register("Imputer", since=1, domain=ML)
def build_imputer(node: NodeView, ctx: KernelContext) -> Fn:
    """Replaces elements equal to the replaced value (NaN matches NaN) by the imputed value of
    their feature (last axis), or the single imputed value."""
    floats = node.attr("imputed_value_floats")
    imputed = np.array(floats if floats else node.attr("imputed_value_int64s", []))
    replaced = float(node.attr("replaced_value_float", 0.0)) if floats else int(node.attr("replaced_value_int64", 0))
    if imputed.size == 0:
        raise ValueError(f"{node.describe()}: needs imputed_value_floats or imputed_value_int64s")

    def compute(x: Any) -> tuple[Any]:
        hit = np.isnan(x) if isinstance(replaced, float) and math.isnan(replaced) else x == replaced
        fill = imputed if imputed.size > 1 else imputed.reshape(())
        if imputed.size > 1 and x.shape[-1] != imputed.size:
            raise ValueError(f"{node.describe()}: {imputed.size} imputed values for {x.shape[-1]} features")
        return (np.where(hit, fill.astype(x.dtype), x),)

    return compute


@REGISTRY.register("LinearRegressor", since=1, domain=ML)
def build_linear_regressor(node: NodeView, ctx: KernelContext) -> Fn:
    """X @ W.T + b with W [targets, features], then the post-transform, as onnxruntime computes
    it: W is the first targets x features coefficients for the features X has (``_rows``), the
    intercepts count only when there is one per target, X has at most 2 dims."""
    targets = int(node.attr("targets", 1))
    coef = np.array(node.attr("coefficients"), dtype=np.float64)
    given = node.attr("intercepts", [])
    icpt = np.array(given, dtype=np.float64) if len(given) == targets else 0.0
    post = option(node, "post_transform", POSTS, "NONE")

    def compute(x: Any) -> tuple[Any]:
        if x.ndim > 2:
            raise InvalidArgument(f"{node.describe()}: X has {x.ndim} dims; it must be [N, features] or [features]")
        v = x.reshape(1, -1) if x.ndim < 2 else x
        w = _rows(node, coef, targets, v.shape[1])
        s = v.astype(np.float64) @ w.T + icpt
        return (_one_score(s, post) if targets == 1 else post_scores(s, post),)

    return compute


def _one_score(s: np.ndarray, post: str) -> np.ndarray:
    """A single score column as onnxruntime 1.31 post-transforms it: PROBIT only (its batched
    update skips LOGISTIC and the softmaxes for one column)."""
    return post_scores(s, post) if post == "PROBIT" else s.astype(np.float32)


def _rows(node: NodeView, coef: np.ndarray, rows: int, features: int) -> np.ndarray:
    """The (rows, features) weights of a linear model: onnxruntime reads the first rows x features
    coefficients for the features its input has (its own iris example declares 2 features against
    12 coefficients for 3 classes); too few coefficients is an error, not a read past their end."""
    if coef.size < rows * features:
        raise InvalidArgument(
            f"{node.describe()}: X has {features} features per row, so {rows} rows of weights need "
            f"{rows * features} coefficients and the node has {coef.size}: feed rows of at most "
            f"{coef.size // max(rows, 1)} features"
        )
    return coef[: rows * features].reshape(rows, features)


@REGISTRY.register("OneHotEncoder", since=1, domain=ML)
def build_one_hot_encoder(node: NodeView, ctx: KernelContext) -> Fn:
    """A trailing axis of len(categories), 1.0 where the input equals the category; unknown
    values are all-zero rows, or an error with zeros=0."""
    ints = node.attr("cats_int64s")
    cats = np.array(
        ints if ints else [_text(s) for s in node.attr("cats_strings", [])], dtype=np.int64 if ints else object
    )
    zeros = int(node.attr("zeros", 1))

    def compute(x: Any) -> tuple[Any]:
        v = x.astype(np.int64) if ints else x.astype(object)
        hot = v[..., None] == cats
        if not zeros and not hot.any(axis=-1).all():
            raise ValueError(f"{node.describe()}: an input value is not a category and zeros=0")
        return (hot.astype(np.float32),)

    return compute


@REGISTRY.register("FeatureVectorizer", since=1, domain=ML)
def build_feature_vectorizer(node: NodeView, ctx: KernelContext) -> Fn:
    """Inputs as [N, C_i] (1-D as [1, C]), each cut or zero-padded to inputdimensions[i], then
    concatenated along axis 1 as float32."""
    dims = [int(d) for d in node.attr("inputdimensions", [])]

    def compute(*xs: Any) -> tuple[Any]:
        parts = []
        for i, x in enumerate(xs):
            v = as_2d(x, node.describe()).astype(np.float32)
            d = dims[i] if i < len(dims) else v.shape[1]
            out = np.zeros((v.shape[0], d), dtype=np.float32)
            out[:, : min(d, v.shape[1])] = v[:, :d]
            parts.append(out)
        return (np.concatenate(parts, axis=1),)

    return compute


@REGISTRY.register("ArrayFeatureExtractor", since=1, domain=ML)
def build_array_feature_extractor(node: NodeView, ctx: KernelContext) -> Fn:
    """Selects features (last axis) by index."""

    def compute(x: Any, y: Any) -> tuple[Any]:
        idx = np.asarray(y).astype(np.int64).ravel()
        if idx.size and (idx.min() < 0 or idx.max() >= x.shape[-1]):
            raise IndexError(f"{node.describe()}: indices must be in [0, {x.shape[-1]}), got {idx.tolist()}")
        out = np.take(x, idx, axis=-1)
        return (out.reshape(1, -1) if x.ndim == 1 else out,)

    return compute


@REGISTRY.register("ZipMap", since=1, domain=ML)
def build_zipmap(node: NodeView, ctx: KernelContext) -> Fn:
    """Each row of scores as a {class label: score} dict; the output is a list of dicts."""
    ints = node.attr("classlabels_int64s")
    labels = [int(v) for v in ints] if ints else [_text(s) for s in node.attr("classlabels_strings", [])]

    def compute(x: Any) -> tuple[Any]:
        rows = x.reshape(1, -1) if x.ndim == 1 else x
        if rows.shape[1] != len(labels):
            raise ValueError(f"{node.describe()}: {rows.shape[1]} scores per row for {len(labels)} labels")
        return ([dict(zip(labels, (float(v) for v in row), strict=False)) for row in rows],)

    return compute


@REGISTRY.register("CategoryMapper", since=1, domain=ML)
def build_category_mapper(node: NodeView, ctx: KernelContext) -> Fn:
    """strings -> int64 through (cats_strings[i] -> cats_int64s[i]), or back; unknowns get the
    default_int64 / default_string."""
    strings = [_text(s) for s in node.attr("cats_strings", [])]
    ints = [int(v) for v in node.attr("cats_int64s", [])]
    if len(strings) != len(ints):
        raise ValueError(f"{node.describe()}: cats_strings and cats_int64s differ in length")
    to_int = dict(zip(strings, ints, strict=False))
    to_str = dict(zip(ints, strings, strict=False))
    d_int = int(node.attr("default_int64", -1))
    d_str = _text(node.attr("default_string", "_Unused"))

    def compute(x: Any) -> tuple[Any]:
        if x.dtype == object or x.dtype.kind in "US":
            return (np.array([to_int.get(str(v), d_int) for v in x.ravel()], dtype=np.int64).reshape(x.shape),)
        return (np.array([to_str.get(int(v), d_str) for v in x.ravel()], dtype=object).reshape(x.shape),)

    return compute


@REGISTRY.register("DictVectorizer", since=1, domain=ML)
def build_dict_vectorizer(node: NodeView, ctx: KernelContext) -> Fn:
    """A map as the vector over the vocabulary (absent keys are 0, keys outside it dropped), typed
    as the node's output says (onnx.reference returns float64 for float maps, hence native)."""
    vocab = [_text(s) for s in node.attr("string_vocabulary", [])] or [
        int(v) for v in node.attr("int64_vocabulary", [])
    ]
    where = {k: i for i, k in enumerate(vocab)}
    info = node.output_info(0)
    dtype = info.np_dtype if info is not None and info.np_dtype is not None else None
    rank = len(info.shape) if info is not None and info.shape is not None else 2

    def compute(x: Any) -> tuple[Any]:
        if not isinstance(x, dict):
            raise TypeError(f"{node.describe()}: input must be a map (dict), got {type(x).__name__}")
        values = list(x.values())
        out_type = dtype or (object if values and isinstance(values[0], str) else np.asarray(values).dtype)
        out = (
            np.zeros(len(vocab), dtype=out_type)
            if np.dtype(out_type).kind != "O"
            else np.full(len(vocab), "", dtype=object)
        )
        for k, v in x.items():
            if k in where:  # a key outside the vocabulary is dropped, as onnxruntime and scikit-learn do
                out[where[k]] = v
        return (out if rank == 1 else out[None],)  # [1, N] unless the graph says 1-D, as onnxruntime

    return compute


@REGISTRY.register("CastMap", since=1, domain=ML)
def build_cast_map(node: NodeView, ctx: KernelContext) -> Fn:
    """A map int64 -> value as a [1, N] tensor: DENSE orders values by key, SPARSE puts value
    k at column k of a [1, max_map] tensor (absent keys are 0 / "")."""
    to = _text(node.attr("cast_to", "TO_FLOAT"))
    form = _text(node.attr("map_form", "DENSE"))
    max_map = int(node.attr("max_map", 1))
    dtypes = {"TO_FLOAT": np.float32, "TO_INT64": np.int64, "TO_STRING": object}
    if to not in dtypes or form not in ("DENSE", "SPARSE"):
        raise ValueError(f"{node.describe()}: cast_to must be one of {sorted(dtypes)} and map_form DENSE or SPARSE")
    dtype = dtypes[to]

    def convert(values: list[Any]) -> np.ndarray:
        if dtype is object:
            return np.array([str(v) for v in values], dtype=object)
        return np.array([float(v) for v in values]).astype(dtype)

    def compute(x: Any) -> tuple[Any]:
        if not isinstance(x, dict):
            raise TypeError(f"{node.describe()}: input must be a map (dict), got {type(x).__name__}")
        keys = sorted(x)
        if form == "DENSE":
            return (convert([x[k] for k in keys]).reshape(1, -1),)
        if keys and (keys[0] < 0 or keys[-1] >= max_map):
            raise ValueError(f"{node.describe()}: keys must be in [0, {max_map}) for SPARSE, got {keys[0]}..{keys[-1]}")
        out = np.full(max_map, "" if dtype is object else 0, dtype=dtype)
        if keys:
            out[np.array(keys)] = convert([x[k] for k in keys])
        return (out.reshape(1, -1),)

    return compute


@REGISTRY.register("LinearClassifier", since=1, domain=ML)
def build_linear_classifier(node: NodeView, ctx: KernelContext) -> Fn:
    """scores = X @ W.T + b, label = the class of the largest score. With one coefficient row
    and two labels (binary) the score s gives label[1] if s > 0, and the score columns are
    [1 - v, v] with v = s, or v = logistic(s) for LOGISTIC: onnxruntime's convention (the
    runtime that converted scikit-learn models are checked against)."""
    ints = node.attr("classlabels_ints")
    labels = np.array(
        ints if ints else [_text(s) for s in node.attr("classlabels_strings", [])], dtype=np.int64 if ints else object
    )
    coef = np.array(node.attr("coefficients"), dtype=np.float64)
    icpt = np.array(node.attr("intercepts", []), dtype=np.float64)
    post = option(node, "post_transform", POSTS, "NONE")
    k = icpt.size  # onnxruntime's class count (without intercepts: the coefficients' rows, at run time)
    if (k > 1 and not labels.size) or (k == 1 and labels.size not in (0, 2)) or 0 < labels.size < k:
        raise InvalidGraph(
            f"{node.describe()}: {labels.size} class labels for {k} classes (one per intercept): a binary "
            "classifier (one intercept) takes 2 labels or none, more classes at least one label each"
        )
    if k == 1 and labels.size == 2 and post == "PROBIT":
        raise InvalidGraph(
            f"{node.describe()}: post_transform PROBIT on a binary classifier (one intercept, two labels) is not "
            "served: onnxruntime writes the probit of the score into one column and NaN or 0 into the other; "
            "use LOGISTIC or NONE"
        )

    def compute(x: Any) -> tuple[Any, Any]:
        v = as_2d(x, node.describe()).astype(np.float64)
        w = _rows(node, coef, k or coef.size // max(v.shape[1], 1), v.shape[1])
        s = v @ w.T + (icpt if icpt.size else 0.0)
        if w.shape[0] == 1 and labels.size == 2:
            p = s[:, 0]
            label = np.where(p > 0, labels[1], labels[0])
            if post == "LOGISTIC":
                p = 1.0 / (1.0 + np.exp(-p))
            return label, np.stack([1 - p, p], axis=1).astype(np.float32)
        if w.shape[0] == 1:  # one score, no labels: onnxruntime labels rows 1 / 0
            return (s[:, 0] > 0).astype(np.int64), _one_score(s, post)
        out = post_scores(s, post)
        if labels.size and labels.size < out.shape[1]:
            raise ValueError(f"{node.describe()}: {out.shape[1]} score columns for {labels.size} labels")
        idx = np.argmax(s, axis=1)
        return (labels[idx] if labels.size else idx.astype(np.int64)), out

    return compute


_LE_KINDS = (("floats", np.float32), ("int64s", np.int64), ("strings", object))


def _le_column(node: NodeView, kind: str) -> np.ndarray:
    """LabelEncoder's keys or values: the one of <kind>_floats / _int64s / _strings / _tensor set."""
    found = [
        np.array([_text(v) for v in got], dtype=object) if dtype is object else np.asarray(got, dtype=dtype)
        for suffix, dtype in _LE_KINDS
        if (got := node.attr(f"{kind}_{suffix}"))
    ]
    tensor = node.attr(f"{kind}_tensor")
    if tensor is not None:
        t = np.asarray(tensor).ravel()
        found.append(np.array([_text(v) for v in t], dtype=object) if t.dtype.kind in "OSU" else t)
    if len(found) != 1:
        names = "/".join(f"{kind}_{s}" for s, _ in _LE_KINDS) + (f"/{kind}_tensor" if node.opset >= 4 else "")
        raise InvalidGraph(f"{node.describe()}: set exactly one of {names}, {len(found)} are set")
    return found[0]


def _le_default(node: NodeView, dtype: np.dtype) -> Any:
    """default_tensor (opset 4) if set, else default_string / default_int64 / default_float by the
    values' type, with the spec's defaults "_Unused", -1 and -0.0."""
    tensor = node.attr("default_tensor")
    if tensor is not None:
        t = np.asarray(tensor).ravel()
        if t.size != 1:
            raise InvalidGraph(f"{node.describe()}: default_tensor must hold one value, got {t.size}")
        return _text(t[0]) if dtype.kind == "O" else t.astype(dtype)[0]
    if dtype.kind == "O":
        return _text(node.attr("default_string", "_Unused"))
    if dtype.kind == "f":
        return dtype.type(node.attr("default_float", -0.0))
    return dtype.type(node.attr("default_int64", -1))


def _is_text(x: np.ndarray) -> bool:
    return x.dtype == object or x.dtype.kind in "US"


def _le_lookup(keys: np.ndarray, values: np.ndarray, default: Any, nan_key: bool, where: str) -> Fn:
    """x -> values at x's key (the first of repeated keys, as onnxruntime's emplace), else
    default: a dict for strings, a binary search over the sorted keys for numbers (a NaN key
    matches NaN from opset 4 on, as onnxruntime's NaN-aware hash)."""
    if keys.dtype == object:
        table: dict[str, Any] = {}
        for k, v in zip(keys.tolist(), values.tolist(), strict=True):
            table.setdefault(k, v)

        def by_text(x: np.ndarray) -> np.ndarray:
            if not _is_text(x):
                raise InvalidArgument(f"{where}: the keys are strings, X is {x.dtype}")
            out = [table.get(v if isinstance(v, str) else _text(v), default) for v in x.ravel().tolist()]
            return np.array(out, dtype=values.dtype).reshape(x.shape)

        return by_text
    nan = np.isnan(keys) if keys.dtype.kind == "f" else np.zeros(keys.shape, dtype=bool)
    nan_value = values[np.flatnonzero(nan)[0]] if nan_key and nan.any() else None
    uk, first = np.unique(keys[~nan], return_index=True)
    uv = values[~nan][first]

    def by_number(x: np.ndarray) -> np.ndarray:
        if _is_text(x):
            raise InvalidArgument(f"{where}: the keys are numbers ({keys.dtype}), X is strings")
        if not uk.size:
            out = np.full(x.shape, default, dtype=values.dtype)
        else:
            pos = np.minimum(np.searchsorted(uk, x), uk.size - 1)
            out = np.where(uk[pos] == x, uv[pos], np.array(default, dtype=values.dtype))
        if nan_value is not None and x.dtype.kind == "f":
            out = np.where(np.isnan(x), nan_value, out)
        return out.astype(values.dtype, copy=False)

    return by_number


@REGISTRY.register("LabelEncoder", since=1, domain=ML)
def build_label_encoder(node: NodeView, ctx: KernelContext) -> Fn:
    """Maps each element through keys -> values (opset 2, 4), or strings <-> their index in
    classes_strings (opset 1: a string maps to its last index, an int to its string); elements
    with no key get the default."""
    where = node.describe()
    if node.opset < 2:
        classes = np.array([_text(v) for v in node.attr("classes_strings", [])], dtype=object)
        index = {c: i for i, c in enumerate(classes.tolist())}  # the last of repeated strings, as onnxruntime
        d_int, d_str = int(node.attr("default_int64", -1)), _text(node.attr("default_string", "_Unused"))

        def compute_v1(x: np.ndarray) -> tuple[np.ndarray]:
            if _is_text(x):
                out = [index.get(v if isinstance(v, str) else _text(v), d_int) for v in x.ravel().tolist()]
                return (np.array(out, dtype=np.int64).reshape(x.shape),)
            if x.dtype.kind not in "iu":
                raise InvalidArgument(f"{where}: X must be int64 or string, got {x.dtype}")
            hit = (x >= 0) & (x < classes.size)
            picked = classes[np.where(hit, x, 0)] if classes.size else np.full(x.shape, d_str, dtype=object)
            return (np.where(hit, picked, d_str).astype(object),)

        return compute_v1
    keys, values = _le_column(node, "keys"), _le_column(node, "values")
    if keys.size != values.size:
        raise InvalidGraph(f"{where}: {keys.size} keys for {values.size} values; they pair up one to one")
    lookup = _le_lookup(keys, values, _le_default(node, values.dtype), node.opset >= 4, where)
    return lambda x: (lookup(x),)
