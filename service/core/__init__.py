"""The framework-free core: model registry, ranker over onnxruntime, embedding cache.

Nothing here imports FastAPI or Starlette; routes call in, the core raises
``xla_costmodel.service.core.errors`` exceptions.
"""
