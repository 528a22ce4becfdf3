"""com.microsoft generation loops over a decoder subgraph: GreedySearch for decoder-only (GPT-2
style, model_type 0) models, following onnxruntime 1.31's CPU implementation
(contrib_ops/cpu/transformers/greedy_search_impl_gpt.h and logits_processor.cc).

The decoder subgraph runs through the session like a control-flow body (``ctx.subgraph``), so its
nodes are partitioned and planned like the main graph; outer-scope values reach it by name. The
decoder takes input_ids, position_ids, attention_mask, past_0..past_{L-1} and gives logits,
present_0..present_{L-1}; pasts start empty ([2, B, N, 0, H] from the subgraph's declared shapes).

Where onnxruntime leaves a row unfinished memory (every row ended early), the row holds
pad_token_id here: onnxruntime's output there is uninitialised."""

from __future__ import annotations

from typing import Any

import numpy as np

from ep_core.sdk.errors import NotImplementedByAnyEp
from ep_core.sdk.graph import NodeView
from ep_core.sdk.kernels import KernelContext
from ep_cpu_reference.kernels._contrib_seq_schemas import register_generation_schemas
from ep_cpu_reference.kernels._ms_schema import MS
from ep_cpu_reference.kernels.nn_common import fail
from ep_cpu_reference.registry import REGISTRY

Array = np.ndarray
LOWEST = np.finfo(np.float32).min

register_generation_schemas()


class _Decoder:
    """The decoder subgraph: its I/O contract checked once, run with numpy feeds."""

    def __init__(self, node: NodeView, ctx: KernelContext) -> None:
        view = node.subgraphs.get("decoder")
        if view is None:
            raise fail(node, "the decoder graph attribute is required")
        self.runner = ctx.subgraph("decoder")
        infos = view.inputs
        names = [i.name for i in infos]
        if len(names) < 3 or len(self.runner.output_names) != len(names) - 2:
            raise fail(
                node,
                "the decoder must take input_ids, position_ids, attention_mask, past_0..past_{L-1} and give "
                f"logits, present_0..present_{{L-1}}; it takes {names} and gives {list(self.runner.output_names)}",
            )
        self.id_types = [np.dtype(i.np_dtype or np.int32) for i in infos[:3]]
        self.pasts: list[tuple[np.dtype, int, int]] = []
        for info in infos[3:]:
            shape = info.shape
            if shape is None or len(shape) != 5 or not isinstance(shape[2], int) or not isinstance(shape[4], int):
                raise fail(
                    node,
                    f"decoder input {info.name} must be [2, batch, num_heads, past, head_size] with "
                    f"num_heads and head_size fixed, got {shape}",
                )
            self.pasts.append((np.dtype(info.np_dtype or np.float32), shape[2], shape[4]))

    def first(self, ids: Array, pos: Array, mask: Array) -> list[Array]:
        b = ids.shape[0]
        pasts = [np.zeros((2, b, n, 0, h), dt) for dt, n, h in self.pasts]
        return [ids, pos, mask, *pasts]

    def run(self, feeds: list[Array], outer: dict[str, Any]) -> list[Array]:
        cast = [np.asarray(f).astype(t, copy=False) for f, t in zip(feeds[:3], self.id_types)]
        return self.runner.run(cast + feeds[3:], outer)


class _Processors:
    """onnxruntime's logits processors in its order: repetition penalty, no-repeat n-gram, vocab
    mask, prefix vocab mask (first step only), min length; each writes the lowest float."""

    def __init__(
        self,
        node: NodeView,
        penalty: float,
        ngram: int,
        vocab_mask: Array | None,
        prefix_mask: Array | None,
        min_length: int,
        eos: int,
    ) -> None:
        self.node, self.penalty, self.ngram, self.eos = node, np.float32(penalty), ngram, eos
        self.vocab_mask, self.prefix_mask, self.min_length = vocab_mask, prefix_mask, min_length

    def __call__(self, scores: Array, seqs: Array, step: int, rows_per_batch: int = 1) -> Array:
        rows, vocab = scores.shape
        length = seqs.shape[1]
        if self.penalty != 1.0:
            seen = np.zeros((rows, vocab), bool)
            seen[np.arange(rows)[:, None], seqs] = True
            scores = np.where(seen, np.where(scores < 0, scores * self.penalty, scores / self.penalty), scores)
        if 0 < self.ngram <= length:
            n = self.ngram
            windows = np.lib.stride_tricks.sliding_window_view(seqs, n, axis=1)  # [R, W, n]
            hit = np.all(windows[:, :, : n - 1] == seqs[:, None, length - n + 1 :], axis=2)  # [R, W]
            r, w = np.nonzero(hit)
            scores = scores.copy()
            scores[r, windows[r, w, n - 1]] = LOWEST
        if self.vocab_mask is not None:
            scores = np.where(self.vocab_mask[None, :] == 0, LOWEST, scores)
        if self.prefix_mask is not None and step == 1:
            scores = np.where(np.repeat(self.prefix_mask, rows_per_batch, axis=0) == 0, LOWEST, scores)
        if self.min_length > 0 and length < self.min_length:
            scores = scores.copy()
            scores[:, self.eos] = LOWEST
        return scores


