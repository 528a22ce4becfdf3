"""A compile worker process (``python -m ep_numba_cpu.compile_worker``, started by ``compile_pool``).

It reads requests from stdin and answers on stdout, each a frame (4-byte big-endian length, then
the bytes). A request is JSON ``{"source", "signature", "parallel"}``: a kernel source the parent
generated with ``generate`` (never one read from a file), compiled exactly as ``codegen`` compiles
in-process; the answer is ``b"\\x00"`` + the kernel's machine-code payload, or ``b"\\x01"`` + an
error message. It exits when stdin closes (its parent ended or closed the pool)."""

from __future__ import annotations

import json
import os
import struct
import sys
from typing import IO

HEADER = struct.Struct(">I")


def read_frame(stream: IO[bytes]) -> bytes | None:
    """One frame, or None at end of stream."""
    head = stream.read(HEADER.size)
    if len(head) < HEADER.size:
        return None
    (size,) = HEADER.unpack(head)
    body = stream.read(size)
    return body if len(body) == size else None


def write_frame(stream: IO[bytes], body: bytes) -> None:
    stream.write(HEADER.pack(len(body)) + body)
    stream.flush()


def serve(inp: IO[bytes], out: IO[bytes]) -> None:
    from ep_numba_cpu import codegen

    while (frame := read_frame(inp)) is not None:
        try:
            req = json.loads(frame)
            source, signature, parallel = req["source"], req["signature"], bool(req["parallel"])
            key = codegen.kernel_key(source, signature, parallel)
            reply = b"\x00" + codegen.compile_payload(key, source, signature, parallel)
        except Exception as exc:  # reported to the parent, which compiles the kernel itself
            reply = b"\x01" + f"{type(exc).__name__}: {exc}".encode()[:4000]
        write_frame(out, reply)


if __name__ == "__main__":
    # the protocol gets its own copy of stdout; whatever else prints (Numba's debug settings, a .pth
    # or sitecustomize) goes to stderr and can never corrupt a frame
    protocol = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    serve(sys.stdin.buffer, protocol)
