"""The benchmark harness behind ``costmodel bench``.

It measures, in one run and on one machine, what the service adds to the model's own
compute: the tile scorer alone in onnxruntime (the physical limit), the same model in
PyTorch eager (what a researcher would do instead), ``POST /v1/rank`` through the real
client with binary and JSON bodies, an autotuner round on a real layout graph with a
cold and a warm embedding cache, and a bounded concurrent load. ``cli.bench`` is the
entry point; ``harness.run`` orchestrates the phases; every process it starts (a
``redis-server``, a uvicorn server; ``xla_costmodel.harness``) is stopped before it
returns.
"""
