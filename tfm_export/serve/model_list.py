"""OpenAI's model list, so that OpenAI's clients find the one model a server serves:

    GET /v1/models           {"object": "list", "data": [{"id", "object": "model", "created", "owned_by"}]}
    GET /v1/models/{model}   that entry; another name is a 404 naming the served one

Clients and UIs built for api.openai.com (Open WebUI, LibreChat, `openai.OpenAI().models.list()`) list the
models first and offer those names. The id is the export folder's name (what `tfm-export serve` was given);
the audio routes still take any `model` name, as before.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from fastapi import FastAPI
from fastapi import Path as PathParameter
from pydantic import BaseModel, Field

from ..manifest import manifest_time
from .engine import ServeSettings
from .schemas import error_responses
from .translation import HTTPFailure

OWNER = "tfm-export"


class ModelCard(BaseModel):
    """One model, as OpenAI's `Model` object."""

    id: str = Field(description="The export folder's name.")
    object: Literal["model"] = "model"
    created: int = Field(description="When the export was written (its manifest.json), Unix seconds.")
    owned_by: str = Field(OWNER, description="Who serves it.")


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard] = Field(description="The one model this server serves.")


def served_model(folder: str) -> ModelCard:
    """The card of the export in `folder`: its name, and its manifest's time as the creation time."""
    return ModelCard(id=Path(folder).resolve().name, created=int(manifest_time(folder)))


def add_model_list(app: FastAPI, settings: ServeSettings) -> None:
    """GET /v1/models and /v1/models/{model} on `app` (behind the API key like every route but /healthz). The
    schema's enum names the one id served; another is OpenAI's answer, a 404, not a validation error."""
    card = served_model(settings.folder)
    keyed = (401,) if settings.api_key else ()

    @app.get("/v1/models", response_model=ModelList, responses=error_responses(*keyed))
    async def list_models() -> ModelList:
        """The model this server serves (OpenAI's list models)."""
        return ModelList(data=[card])

    @app.get("/v1/models/{model}", response_model=ModelCard, responses=error_responses(*keyed, 404))
    async def retrieve_model(model: str = PathParameter(description="The served model's id (GET /v1/models).",
                                                        json_schema_extra={"enum": [card.id]})) -> ModelCard:
        """The served model, by its name (OpenAI's retrieve model)."""
        if model != card.id:
            raise HTTPFailure(404, f"no model {model!r}: this server serves {card.id!r}", field="model")
        return card
