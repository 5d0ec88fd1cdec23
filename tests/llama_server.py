"""The tests' and the bench's llama-server: `sdk.llama_server` (what `sdk serve` runs too)."""

from sdk.llama_server import (
    MODEL_FILE,
    LlamaServer,
    ServerFailed,
    Unavailable,
    bundled_model,
    default_threads,
    server_binary,
)

__all__ = [
    "MODEL_FILE",
    "LlamaServer",
    "ServerFailed",
    "Unavailable",
    "bundled_model",
    "default_threads",
    "server_binary",
]
