"""The artifact copies the harness's services are given: a shipped artifact under
another version, whole or corrupted as a half-written upload would be (the chaos
run's reload phase, the registry's tests)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Literal


def set_version(artifact: Path, version: str) -> None:
    """Rewrite an artifact's manifest version (the registry refuses a directory
    whose manifest names another version)."""
    path = artifact / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["version"] = version
    path.write_text(json.dumps(manifest, indent=2))


def copy_artifact(source: Path, target: Path) -> Path:
    """Copy an artifact directory; its manifest's version becomes the target's name."""
    shutil.copytree(source, target)
    set_version(target, target.name)
    return target


def add_version(
    model_dir: Path,
    name: str,
    version: str,
    *,
    source: str = "1",
    corrupt: Literal["truncate", "sha256"] | None = None,
) -> Path:
    """Copy ``model_dir/name/source`` as ``version``. ``corrupt``: "truncate" cuts
    the encoder in half, as a half-written upload would; "sha256" leaves the files
    whole and breaks the scorer's checksum in the manifest."""
    target = copy_artifact(model_dir / name / source, model_dir / name / version)
    path = target / "manifest.json"
    manifest = json.loads(path.read_text())
    if corrupt == "truncate":
        encoder = target / manifest["encoder"]["file"]
        encoder.write_bytes(encoder.read_bytes()[: encoder.stat().st_size // 2])
    elif corrupt == "sha256":
        manifest["scorer"]["sha256"] = "0" * 64
        path.write_text(json.dumps(manifest, indent=2))
    return target
