"""String ops: StringConcat, StringSplit, StringNormalizer, RegexFullMatch, TfIdfVectorizer. Strings are object
arrays of Python ``str``; the loops are per element because NumPy has no vectorised form for
Python strings of unbounded length."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np

from ep_core.sdk.errors import NotImplementedByAnyEp
from ep_core.sdk.graph import NodeView
from ep_core.sdk.kernels import KernelContext
from ep_cpu_reference.registry import REGISTRY

Fn = Callable[..., Any]

_concat = np.frompyfunc(lambda a, b: str(a) + str(b), 2, 1)


def _text(v: Any) -> Any:
    return v.decode() if isinstance(v, bytes) else v


@REGISTRY.register("StringConcat", since=20)
def build_string_concat(node: NodeView, ctx: KernelContext) -> Fn:
    """Elementwise concatenation with multidirectional broadcasting."""

    def compute(a: Any, b: Any) -> tuple[Any]:
        return (np.asarray(_concat(a, b), dtype=object).reshape(np.broadcast_shapes(a.shape, b.shape)),)

    return compute


@REGISTRY.register("RegexFullMatch", since=20)
def build_regex_full_match(node: NodeView, ctx: KernelContext) -> Fn:
    """Whether each whole string matches ``pattern`` (compiled once; RE2 syntax is a subset of
    Python's for the features the spec uses)."""
    pattern = _text(node.attr("pattern"))
    try:
        rx = re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"{node.describe()}: invalid pattern {pattern!r}: {exc}") from exc

    def compute(x: Any) -> tuple[Any]:
        flat = [rx.fullmatch(str(s)) is not None for s in x.ravel()]
        return (np.array(flat, dtype=bool).reshape(x.shape),)

    return compute


@REGISTRY.register("StringSplit", since=20)
def build_string_split(node: NodeView, ctx: KernelContext) -> Fn:
    """Splits on ``delimiter`` (absent or empty: runs of spaces, ' ' only as in onnxruntime, the
    ends trimmed, the last piece too), at most ``maxsplit`` times; Y pads each row with "" to the
    longest split, Z counts the pieces."""
    delim = _text(node.attr("delimiter", "")) or None
    maxsplit = node.attr("maxsplit")
    limit = -1 if maxsplit is None else int(maxsplit)

    def compute(x: Any) -> tuple[Any, Any]:
        if delim is None:
            trimmed = (str(s).strip(" ") for s in x.ravel())
            pieces = [([t] if limit == 0 else re.split(" +", t, maxsplit=max(limit, 0))) if t else [] for t in trimmed]
        else:
            pieces = [str(s).split(delim, limit) for s in x.ravel()]
            pieces = [[] if p == [""] else p for p in pieces]  # "" splits into nothing
        width = max((len(p) for p in pieces), default=0)
        y = np.full((len(pieces), width), "", dtype=object)
        for i, p in enumerate(pieces):
            y[i, : len(p)] = p
        z = np.array([len(p) for p in pieces], dtype=np.int64).reshape(x.shape)
        return y.reshape(x.shape + (width,)), z

    return compute


def _simple_case(s: str, upper: bool) -> str:
    """Character by character, as onnxruntime's towlower/towupper (Unicode's simple mappings):
    Python's full mappings lengthen "ß" to "SS" and "İ" to "i" + a combining dot, and end a word
    in a final sigma "ς" where onnxruntime keeps "σ"."""
    if s.isascii():
        return s.upper() if upper else s.lower()
    out = []
    for c in s:
        m = c.upper() if upper else c.lower()
        out.append(m if len(m) == 1 else "i" if c == "\u0130" and not upper else c)
    return "".join(out)


def simple_lower(s: str) -> str:
    return _simple_case(s, False)


def simple_upper(s: str) -> str:
    return _simple_case(s, True)


