"""OCR: RapidOCR (rapidocr_onnxruntime) used as its README shows, on an image of rendered text.

Prints one JSON line: every detected line's box, text and score. The image is drawn here with
Pillow (a dependency of the app) in its built-in font, so it is the same on every machine."""

import json
import sys
import tempfile
from pathlib import Path

from PIL import Image, ImageDraw, ImageFont
from rapidocr_onnxruntime import RapidOCR

LINES = ["Invoice 2024-118", "Total due: 4,250.00 EUR", "Thank you for your order"]


def render(path: Path) -> None:
    """Black text on white, one line per entry of LINES."""
    font = ImageFont.load_default(size=34)
    image = Image.new("RGB", (560, 70 * len(LINES) + 30), "white")
    draw = ImageDraw.Draw(image)
    for i, line in enumerate(LINES):
        draw.text((24, 24 + 70 * i), line, fill="black", font=font)
    image.save(path)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        img_path = Path(tmp) / "invoice.png"
        render(img_path)
        engine = RapidOCR()
        result, elapse = engine(str(img_path))
    lines = [{"box": box, "text": text, "score": float(score)} for box, text, score in result or []]
    print(json.dumps({"runtime": sys.modules["onnxruntime"].__name__, "lines": lines}))


if __name__ == "__main__":
    main()
