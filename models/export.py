"""Stage 5: export a trained model as a versioned artifact the service can load.

``<out>/encoder.onnx`` + ``<out>/scorer.onnx`` + ``<out>/manifest.json`` (see
``xla_costmodel.manifest``). Exported with the dynamo-based ``torch.onnx.export`` and
``dynamic_shapes``, opset 18; every size (nodes, edges, configurable nodes, configs) is a
named dynamic dim. The example inputs use distinct sizes >= 2 so that torch.export
neither specialises nor merges dims; the ONNX graphs themselves have no such limit
(tests run them with 0 edges and 1 node).
"""

from __future__ import annotations

import io
import sys
import warnings
from contextlib import redirect_stdout
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import onnx
import torch
from torch.export import Dim

from xla_costmodel.manifest import (
    TPU_TARGET,
    GraphSpec,
    Manifest,
    TensorSpec,
    sha256_file,
    write_manifest,
)
from xla_costmodel.models.checkpoint import TrainResult, load_checkpoint
from xla_costmodel.models.network import CostModel, embedding_names
from xla_costmodel.tpugraphs.spec import NODE_FEAT_DIM, NUM_OPCODES

OPSET = 18
ENCODER_FILE = "encoder.onnx"
SCORER_FILE = "scorer.onnx"


def tensor_specs(model: CostModel) -> dict[str, TensorSpec]:
    """Every tensor of the artifact's contract, by name."""
    cfg = model.cfg
    specs = [
        TensorSpec(
            name="node_feat", dtype="float32", shape=["num_nodes", NODE_FEAT_DIM]
        ),
        TensorSpec(name="node_opcode", dtype="int64", shape=["num_nodes"]),
        TensorSpec(name="edge_index", dtype="int64", shape=["num_edges", 2]),
        TensorSpec(name="node_config_ids", dtype="int64", shape=["num_configurable"]),
        TensorSpec(name="graph_embedding", dtype="float32", shape=[cfg.embed]),
        TensorSpec(
            name="node_context",
            dtype="float32",
            shape=["num_configurable", cfg.scorer_hidden],
        ),
        TensorSpec(
            name="config_feat", dtype="float32", shape=["num_configs", cfg.config_dim]
        ),
        TensorSpec(
            name="node_config_feat",
            dtype="float32",
            shape=["num_configs", "num_configurable", cfg.config_dim],
        ),
        TensorSpec(name="scores", dtype="float32", shape=["num_configs"]),
    ]
    return {s.name: s for s in specs}


def _example_inputs(model: CostModel) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    n, e, nc, c = 7, 9, 3, 5
    dims = {
        "num_nodes": Dim("num_nodes"),
        "num_edges": Dim("num_edges"),
        "num_configurable": Dim("num_configurable"),
        "num_configs": Dim("num_configs"),
    }
    g = torch.Generator().manual_seed(0)
    inputs = {
        "node_feat": torch.rand(n, NODE_FEAT_DIM, generator=g),
        "node_opcode": torch.randint(0, NUM_OPCODES, (n,), generator=g),
        "edge_index": torch.randint(0, n, (e, 2), generator=g),
        "node_config_ids": torch.tensor([1, 3, 5]),
    }
    with torch.no_grad():
        names = embedding_names(model.cfg.collection)
        inputs.update(zip(names, model.encode(inputs), strict=True))
    cfg_dim = model.cfg.config_dim
    inputs["config_feat"] = torch.rand(c, cfg_dim, generator=g)
    inputs["node_config_feat"] = torch.rand(c, nc, cfg_dim, generator=g)
    shapes = {
        name: {i: dims[d] for i, d in enumerate(spec.shape) if isinstance(d, str)}
        for name, spec in tensor_specs(model).items()
    }
    return inputs, shapes


def _export(
    module: torch.nn.Module,
    names_in: list[str],
    names_out: list[str],
    inputs: dict[str, torch.Tensor],
    shapes: dict[str, Any],
    path: Path,
) -> None:
    args = tuple(inputs[n] for n in names_in)
    dyn = {n: shapes[n] for n in names_in}
    with warnings.catch_warnings(), redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        program = torch.onnx.export(
            module,
            args,
            dynamo=True,
            dynamic_shapes=dyn,
            opset_version=OPSET,
            input_names=names_in,
            output_names=names_out,
            verbose=False,
        )
    assert program is not None
    program.save(str(path), external_data=False)
    # The exporter tags every node with its Python stack trace and FX node: a fifth of
    # the file, and it would change the artifact's bytes with any edit of the model's
    # source. The graph itself is all the service needs.
    model = onnx.load(str(path))
    for node in model.graph.node:
        del node.metadata_props[:]
    onnx.save(model, str(path))
    onnx.checker.check_model(str(path), full_check=True)


