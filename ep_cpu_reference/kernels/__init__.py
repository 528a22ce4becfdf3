"""The reference EP's kernels: every public module is an op family that registers its kernels on
import, or a helper that registers none and imports no family (``nn_common``, ``conv_plan``,
``special``); ``_*`` modules are not families (some import one).
Importing this package registers nothing: ``ep_cpu_reference.families`` loads the families in
their order when the registry is first used, so another EP (the Numba CPU EP) can import a helper
without paying for, or reordering, the registration of every family."""
