"""The costmodel HTTP service: ranks XLA configs with the exported ONNX artifacts.

``xla_costmodel.service.app.create_app(settings)`` builds the ASGI app; ``xla_costmodel.service.core`` holds the
framework-free parts (model registry, ranker, embedding cache) the routes call.
"""
