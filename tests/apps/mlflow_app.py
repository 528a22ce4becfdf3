"""Classic ML: MLflow's ONNX flavour serving a scikit-learn pipeline, as MLflow's documentation shows
(``mlflow.onnx.save_model``, then ``mlflow.pyfunc.load_model(...).predict``).

The model (data/iris_pipeline.onnx: StandardScaler + RandomForestClassifier converted by skl2onnx,
made by data/make_iris_model.py) runs as ``ai.onnx.ml`` operators (Scaler, TreeEnsembleClassifier,
ZipMap). MLflow's own code creates the onnxruntime session. Prints one JSON line: the predicted
class and class probabilities of every flower."""

import json
import sys
import tempfile
from pathlib import Path

import mlflow
import onnx
import pandas as pd

MODEL = Path(__file__).parent / "data" / "iris_pipeline.onnx"

# Measurements (sepal length, sepal width, petal length, petal width) of flowers of the three
# species and of some in between.
FLOWERS = [
    [5.1, 3.5, 1.4, 0.2],
    [4.9, 3.0, 1.4, 0.2],
    [7.0, 3.2, 4.7, 1.4],
    [6.4, 3.2, 4.5, 1.5],
    [6.3, 3.3, 6.0, 2.5],
    [5.8, 2.7, 5.1, 1.9],
    [6.0, 2.9, 4.9, 1.7],
    [5.6, 2.8, 4.9, 2.0],
    [6.1, 3.0, 4.8, 1.6],
    [5.4, 3.0, 4.5, 1.5],
]


def main() -> None:
    onnx_model = onnx.load(str(MODEL))
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "iris_model")
        mlflow.onnx.save_model(onnx_model, path)
        model = mlflow.pyfunc.load_model(path)
        predictions = model.predict(
            pd.DataFrame(FLOWERS, columns=["sepal_length", "sepal_width", "petal_length", "petal_width"])
        )
    labels = [int(v) for v in predictions["output_label"]]
    probabilities = [{str(k): float(v) for k, v in sorted(p.items())} for p in predictions["output_probability"]]
    print(
        json.dumps({"runtime": sys.modules["onnxruntime"].__name__, "labels": labels, "probabilities": probabilities})
    )


if __name__ == "__main__":
    main()
