"""Text: UNICEF's arabic-name-romanizer used as its README shows (Arabic names to Latin spelling).

Names its dictionary does not hold go to its ONNX seq2seq model (a GRU encoder and decoder run by
beam search); the others check the surrounding pipeline. Prints one JSON line: the top three
candidates of every name with their score and source (dictionary, model, mixed)."""

import json
import sys

from arabic_name_romanizer import transliterate

NAMES = [
    ("محمد صلاح", None),
    ("حبيبة عطيفي", None),
    ("قرطبلي", None),
    ("بوزيدوني", None),
    ("شمهروش", None),
    ("غزلطوني", None),
    ("كوسكوسي", "DZ"),
    ("عبد القادر شمهروش", "SA"),
]


def main() -> None:
    results = []
    for name, country in NAMES:
        candidates = transliterate(name, top_k=3, country=country)
        results.append(
            {
                "name": name,
                "candidates": [{"text": c.text, "score": float(c.score), "source": c.source} for c in candidates],
            }
        )
    print(json.dumps({"runtime": sys.modules["onnxruntime"].__name__, "names": results}, ensure_ascii=False))


if __name__ == "__main__":
    main()
