"""Recipes for zoo models that no wheel ships: made at fetch time from pinned wheels, then pinned by sha256.

scikit-learn models converted with skl2onnx (tree ensembles, SVMs) and a QDQ model quantized by
onnxruntime's own quantizer are what exported classical-ML and static-int8 models look like; no
PyPI wheel ships small ones. Each recipe trains on a data set scikit-learn itself ships, with a
fixed ``random_state``, in a child process whose ``sys.path`` starts with the pinned wheels
(``ep_core.tools.zoo`` unpacks and verifies them) and with one thread, so the bytes are the same
on every run; the zoo checks them against the pinned sha256 and refuses a drift.

Run as ``python -m ep_core.tools.zoo_build RECIPE OUT [SOURCE]``."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

OPSETS = {"": 17, "ai.onnx.ml": 3}


def _save(model: Any, out: Path) -> None:
    """Canonical bytes: converters list opsets in set order (it varies with the hash seed)."""
    opsets = sorted((o.domain, o.version) for o in model.opset_import)
    del model.opset_import[:]
    for domain, version in opsets:
        model.opset_import.add(domain=domain, version=version)
    out.write_bytes(model.SerializeToString(deterministic=True))


def _convert(estimator: Any, x: Any, out: Path) -> None:
    """skl2onnx with plain tensors out (no ZipMap): label and probabilities, as apps read them."""
    from skl2onnx import to_onnx

    options = {"zipmap": False} if hasattr(estimator, "classes_") else None
    _save(to_onnx(estimator, x[:1], target_opset=OPSETS, options=options), out)


def _digits() -> tuple[Any, Any]:
    import numpy as np
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    return x.astype(np.float32), y


def svc_digits(out: Path, source: Path | None) -> None:
    """10-class RBF SVC with probability=True (libsvm's pairwise coupling) on the 8x8 digits."""
    from sklearn.svm import SVC

    x, y = _digits()
    _convert(SVC(probability=True, gamma=0.001, C=10.0, random_state=0).fit(x[:1200], y[:1200]), x, out)


def svc_breast_cancer(out: Path, source: Path | None) -> None:
    """Binary RBF SVC with probabilities on standardised breast-cancer features (a Pipeline)."""
    import numpy as np
    from sklearn.datasets import load_breast_cancer
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    from sklearn.svm import SVC

    x, y = load_breast_cancer(return_X_y=True)
    x = x.astype(np.float32)
    model = make_pipeline(StandardScaler(), SVC(probability=True, random_state=0)).fit(x[:400], y[:400])
    _convert(model, x, out)


def forest_digits(out: Path, source: Path | None) -> None:
    """Random forest classifier (TreeEnsembleClassifier) on the digits."""
    from sklearn.ensemble import RandomForestClassifier

    x, y = _digits()
    _convert(RandomForestClassifier(n_estimators=60, max_depth=10, random_state=0).fit(x[:1200], y[:1200]), x, out)


def gbr_diabetes(out: Path, source: Path | None) -> None:
    """Gradient-boosted regression trees (TreeEnsembleRegressor) on the diabetes data."""
    import numpy as np
    from sklearn.datasets import load_diabetes
    from sklearn.ensemble import GradientBoostingRegressor

    x, y = load_diabetes(return_X_y=True)
    x = x.astype(np.float32)
    _convert(GradientBoostingRegressor(n_estimators=150, max_depth=4, random_state=0).fit(x[:350], y[:350]), x, out)


def qdq_static(out: Path, source: Path | None) -> None:
    """onnxruntime's quantize_static in QDQ format (int8 weights per channel, uint8 activations),
    calibrated by MinMax on 8 fixed pseudo-random images of the source model's input shape."""
    import numpy as np
    import onnx
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    if source is None:
        raise SystemExit("qdq_static needs the source model")
    graph = onnx.load(str(source)).graph
    inp = graph.input[0]
    shape = [d.dim_value or 1 for d in inp.type.tensor_type.shape.dim]
    rng = np.random.default_rng(0)
    batches = iter([{inp.name: rng.random(shape, dtype=np.float32)} for _ in range(8)])

    class Reader(CalibrationDataReader):
        def get_next(self) -> dict[str, Any] | None:
            return next(batches, None)

    tmp = out.with_suffix(".qdq.tmp")
    quantize_static(
        str(source),
        str(tmp),
        Reader(),
        quant_format=QuantFormat.QDQ,
        per_channel=True,
        activation_type=QuantType.QUInt8,
        weight_type=QuantType.QInt8,
    )
    _save(onnx.load(str(tmp)), out)
    tmp.unlink()


RECIPES: dict[str, Callable[[Path, Path | None], None]] = {
    f.__name__: f for f in (svc_digits, svc_breast_cancer, forest_digits, gbr_diabetes, qdq_static)
}


def main(argv: list[str]) -> None:
    recipe, out = argv[0], Path(argv[1])
    RECIPES[recipe](out, Path(argv[2]) if len(argv) > 2 and argv[2] else None)


if __name__ == "__main__":
    main(sys.argv[1:])
