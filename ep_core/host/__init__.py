"""What a session does to the process it runs in: thread pools of the libraries EPs call
(``threads``), Python ``logging`` for onnxruntime's severities (``logs``) and profiling traces in
onnxruntime's format (``trace``). Below the runtime, beside the sdk: imports nothing of ep-core but
the sdk, so the engine stays within its size budget and these services can be read alone."""
