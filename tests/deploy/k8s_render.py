"""Render ``deploy/k8s`` as ``kustomize build`` would, for the fields the base uses.

There is no kustomize binary on this machine and no maintained Python package that
renders kustomizations, so this applies exactly the transformers the base's
``kustomization.yaml`` names: ``namespace``, ``labels`` (object metadata only) and
``images``. Anything else in the kustomization, or a kind whose namespace handling
this does not know, is refused: the base cannot grow a feature that would then be
rendered, and validated, wrongly.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

Resource = dict[str, Any]

SUPPORTED_FIELDS = {"apiVersion", "kind", "namespace", "labels", "images", "resources"}
# Namespaced kinds that hold no references to other namespaces (a RoleBinding's
# subjects would need kustomize's extra rewriting, which this does not do).
NAMESPACED_KINDS = {
    "ConfigMap",
    "Secret",
    "Service",
    "Deployment",
    "StatefulSet",
    "HorizontalPodAutoscaler",
    "NetworkPolicy",
    "PodDisruptionBudget",
}
WORKLOAD_KINDS = {"Deployment", "StatefulSet"}


class UnsupportedKustomization(ValueError):
    """The kustomization asks for something this renderer does not implement."""


def load_kustomization(base: Path) -> dict[str, Any]:
    data = yaml.safe_load((base / "kustomization.yaml").read_text())
    unknown = set(data) - SUPPORTED_FIELDS
    if unknown:
        raise UnsupportedKustomization(f"fields not rendered: {sorted(unknown)}")
    if data.get("kind") != "Kustomization":
        raise UnsupportedKustomization(f"not a Kustomization: {data.get('kind')!r}")
    return data  # type: ignore[no-any-return]


def render(base: Path) -> list[Resource]:
    """The objects ``kustomize build base`` prints (in file order, not kustomize's)."""
    kustomization = load_kustomization(base)
    resources: list[Resource] = []
    for entry in kustomization["resources"]:
        path = base / entry
        if not path.is_file():  # a directory or URL would be another kustomization
            raise UnsupportedKustomization(f"resource is not a local file: {entry}")
        resources += [d for d in yaml.safe_load_all(path.read_text()) if d]
    for resource in resources:
        if resource["kind"] not in NAMESPACED_KINDS:
            raise UnsupportedKustomization(f"kind not rendered: {resource['kind']}")
        if "namespace" in kustomization:
            resource["metadata"]["namespace"] = kustomization["namespace"]
        for labels in kustomization.get("labels", []):
            _add_labels(resource, labels)
        for image in kustomization.get("images", []):
            _set_image(resource, image)
    return resources


def _add_labels(resource: Resource, entry: dict[str, Any]) -> None:
    """``labels:`` without includeSelectors/includeTemplates touches metadata only."""
    if entry.get("includeSelectors") or entry.get("includeTemplates"):
        raise UnsupportedKustomization("labels into selectors/templates not rendered")
    resource["metadata"].setdefault("labels", {}).update(entry["pairs"])


def image_name(image: str) -> str:
    """``registry:5000/name:tag@sha256:...`` -> ``registry:5000/name``."""
    image = image.split("@", 1)[0]
    last = image.rsplit("/", 1)[-1]
    return image[: len(image) - len(last)] + last.split(":", 1)[0]


def _set_image(resource: Resource, entry: dict[str, Any]) -> None:
    if resource["kind"] not in WORKLOAD_KINDS:
        return
    pod = resource["spec"]["template"]["spec"]
    for container in pod.get("containers", []) + pod.get("initContainers", []):
        old = container["image"]
        if image_name(old) != entry["name"]:
            continue
        name = entry.get("newName", entry["name"])
        if "digest" in entry:
            container["image"] = f"{name}@{entry['digest']}"
        elif "newTag" in entry:
            container["image"] = f"{name}:{entry['newTag']}"
        else:  # keeps whatever tag the manifest had
            container["image"] = name + old[len(image_name(old)) :]