@REGISTRY.register("StringNormalizer", since=10)
def build_string_normalizer(node: NodeView, ctx: KernelContext) -> Fn:
    """Drops stopwords (case-insensitively unless is_case_sensitive), then changes case.
    Input is [C] or [1, C]; if nothing is left the output is a single "" of the same rank."""
    action = _text(node.attr("case_change_action", "NONE"))
    if action not in ("NONE", "LOWER", "UPPER"):
        raise ValueError(f"{node.describe()}: case_change_action must be NONE, LOWER or UPPER, got {action!r}")
    sensitive = bool(node.attr("is_case_sensitive", 0))
    locale = _text(node.attr("locale", "en_US.UTF-8"))
    if locale.lower().startswith(("tr", "az")):  # every other UTF-8 locale cases as Unicode's simple mappings
        raise NotImplementedByAnyEp(
            f"{node.describe()}: locale {locale!r}: Turkic dotted/dotless i casing is not implemented; "
            "the other locales' case mappings (Unicode's simple mappings) are"
        )
    stops = [_text(s) for s in node.attr("stopwords", [])]
    stop_set = set(stops) if sensitive else {simple_lower(s) for s in stops}
    change = {"NONE": lambda s: s, "LOWER": simple_lower, "UPPER": simple_upper}[action]

    def compute(x: Any) -> tuple[Any]:
        if x.ndim not in (1, 2) or x.ndim == 2 and x.shape[0] != 1:
            raise ValueError(f"{node.describe()}: input must have shape [C] or [1, C], got {x.shape}")
        words = [str(s) for s in x.ravel()]
        kept = [change(w) for w in words if (w if sensitive else simple_lower(w)) not in stop_set]
        if not kept:
            kept = [""]
        out = np.array(kept, dtype=object)
        return (out.reshape(1, -1) if x.ndim == 2 else out,)

    return compute


class _GramIndex:
    """The pool's n-grams as int64 keys (token ids in base ``len(vocabulary) + 1``, 0 for a token
    outside the pool), counted for all rows at once with NumPy: token ids from one ``np.unique``
    over the batch, each n-gram's key from shifted id columns, its column by a binary search,
    the counts by one ``bincount``. Char n-gram pipelines (skl2onnx's TfidfVectorizer with
    analyzer='char') ran 23x onnxruntime through a tuple lookup per n-gram."""

    def __init__(self, table: dict[tuple[Any, ...], int], lo: int, hi: int, max_skip: int, width: int) -> None:
        self.vocab = {t: i + 1 for i, t in enumerate(sorted({t for gram in table for t in gram}, key=repr))}
        self.base = len(self.vocab) + 1
        self.lo, self.hi, self.max_skip, self.width = lo, hi, max_skip, width
        self.fits = self.base**hi < 2**62
        keys = np.array([self._key([self.vocab[t] for t in gram]) for gram in table] if self.fits else [], np.int64)
        order = np.argsort(keys)
        self.keys, self.columns = keys[order], np.array(list(table.values()), np.int64)[order]
        self.by_length = [sum(len(g) == n for g in table) for n in range(hi + 1)]

    def _key(self, ids: list[int]) -> int:
        key = 0
        for i in ids:
            key = key * self.base + i
        return key

    def counts(self, rows: np.ndarray) -> np.ndarray | None:
        if not self.fits:
            return None
        n_rows, length = rows.shape
        out = np.zeros(n_rows * self.width, np.float32)
        if rows.size == 0 or not self.keys.size:
            return out.reshape(n_rows, self.width)
        flat = rows.ravel()
        if flat.dtype == object:  # fixed-width text sorts in C; Python strings compare one call at a time
            flat = flat.astype(str)
        tokens, inverse = np.unique(flat, return_inverse=True)
        ids = np.array([self.vocab.get(t.item(), 0) for t in tokens], np.int64)[inverse]
        ids = ids.reshape(n_rows, length)
        row_of = np.arange(n_rows, dtype=np.int64)[:, None] * self.width
        for n in range(self.lo, self.hi + 1):
            if not self.by_length[n]:
                continue
            for skip in range(self.max_skip + 1 if n > 1 else 1):
                span = (n - 1) * (skip + 1) + 1
                if span > length:
                    continue
                count = length - span + 1
                key = np.zeros((n_rows, count), np.int64)
                known = np.ones((n_rows, count), bool)
                for j in range(n):
                    part = ids[:, j * (skip + 1) : j * (skip + 1) + count]
                    key = key * self.base + part
                    known &= part > 0
                at = np.searchsorted(self.keys, key)
                hit = known & (at < self.keys.size) & (self.keys[np.minimum(at, self.keys.size - 1)] == key)
                out += np.bincount((row_of + self.columns[np.minimum(at, self.keys.size - 1)])[hit], minlength=out.size)
        return out.reshape(n_rows, self.width)


