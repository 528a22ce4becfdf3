"""Content-type detection: Google's Magika used as its README shows, on files of several kinds.

Prints one JSON line: for each sample, the label Magika's model predicted (``dl``), the label it
reports (``output``) and the score."""

import json
import sys
from pathlib import Path

from magika import Magika

DATA = Path(__file__).parent / "data"
FILES = ["astronaut.jpg", "speech.wav", "iris_pipeline.onnx", "make_iris_model.py"]

SAMPLES = {
    "python": b'import os\n\n\ndef main():\n    for name in os.listdir("."):\n        print(name.upper())\n\n\nif __name__ == "__main__":\n    main()\n',
    "javascript": b"function log(msg) {console.log(msg);}\nconst items = [1, 2, 3].map((x) => x * 2);\nlog(items.join(', '));\n",
    "json": b'{"name": "ep-core", "version": "0.1.0", "tags": ["onnx", "runtime"], "nested": {"a": 1, "b": [true, false, null]}}\n',
    "html": (
        b'<!DOCTYPE html>\n<html lang="en">\n<head>\n  <meta charset="utf-8">\n  <title>Report</title>\n'
        b'  <link rel="stylesheet" href="style.css">\n</head>\n<body>\n  <div class="main">\n'
        b'    <h1>Results</h1>\n    <p>All <a href="apps.html">applications</a> ran.</p>\n'
        b"    <ul>\n      <li>OCR</li>\n      <li>Speech</li>\n    </ul>\n  </div>\n</body>\n</html>\n"
    ),
    "shell": b'#!/bin/sh\nset -e\nfor f in *.txt; do\n  echo "processing $f"\n  wc -l "$f"\ndone\n',
    "csv": b"id,name,score,passed\n1,alpha,0.93,true\n2,beta,0.71,false\n3,gamma,0.88,true\n4,delta,0.65,false\n",
}


def main() -> None:
    m = Magika()
    results = {}
    for name, content in SAMPLES.items():
        res = m.identify_bytes(content)
        results[name] = {"dl": res.dl.label, "output": res.output.label, "score": float(res.score)}
    for name in FILES:
        res = m.identify_path(DATA / name)
        results[name] = {"dl": res.dl.label, "output": res.output.label, "score": float(res.score)}
    print(json.dumps({"runtime": sys.modules["onnxruntime"].__name__, "files": results}))


if __name__ == "__main__":
    main()
