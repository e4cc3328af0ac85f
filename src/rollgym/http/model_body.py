"""A request body parsed and validated in one step by pydantic-core: the hot routes' body reader.

Why not a FastAPI body parameter (``async def route(body: SeedRequest)``): FastAPI decodes the
body with the standard library's ``json``, then validates the Python objects through its
dependency machinery, two passes and a dependency solve per request. ``model_validate_json``
parses and validates straight from the bytes in Rust (``bench/body_validation.py`` measures
both side by side). Errors stay what the FastAPI parameter gave: a ``RequestValidationError``
whose locations start at ``body``, so the app's handler answers the same 400 naming the same
field (``body.task``, ``body.messages``).
"""

from __future__ import annotations

from typing import TypeVar

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError

M = TypeVar("M", bound=BaseModel)


async def model_body(request: Request, model: type[M]) -> M:
    """The request's JSON body as ``model``, or the app's 400 naming the first bad field."""
    raw = await request.body()
    try:
        return model.model_validate_json(raw)
    except ValidationError as exc:
        errors = [
            {**error, "loc": ("body", *error["loc"])} for error in exc.errors(include_url=False)
        ]
        raise RequestValidationError(errors) from None
