"""The KServe peer: KServe's Python model server serving the tile ``scorer.onnx``.

Run by the benchmark as a script with the interpreter of ``.venv-kserve`` (kserve
0.21 pins protobuf < 7, which our own environment is past), never imported by the
package: it imports ``kserve``, which parses ``sys.argv`` at import time.

    python peer_kserve_server.py SCORER_ONNX PORT THREADS

Open Inference Protocol v2 over REST (``POST /v2/models/tile/infer``), inputs
``graph_embedding`` FP32 [64] and ``config_feat`` FP32 [N, 24], output ``scores`` FP32
[N]: the same split as our service after its embedding cache, so both servers run the
same ``scorer.onnx`` on the same bytes. gRPC is off; it binds 127.0.0.1 only.
"""

from __future__ import annotations

import asyncio
import sys


def main(scorer: str, port: int, threads: int) -> None:
    # kserve reads its own flags from sys.argv when imported: give it only ours.
    sys.argv = [
        sys.argv[0],
        f"--http_port={port}",
        "--enable_grpc=false",
        "--workers=1",
        "--configure_logging=false",
    ]
    import kserve
    import kserve.protocol.rest.server as rest_server
    import numpy as np
    import onnxruntime as ort
    import uvicorn
    from kserve import InferOutput, InferRequest, InferResponse

    # RESTServer hard-codes host 0.0.0.0; a benchmark must not listen beyond loopback.
    config = uvicorn.Config

    def loopback_config(*args: object, **kwargs: object) -> uvicorn.Config:
        kwargs["host"] = "127.0.0.1"
        return config(*args, **kwargs)  # type: ignore[arg-type]

    rest_server.uvicorn.Config = loopback_config

    class TileScorer(kserve.Model):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__("tile")
            options = ort.SessionOptions()
            options.intra_op_num_threads = threads
            options.inter_op_num_threads = 1
            self.session = ort.InferenceSession(
                scorer, options, providers=["CPUExecutionProvider"]
            )
            self.ready = True

        async def predict(
            self, payload: InferRequest, headers: dict[str, str] | None = None
        ) -> InferResponse:
            embedding = payload.get_input_by_name("graph_embedding").as_numpy()
            configs = payload.get_input_by_name("config_feat").as_numpy()
            feeds = {
                "graph_embedding": embedding.astype(np.float32, copy=False),
                "config_feat": configs.astype(np.float32, copy=False),
            }
            # In a worker thread, as our service does: a blocking run would stall
            # KServe's event loop for every other client.
            (scores,) = await asyncio.to_thread(self.session.run, None, feeds)
            out = InferOutput("scores", list(scores.shape), "FP32")
            out.set_data_from_numpy(scores, binary_data=payload.use_binary_outputs)
            # Binary outputs come back only when the request's choice is passed on.
            return InferResponse(
                payload.id,
                "tile",
                [out],
                use_binary_outputs=payload.use_binary_outputs,
                requested_outputs=payload.request_outputs,
            )

    kserve.ModelServer().start([TileScorer()])


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
