"""``openapi_extra`` for routes that read their input themselves: a body that is
JSON or binary (npz, HLO text), a JSON body, and query parameters from a model."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from xla_costmodel.service.schemas.common import HLO_MEDIA_TYPE, NPZ_MEDIA_TYPE
from xla_costmodel.service.schemas.graphs import EXAMPLE_HLO


def binary_body(
    json_model: type[BaseModel], *, required: bool = True, hlo: bool = False
) -> dict[str, Any]:
    """``openapi_extra`` for a body that is JSON or an npz archive (or HLO text)."""
    ref = {"$ref": f"#/components/schemas/{json_model.__name__}"}
    # An empty body is refused (400 malformed_body) whatever its media type.
    binary = {"type": "string", "format": "binary", "minLength": 1}
    content: dict[str, Any] = {
        "application/json": {"schema": ref},
        NPZ_MEDIA_TYPE: {"schema": binary},
    }
    if hlo:
        text = {
            "type": "string",
            "minLength": 1,
            "description": "an HLO module as XLA prints it",
        }
        content[HLO_MEDIA_TYPE] = {"schema": text, "example": EXAMPLE_HLO}
    return {"requestBody": {"required": required, "content": content}}


def json_only_body(json_model: type[BaseModel]) -> dict[str, Any]:
    """``openapi_extra`` for a required JSON body that the route reads itself."""
    ref = {"$ref": f"#/components/schemas/{json_model.__name__}"}
    return {
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": ref}},
        }
    }


def query_parameters(query: type[BaseModel]) -> list[dict[str, Any]]:
    """OpenAPI ``parameters`` of a query model (optional, in the query)."""
    props = query.model_json_schema()["properties"]
    return [
        {
            "name": name,
            "in": "query",
            "required": False,
            "schema": schema,
            "description": schema.get("description", ""),
        }
        for name, schema in props.items()
    ]
