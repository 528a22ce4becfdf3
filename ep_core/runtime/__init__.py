"""The engine: one module per step (load, discover, select, partition, layout, build, plan, execute,
context write, compatibility) and the thin user-facing callers built on them (``InferenceSession``,
``IOBinding``, ``ModelCompiler``). It imports the SDK, never ``ep_core.tools``."""
