"""Makes data/iris_pipeline.onnx, the scikit-learn model the mlflow app serves (run by hand; the
tests only read the file).

A scikit-learn pipeline (StandardScaler, then a RandomForestClassifier) trained on the iris data
that scikit-learn ships, converted by skl2onnx with its default options (label plus a ZipMap of
class probabilities): ``pip install scikit-learn==1.9.1 skl2onnx==1.20.0``, then
``python tests/apps/data/make_iris_model.py``."""

from pathlib import Path

import numpy as np
from skl2onnx import to_onnx
from sklearn.datasets import load_iris
from sklearn.ensemble import RandomForestClassifier
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

X, y = load_iris(return_X_y=True)
X = X.astype(np.float32)
pipe = make_pipeline(StandardScaler(), RandomForestClassifier(n_estimators=12, max_depth=4, random_state=0))
pipe.fit(X, y)
onx = to_onnx(pipe, X[:1], target_opset={"": 17, "ai.onnx.ml": 3})
onx.doc_string = "iris: StandardScaler + RandomForestClassifier(12 trees, depth 4), scikit-learn 1.9.1, skl2onnx 1.20.0"
(Path(__file__).parent / "iris_pipeline.onnx").write_bytes(onx.SerializeToString())
