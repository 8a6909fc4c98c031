"""The costmodel HTTP service: ranks XLA configs with the exported ONNX artifacts.

``service.app.create_app(settings)`` builds the ASGI app; ``service.core`` holds the
framework-free parts (model registry, ranker, embedding cache) the routes call.
"""
