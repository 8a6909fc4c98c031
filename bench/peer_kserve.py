"""KServe as a peer: its own virtualenv, its server process, and a v2 binary client.

kserve 0.21 pins protobuf < 7 (onnx and ray here are past it), so it runs from
``.venv-kserve`` at the repository root, created on first use from the same package
index as ours (``make kserve-venv``; about a minute on 2 busy cores) and reused after.
The server is ``peer_kserve_server.py`` under that interpreter, on a free loopback port.

The client speaks the Open Inference Protocol v2 over REST with the binary tensor
extension: a JSON header, then the raw little-endian tensors, the header's length in
``Inference-Header-Content-Length``; it asks for the output in binary too. KServe
answers a JSON request without an ``id`` with a 500, so every request carries one.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import httpx
import numpy as np

from xla_costmodel.harness import LOOPBACK, ManagedProcess, ProcessError

VENV = Path(".venv-kserve")  # `make kserve-venv`, from the repository root
SERVER_SCRIPT = Path(__file__).resolve().parent / "peer_kserve_server.py"
KSERVE_PINS = ("kserve==0.21.0", "onnxruntime", "numpy")
HEADER_LENGTH = "Inference-Header-Content-Length"
MODEL = "tile"


def venv_python(venv: Path = VENV) -> Path:
    return venv.resolve() / "bin" / "python"  # the server runs in its own workdir


def kserve_ready(venv: Path = VENV) -> bool:
    """Whether the venv was completed: the marker ``make kserve-venv`` and
    ``ensure_venv`` write after the install (a half-made venv has none). Cheaper
    than importing kserve, which takes seconds."""
    return venv_python(venv).is_file() and (venv / ".deps").is_file()


def ensure_venv(venv: Path = VENV) -> Path:
    """The venv's interpreter, creating the venv first if it is missing."""
    if not kserve_ready(venv):
        steps = [
            [sys.executable, "-m", "venv", "--clear", str(venv)],
            [str(venv_python(venv)), "-m", "pip", "install", "-q", *KSERVE_PINS],
        ]
        for step in steps:
            done = subprocess.run(step, capture_output=True, text=True)
            if done.returncode != 0:
                raise ProcessError(f"creating {venv} failed: {done.stderr[-2000:]}")
        (venv / ".deps").touch()
    return venv_python(venv)


class KServeServer(ManagedProcess):
    """KServe's model server with the tile scorer, 1 worker, gRPC off, loopback."""

    name = "kserve"
    ready_timeout_s = 90.0

    def __init__(
        self, workdir: Path, python: Path, scorer: Path, threads: int = 1
    ) -> None:
        super().__init__(workdir)
        self.python, self.scorer, self.threads = python, scorer.resolve(), threads

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    def command(self) -> list[str]:
        return [
            str(self.python),
            str(SERVER_SCRIPT),
            str(self.scorer),
            str(self.port),
            str(self.threads),
        ]

    def env(self) -> Mapping[str, str] | None:
        # Its own interpreter and packages: none of our venv's variables.
        return {"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": str(self.threads)}

    def ready(self) -> bool:
        try:
            url = f"{self.url}/v2/models/{MODEL}/ready"
            return httpx.get(url, timeout=1.0).is_success
        except httpx.HTTPError:
            return False


def encode_infer(
    embedding: np.ndarray, configs: np.ndarray, request_id: str
) -> tuple[bytes, int]:
    """A v2 binary-extension request body and the length of its JSON header."""
    tensors = [
        ("graph_embedding", np.ascontiguousarray(embedding, "<f4")),
        ("config_feat", np.ascontiguousarray(configs, "<f4")),
    ]
    header = {
        "id": request_id,
        "inputs": [
            {
                "name": name,
                "shape": list(a.shape),
                "datatype": "FP32",
                "parameters": {"binary_data_size": a.nbytes},
            }
            for name, a in tensors
        ],
        "outputs": [{"name": "scores", "parameters": {"binary_data": True}}],
        "parameters": {"binary_data_output": True},
    }
    head = json.dumps(header).encode()
    return b"".join([head, *(a.tobytes() for _, a in tensors)]), len(head)


def decode_scores(response: httpx.Response) -> np.ndarray:
    """The ``scores`` output of a v2 answer, binary (or JSON if the server ignored
    the request for binary outputs)."""
    length = response.headers.get(HEADER_LENGTH)
    content = response.content
    head = json.loads(content if length is None else content[: int(length)])
    (out,) = head["outputs"]
    if length is None:
        return np.asarray(out["data"], np.float32)
    size = int(out["parameters"]["binary_data_size"])
    start = int(length)
    return np.frombuffer(content[start : start + size], "<f4")


class KServeRanker:
    """Ranks configs through KServe: scores from the server, argsort on the client
    (KServe serves tensors; ordering them is the caller's job)."""

    def __init__(self, url: str) -> None:
        self.http = httpx.Client(
            base_url=url, timeout=httpx.Timeout(120.0, connect=5.0)
        )
        self.calls = 0

    def close(self) -> None:
        self.http.close()

    def scores(self, embedding: np.ndarray, configs: np.ndarray) -> np.ndarray:
        self.calls += 1
        body, head = encode_infer(embedding, configs, str(self.calls))
        response = self.http.post(
            f"/v2/models/{MODEL}/infer",
            content=body,
            headers={
                "Content-Type": "application/octet-stream",
                HEADER_LENGTH: str(head),
            },
        )
        response.raise_for_status()
        return decode_scores(response)

    def rank(self, embedding: np.ndarray, configs: np.ndarray) -> np.ndarray:
        return np.argsort(self.scores(embedding, configs), kind="stable")

    def live(self) -> None:
        self.http.get("/v2/health/live").raise_for_status()
