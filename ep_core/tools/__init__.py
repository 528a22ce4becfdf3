"""What people run around the engine: the ``ep-core`` CLI, the parity report, the real-model zoo.
Tools import the runtime and the SDK; nothing below them imports a tool."""
