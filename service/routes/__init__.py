"""HTTP routes: each parses, calls the core, and returns a schema."""

from __future__ import annotations

from fastapi import APIRouter

from xla_costmodel.service.routes import (
    decisions,
    feedback,
    graphs,
    health,
    models,
    rank,
    targets,
)

ROUTERS: tuple[APIRouter, ...] = (
    health.router,
    models.router,
    graphs.router,
    rank.router,
    feedback.router,
    decisions.router,
    targets.router,
)