def export_onnx(model: CostModel, out_dir: Path) -> tuple[GraphSpec, GraphSpec]:
    """Write encoder.onnx and scorer.onnx; return their manifest specs."""
    model.eval()
    out_dir.mkdir(parents=True, exist_ok=True)
    collection = model.cfg.spec
    specs = tensor_specs(model)
    enc_in = ["node_feat", "node_opcode", "edge_index"]
    if collection.per_node:
        enc_in.append("node_config_ids")
    enc_out = embedding_names(collection.name)
    sc_in = [*enc_out, collection.config_input]
    inputs, shapes = _example_inputs(model)
    _export(model.encoder, enc_in, enc_out, inputs, shapes, out_dir / ENCODER_FILE)
    _export(model.scorer, sc_in, ["scores"], inputs, shapes, out_dir / SCORER_FILE)

    def spec(file: str, ins: list[str], outs: list[str]) -> GraphSpec:
        return GraphSpec(
            file=file,
            sha256=sha256_file(out_dir / file),
            inputs=[specs[n] for n in ins],
            outputs=[specs[n] for n in outs],
        )

    return spec(ENCODER_FILE, enc_in, enc_out), spec(SCORER_FILE, sc_in, ["scores"])


def feature_dims(model: CostModel) -> dict[str, int]:
    cfg = model.cfg
    dims = {
        "node_feat": NODE_FEAT_DIM,
        "num_opcodes": NUM_OPCODES,
        "config": cfg.config_dim,
        "embedding": cfg.embed,
    }
    if cfg.spec.per_node:
        dims["context"] = cfg.scorer_hidden
    return dims


def export_artifact(
    result: TrainResult,
    out_dir: Path,
    name: str | None = None,
    version: str | None = None,
    target: str = TPU_TARGET,
) -> Manifest:
    """Export, write the manifest, then measure the artifact itself (onnxruntime) on the
    validation files and store that report as the manifest's ``metrics``. When early
    stopping picked the epoch on those files, the split says so
    (``"validation (selected on)"``) and a note warns that the numbers are optimistic."""
    from xla_costmodel.models.evaluate import evaluate_artifact

    collection = result.model.cfg.collection
    encoder, scorer = export_onnx(result.model, out_dir)
    manifest = Manifest(
        name=name or collection,
        collection=collection,
        version=version or (out_dir.name if out_dir.name.isdigit() else "1"),
        target=target,
        created=datetime.now(UTC).isoformat(timespec="seconds"),
        opset=OPSET,
        feature_dims=feature_dims(result.model),
        encoder=encoder,
        scorer=scorer,
        training=result.summary,
    )
    write_manifest(out_dir, manifest)
    valid = [Path(p) for p in result.summary.get("valid_files", []) if Path(p).exists()]
    if valid:
        report = evaluate_artifact(out_dir, valid)
        manifest = manifest.model_copy(update={"metrics": _labelled(result, report)})
        write_manifest(out_dir, manifest)
    return manifest


def _labelled(result: TrainResult, report: dict[str, Any]) -> dict[str, Any]:
    """The validation report with its split named: files only measured, or also used to
    pick the epoch (then the numbers lean optimistic)."""
    if not result.summary.get("epoch_selected_on_validation", False):
        return {"split": "validation", **report}
    note = (
        "early stopping chose the epoch (best_epoch) on these same files, so "
        "these metrics are optimistic: not an unbiased held-out estimate"
    )
    return {"split": "validation (selected on)", "note": note, **report}


def main() -> None:
    """``python -m xla_costmodel.models.export CHECKPOINT OUT_DIR``."""
    manifest = export_artifact(load_checkpoint(Path(sys.argv[1])), Path(sys.argv[2]))
    print(f"wrote {manifest.name} v{manifest.version} to {sys.argv[2]}")


if __name__ == "__main__":
    main()
