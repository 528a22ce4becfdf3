"""Vision (object detection): NudeNet's NudeDetector used as its README shows, on a photograph.

data/astronaut.jpg is NASA's public-domain portrait of astronaut Eileen Collins (the ``astronaut``
sample image of scikit-image, scaled to 384x384). Prints one JSON line: every detection's class,
score and box."""

import json
import sys
from pathlib import Path

from nudenet import NudeDetector

IMAGE = Path(__file__).parent / "data" / "astronaut.jpg"


def main() -> None:
    detector = NudeDetector()
    detections = detector.detect(str(IMAGE))
    found = [{"class": d["class"], "score": float(d["score"]), "box": [float(v) for v in d["box"]]} for d in detections]
    print(json.dumps({"runtime": sys.modules["onnxruntime"].__name__, "detections": found}))


if __name__ == "__main__":
    main()
