"""Real exported models on the reference EP against onnxruntime's CPU EP (atol 1e-4, rtol 1e-3).

Inputs are deterministic random data at realistic shapes: magika's 2048-token window, a
512-sample silero chunk with its state and sample rate, PP-OCR det at 1x3x320x320 and cls at
1x3x48x192. Models come from pinned, hash-checked wheels (``ep_core.tools.zoo``)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

MODELS = [
    "magika",
    "silero_vad",
    "silero_vad_16k_op15",
    "silero_vad_op18_ifless",
    "silero_vad_half",
    "silero_vad_16k_sequence",
    "ppocr_det",
    "ppocr_cls",
]


def model_feed(name: str) -> dict[str, np.ndarray]:
    """Deterministic inputs of the shapes each model is used at."""
    rng = np.random.default_rng(0)
    if name == "magika":
        return {"bytes": rng.integers(0, 257, size=(1, 2048)).astype(np.int32)}
    if name == "ppocr_det":
        return {"x": rng.random((1, 3, 320, 320), dtype=np.float32)}
    if name == "ppocr_cls":
        return {"x": rng.random((1, 3, 48, 192), dtype=np.float32)}
    if name == "silero_vad_16k_sequence":
        return {
            "input": (rng.standard_normal((4, 576)) * 0.1).astype(np.float32),
            "h": (rng.standard_normal((1, 1, 128)) * 0.1).astype(np.float32),
            "c": (rng.standard_normal((1, 1, 128)) * 0.1).astype(np.float32),
        }
    feed = {
        "input": (rng.standard_normal((1, 512)) * 0.1).astype(np.float32),
        "state": (rng.standard_normal((2, 1, 128)) * 0.1).astype(np.float32),
    }
    if name != "silero_vad_half":  # the float16 export has no sr input
        feed["sr"] = np.array(16000, dtype=np.int64)
    return feed


@pytest.mark.slow
@pytest.mark.parametrize("name", MODELS)
def test_real_model_matches_onnxruntime(name: str) -> None:
    ort = pytest.importorskip("onnxruntime")
    import ep_core
    from ep_core.tools.zoo import fetch_model

    path = str(fetch_model(name))
    feed = model_feed(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sess = ep_core.InferenceSession(path, providers=["CpuReferenceExecutionProvider"])
        got = sess.run(None, feed)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.log_severity_level = 3
    want = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"]).run(None, feed)
    assert len(got) == len(want)
    for g, w, out in zip(got, want, sess.get_outputs(), strict=False):
        g = np.asarray(g)
        assert g.shape == w.shape, f"{name} output {out.name}: shape {g.shape} vs onnxruntime {w.shape}"
        assert g.dtype == w.dtype, f"{name} output {out.name}: dtype {g.dtype} vs onnxruntime {w.dtype}"
        np.testing.assert_allclose(
            g.astype(np.float64), w.astype(np.float64), atol=1e-4, rtol=1e-3, err_msg=f"{name} output {out.name}"
        )


def test_real_model_uses_native_kernels_for_nn_ops() -> None:
    """The heavy ops of the real models are native kernels, not onnx.reference delegates."""
    from ep_cpu_reference.registry import registry

    reg = registry()
    for op in (
        "Conv",
        "ConvTranspose",
        "BatchNormalization",
        "Resize",
        "LSTM",
        "GlobalAveragePool",
        "GlobalMaxPool",
        "MaxPool",
        "MatMul",
        "Gemm",
        "Softmax",
    ):
        entries = [e for e in reg if e.kernel_def.op_type == op and e.kernel_def.domain_key == "ai.onnx"]
        assert entries and not any(e.kernel_def.delegated for e in entries), op
