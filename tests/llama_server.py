"""The tests' and the bench's llama-server: `sdk.cli._llama_server` (what `sdk serve` runs too)."""

from sdk.cli._llama_server import MODEL_FILE
from sdk.cli._llama_server import LlamaServer
from sdk.cli._llama_server import ServerFailed
from sdk.cli._llama_server import Unavailable
from sdk.cli._llama_server import bundled_model
from sdk.cli._llama_server import default_threads
from sdk.cli._llama_server import server_binary

__all__ = [
    "MODEL_FILE",
    "LlamaServer",
    "ServerFailed",
    "Unavailable",
    "bundled_model",
    "default_threads",
    "server_binary",
]
