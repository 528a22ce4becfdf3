"""Where a GPU run's time goes: one model under cProfile, and numba's bare launch cost."""

import cProfile
import pstats
import sys
import time

import numpy as np

sys.path.insert(0, "tests/cpu_reference")
from numba import cuda  # noqa: E402
from test_real_models import model_feed  # noqa: E402

from ep_core import InferenceSession  # noqa: E402
from ep_core.tools.zoo import fetch_model  # noqa: E402


@cuda.jit
def bump(a):
    i = cuda.grid(1)
    if i < a.size:
        a[i] += 1


a = cuda.device_array(1024, np.float32)
st = cuda.stream()
bump[4, 256, st](a)
st.synchronize()
t = time.perf_counter()
for _ in range(2000):
    bump[4, 256, st](a)
st.synchronize()
print("numba bare launch us", (time.perf_counter() - t) / 2000 * 1e6, flush=True)

for name in sys.argv[1:]:
    s = InferenceSession(
        str(fetch_model(name)), providers=["NumbaCudaExecutionProvider", "CpuReferenceExecutionProvider"]
    )
    f = model_feed(name)
    s.run(None, f)
    s.run(None, f)
    t = time.perf_counter()
    for _ in range(10):
        s.run(None, f)
    print(name, "ms per run", (time.perf_counter() - t) / 10 * 1e3, "plan steps", len(s.get_plan()), flush=True)
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(10):
        s.run(None, f)
    pr.disable()
    st_ = pstats.Stats(pr)
    st_.sort_stats("tottime").print_stats(30)
    st_.sort_stats("cumtime").print_stats(45)
