"""Training side: TpuGraphs files -> ranked cost models -> versioned ONNX artifacts.

Stages, one module each: data -> network -> train -> evaluate -> export; plus metrics,
synthetic data, the CLI command functions and the shipped-model recipe.
"""