def _scalar(x: Array | None, default: Any, kind: type) -> Any:
    return default if x is None else kind(np.asarray(x).reshape(-1)[0])


def _gpt_only(node: NodeView) -> None:
    """Only the decoder-only form is served: encoder-decoder (T5/BART, model_type 1) and Whisper
    (2) need the encoder loop, and init_decoder is a GPU-oriented first-step graph."""
    model_type = int(node.attr("model_type", 0))
    if model_type != 0:
        raise NotImplementedByAnyEp(
            f"{node.describe()}: model_type {model_type} (encoder-decoder / Whisper) is not served; only the "
            "decoder-only form (model_type 0) is, run the model with onnxruntime or export a decoder-only loop"
        )
    for name in ("encoder", "init_decoder"):
        if name in node.subgraphs:
            raise NotImplementedByAnyEp(
                f"{node.describe()}: the {name} subgraph is not served (decoder-only model_type 0 takes the "
                "decoder alone); export without it"
            )
    if int(node.attr("decoder_start_token_id", -1)) != -1:
        raise fail(node, "decoder_start_token_id is for encoder-decoder models; a decoder-only model takes -1")


def _prompt(node: NodeView, ids: Array, pad: int, mask: Array | None) -> tuple[Array, Array, Array]:
    """(attention_mask, position_ids, next position) as onnxruntime's CreateGptInputs makes them:
    pad tokens get position 0 and the others count up; the mask is 0 on pad tokens unless given."""
    if ids.ndim != 2:
        raise fail(node, f"input_ids must be [batch, sequence], got {list(ids.shape)}")
    real = (ids != pad).astype(np.int32)
    pos = np.where(real > 0, np.cumsum(real, axis=1) - 1, 0).astype(np.int32)
    if mask is None:
        mask = real
    elif mask.shape != ids.shape:
        raise fail(node, f"attention_mask must be {list(ids.shape)}, got {list(mask.shape)}")
    return mask.astype(np.int32), pos, real.sum(axis=1).astype(np.int32)


def _vocab_checks(node: NodeView, vocab: int, ids: Array, vmask: Array | None, pmask: Array | None, batch: int) -> None:
    attr = int(node.attr("vocab_size", -1))
    if attr not in (-1, vocab):
        raise fail(node, f"vocab_size={attr} differs from the decoder's logits ({vocab})")
    if ids.size and (ids.min() < 0 or ids.max() >= vocab):
        raise fail(node, f"input_ids must lie in [0, {vocab})")
    if vmask is not None and vmask.shape != (vocab,):
        raise fail(node, f"vocab_mask must be [{vocab}], got {list(vmask.shape)}")
    if pmask is not None and pmask.shape != (batch, vocab):
        raise fail(node, f"prefix_vocab_mask must be [{batch}, {vocab}], got {list(pmask.shape)}")


