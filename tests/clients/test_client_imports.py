"""The client is httpx + numpy (+ tpugraphs): it must not drag in the server stack."""

from __future__ import annotations

import json
import subprocess
import sys

# Not "rich": httpx itself imports it (for its own CLI) whenever it is installed.
HEAVY = (
    "torch",
    "fastapi",
    "starlette",
    "onnxruntime",
    "service",
    "models",
    "typer",
    "redis",
)


def test_importing_clients_imports_no_server_stack() -> None:
    code = (
        "import json, sys; import xla_costmodel.clients, xla_costmodel.clients.replay; "
        f"print(json.dumps(sorted(m for m in {list(HEAVY)!r} if m in sys.modules)))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert json.loads(out.stdout) == []