@REGISTRY.register("TfIdfVectorizer", since=9)
def build_tfidf_vectorizer(node: NodeView, ctx: KernelContext) -> Fn:
    """Counts the pool's n-grams (lengths min..max_gram_length, gaps up to max_skip_count)
    per row; TF gives counts, IDF 1-or-0 times the weight, TFIDF counts times the weight.

    The pool lists n-grams by length: ngram_counts[i] is where the (i+1)-grams start and
    ngram_indexes[k] the output column of the k-th n-gram."""
    mode = _text(node.attr("mode"))
    if mode not in ("TF", "IDF", "TFIDF"):
        raise ValueError(f"{node.describe()}: mode must be TF, IDF or TFIDF, got {mode!r}")
    lo, hi = int(node.attr("min_gram_length")), int(node.attr("max_gram_length"))
    max_skip = int(node.attr("max_skip_count"))
    if not 1 <= lo <= hi or max_skip < 0:  # onnxruntime refuses these at session creation too
        raise ValueError(
            f"{node.describe()}: needs 1 <= min_gram_length ({lo}) <= max_gram_length ({hi}) and max_skip_count ({max_skip}) >= 0"
        )
    starts = [int(v) for v in node.attr("ngram_counts")]
    columns = [int(v) for v in node.attr("ngram_indexes")]
    pool_ints = node.attr("pool_int64s")
    pool = [int(v) for v in pool_ints] if pool_ints else [_text(s) for s in node.attr("pool_strings", [])]
    if not pool:
        raise ValueError(f"{node.describe()}: pool_int64s or pool_strings must list the n-grams to count")
    weights = node.attr("weights")
    bounds = [*starts, len(pool)]
    if not starts or starts[0] < 0 or any(b < a for a, b in zip(bounds, bounds[1:])) or min(columns, default=0) < 0:
        raise ValueError(
            f"{node.describe()}: ngram_counts {starts} must rise within the pool and ngram_indexes be >= 0"
        )
    width = max(columns) + 1 if columns else 0
    table: dict[tuple[Any, ...], int] = {}
    k = 0
    for i, start in enumerate(starts):
        n = i + 1
        end = starts[i + 1] if i + 1 < len(starts) else len(pool)
        for p in range(start, end, n):
            table[tuple(pool[p : p + n])] = columns[k]
            k += 1
    w = np.float32(1.0) if not weights else np.array(weights, dtype=np.float32)  # nothing of width at creation

    grams = _GramIndex(table, lo, hi, max_skip, width)

    def count_row(row: list[Any]) -> np.ndarray:
        counts = np.zeros(width, dtype=np.float32)
        for n in range(lo, hi + 1):
            for skip in range(max_skip + 1 if n > 1 else 1):
                step = skip + 1
                span = (n - 1) * step + 1
                for s in range(len(row) - span + 1):
                    col = table.get(tuple(row[s : s + span : step]))
                    if col is not None:
                        counts[col] += 1
        return counts

    def compute(x: Any) -> tuple[Any]:
        rows = x.reshape(1, -1) if x.ndim == 1 else x
        counts = grams.counts(rows)
        if counts is None:  # n-gram keys too wide for int64: one tuple per n-gram
            conv = int if pool_ints else str
            counts = (
                np.stack([count_row([conv(v) for v in r]) for r in rows])
                if rows.size
                else np.zeros((rows.shape[0], width), np.float32)
            )
        if mode == "IDF":
            counts = (counts > 0).astype(np.float32) * w
        elif mode == "TFIDF":
            counts = counts * w
        return (counts.reshape(width) if x.ndim == 1 else counts,)

    return compute