# ------------------------------------------------------------------------------------ GreedySearch
@REGISTRY.register("GreedySearch", domain=MS)
def build_greedy_search(node: NodeView, ctx: KernelContext) -> Any:
    """Each step: the decoder's last logits, the logits processors, argmax. A row that gives
    eos_token_id records pad_token_id and keeps giving it; the loop stops when every row has
    ended or the sequences reach max_length. Output [batch, max_length]."""
    _gpt_only(node)
    decoder = _Decoder(node, ctx)
    eos, pad = int(node.attr("eos_token_id")), int(node.attr("pad_token_id"))
    ngram = int(node.attr("no_repeat_ngram_size", 0))
    n_in = len(node.inputs)

    def compute(*args: Any) -> tuple[Array]:
        explicit = list(args[:n_in]) + [None] * (7 - n_in)
        outer = dict(zip(node.implicit_inputs, args[n_in:], strict=False))
        ids, max_len, min_len, penalty, vmask, pmask, amask = explicit[:7]
        ids = np.asarray(ids, np.int32)
        batch, s = ids.shape if ids.ndim == 2 else (0, 0)
        max_length = _scalar(max_len, 0, int)
        if max_length <= s:
            raise fail(node, f"max_length {max_length} must exceed the input length {s}")
        mask, pos, nxt = _prompt(node, ids, pad, amask)
        procs = _Processors(node, _scalar(penalty, 1.0, float), ngram, vmask, pmask, _scalar(min_len, 0, int), eos)
        feeds = decoder.first(ids, pos, mask)
        seqs, ended = ids, np.zeros(batch, bool)
        step, checked = 0, False
        while seqs.shape[1] < max_length:
            step += 1
            outs = decoder.run(feeds, outer)
            logits = np.asarray(outs[0])
            if not checked:
                _vocab_checks(node, logits.shape[-1], ids, vmask, pmask, batch)
                checked = True
            scores = procs(logits[:, -1, :].astype(np.float32), seqs, step)
            tok = np.argmax(scores, axis=1).astype(np.int32)
            tok = np.where(ended, pad, tok)
            ended |= tok == eos
            tok = np.where(tok == eos, pad, tok).astype(np.int32)
            seqs = np.concatenate((seqs, tok[:, None]), axis=1)
            if ended.all():
                break
            if step > 1:
                nxt = nxt + 1
            mask = np.concatenate((mask, np.ones((batch, 1), np.int32)), axis=1)
            feeds = [tok[:, None], nxt[:, None].copy(), mask, *outs[1:]]
        out = np.full((batch, max_length), pad, np.int32)
        out[:, : seqs.shape[1]] = seqs
        return (out,)

    return compute


# ------------------------------------------------------------------------------------ BeamSearch
class _Hypotheses:
    """One batch entry's finished hypotheses: the best ``beams`` by sum_logprobs / length**lp."""

    def __init__(self, beams: int, length_penalty: float, early_stopping: bool) -> None:
        self.beams, self.lp, self.early = beams, np.float32(length_penalty), early_stopping
        self.items: list[tuple[float, Array]] = []  # (score, tokens)

    def worst(self) -> float:
        return min(s for s, _ in self.items) if self.items else 1e9

    def add(self, tokens: Array, sum_logprobs: float) -> None:
        score = float(np.float32(sum_logprobs) / np.power(np.float32(len(tokens)), self.lp))
        if len(self.items) < self.beams or score > self.worst():
            self.items.append((score, tokens))
            if len(self.items) > self.beams:
                self.items.remove(min(self.items, key=lambda it: it[0]))

    def done(self, best_sum_logprobs: float, length: int) -> bool:
        if len(self.items) < self.beams:
            return False
        if self.early:
            return True
        return self.worst() >= float(np.float32(best_sum_logprobs) / np.power(np.float32(length), self.lp))


def _log_softmax(x: Array) -> Array:
    z = x - x.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


@REGISTRY.register("BeamSearch", domain=MS)
def build_beam_search(node: NodeView, ctx: KernelContext) -> Any:
    """Beam search as onnxruntime's CPU kernel (Hugging Face's algorithm): per step the decoder's
    last log-softmax scores go through the logits processors, add each beam's running score, and
    the best 2*num_beams (token, beam) pairs per batch entry refill the beams; a pair ending in
    eos_token_id among the first num_beams becomes a finished hypothesis (without the eos).
    Outputs: sequences [B, num_return_sequences, max_length] (pad after the end), optional
    sequences_scores [B, num_return_sequences] and scores [max_length - S, B, num_beams, V]."""
    _gpt_only(node)
    decoder = _Decoder(node, ctx)
    eos, pad = int(node.attr("eos_token_id")), int(node.attr("pad_token_id"))
    ngram = int(node.attr("no_repeat_ngram_size", 0))
    early = bool(int(node.attr("early_stopping", 0)))
    n_in, n_out = len(node.inputs), len(node.outputs)

    def compute(*args: Any) -> tuple[Array | None, ...]:
        explicit = list(args[:n_in]) + [None] * (12 - n_in)
        outer = dict(zip(node.implicit_inputs, args[n_in:], strict=False))
        ids, max_len, min_len, beams_t, n_ret_t, lp_t, penalty, vmask, pmask, amask = explicit[:10]
        if explicit[10] is not None or explicit[11] is not None:
            raise NotImplementedByAnyEp(
                f"{node.describe()}: decoder_input_ids and logits_processor are for encoder-decoder/Whisper models; "
                "a decoder-only model takes neither"
            )
        ids = np.asarray(ids)
        if ids.dtype != np.int32:
            raise NotImplementedByAnyEp(f"{node.describe()}: float input_ids (audio features) are for Whisper")
        batch, s = ids.shape if ids.ndim == 2 else (0, 0)
        max_length, beams, n_ret = _scalar(max_len, 0, int), _scalar(beams_t, 1, int), _scalar(n_ret_t, 1, int)
        if max_length <= s:
            raise fail(node, f"max_length {max_length} must exceed the input length {s}")
        if beams < 1 or not 1 <= n_ret <= beams:
            raise fail(node, f"num_beams ({beams}) must be >= 1 and num_return_sequences ({n_ret}) in [1, num_beams]")
        mask, pos, nxt = _prompt(node, ids, pad, amask)
        rows = batch * beams
        mask, nxt, pos, seqs = (np.repeat(x, beams, axis=0) for x in (mask, nxt, pos, ids))  # rows b*beams+k
        procs = _Processors(node, _scalar(penalty, 1.0, float), ngram, vmask, pmask, _scalar(min_len, 0, int), eos)
        hyps = [_Hypotheses(beams, _scalar(lp_t, 1.0, float), early) for _ in range(batch)]
        done = np.zeros(batch, bool)
        feeds = decoder.first(seqs, pos, mask)
        beam_scores = np.zeros((batch, beams), np.float32)
        beam_scores[:, 1:] = np.float32(-1e9)
        beam_scores = beam_scores.reshape(-1)
        all_scores: list[Array] = []
        step, vocab = 0, 0
        while seqs.shape[1] < max_length:
            step += 1
            outs = decoder.run(feeds, outer)
            logits = np.asarray(outs[0])
            if step == 1:
                vocab = logits.shape[-1]
                _vocab_checks(node, vocab, ids, vmask, pmask, batch)
            scores = _log_softmax(logits[:, -1, :].astype(np.float32))
            scores = procs(scores, seqs, step, beams) + beam_scores[:, None]
            all_scores.append(scores.reshape(batch, beams, vocab))
            flat = scores.reshape(batch, beams * vocab)
            top = np.argsort(-flat, axis=1, kind="stable")[:, : 2 * beams]
            top_scores = np.take_along_axis(flat, top, axis=1)
            length = seqs.shape[1]
            new_scores = np.zeros((batch, beams), np.float32)
            new_tokens = np.full((batch, beams), pad, np.int32)
            new_index = np.zeros((batch, beams), np.int64)
            for b in range(batch):  # the scorer walks a handful of candidates per batch entry
                if done[b]:
                    continue
                filled = 0
                for j in range(2 * beams):
                    tok, src = int(top[b, j] % vocab), b * beams + int(top[b, j] // vocab)
                    if tok == eos:
                        if j < beams:
                            hyps[b].add(seqs[src].copy(), float(top_scores[b, j]))
                    else:
                        new_scores[b, filled], new_tokens[b, filled], new_index[b, filled] = top_scores[b, j], tok, src
                        filled += 1
                    if filled == beams:
                        break
                # onnxruntime 1.31 takes the best running score from the flat candidate list at
                # b*num_beams (not b*2*num_beams): the same for batch 1, and what decides when an
                # entry is done for larger batches, so it is kept to give onnxruntime's outputs
                best = top_scores.reshape(-1)[b * beams : b * beams + 2 * beams].max()
                done[b] = hyps[b].done(float(best), length)
            beam_scores = new_scores.reshape(-1)
            index = new_index.reshape(-1)
            tokens = new_tokens.reshape(-1)
            seqs = np.concatenate((seqs[index], tokens[:, None]), axis=1)
            if done.all():
                break
            if step > 1:
                nxt = nxt + 1
            mask = np.concatenate((mask, np.ones((rows, 1), np.int32)), axis=1)
            pasts = [np.asarray(p)[:, index] for p in outs[1:]]
            feeds = [tokens[:, None], nxt[:, None].copy(), mask, *pasts]
        for b in range(batch):  # finalize the open beams
            if not done[b]:
                for k in range(beams):
                    hyps[b].add(seqs[b * beams + k], float(beam_scores[b * beams + k]))
        out = np.full((batch, n_ret, max_length), pad, np.int32)
        seq_scores = np.zeros((batch, n_ret), np.float32)
        for b in range(batch):
            best = sorted(hyps[b].items, key=lambda it: -it[0])[:n_ret]
            for r, (score, tokens) in enumerate(best):
                out[b, r, : len(tokens)] = tokens
                seq_scores[b, r] = score
        outs_: list[Array | None] = [out]
        if n_out > 1:
            outs_.append(seq_scores if node.outputs[1] else None)
        if n_out > 2:
            grid = np.zeros((max_length - s, batch, beams, vocab), np.float32)
            grid[: len(all_scores)] = np.stack(all_scores)
            outs_.append(grid if node.outputs[2] else None)
        return tuple(outs_)

    return compute
