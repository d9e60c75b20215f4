"""What a client of `scratchformer serve` sends and what it gets back when a request fails: the
request bodies (pydantic models, which give every field's type check and the /docs schema from one
declaration) and the error contract.

Error contract (every 4xx/5xx): `{"error": {"message": "...", "type": "...", "code": N}}`, the
shape OpenAI's clients read, so an `openai` client shows our message. Never a traceback.
"""
from __future__ import annotations

from typing import Literal

from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field


# ----------------------------------------------------------------------------- request bodies

Texts = str | list[str]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ClassifyRequest(_Body):
    model: str | None = Field(None, description="a served model's name (optional when one model classifies)")
    input: Texts = Field(..., description="a text or a list of texts")
    truncate: bool = Field(False, description="cut inputs longer than the token limit instead of refusing them")


class TranslateRequest(_Body):
    model: str | None = None
    input: Texts
    beam: int | None = Field(None, ge=1, le=16, description="beam size (1 = greedy); default: the run's")
    max_length: int | None = Field(None, ge=1, le=1024, description="at most this many output tokens")
    truncate: bool = False


class EmbeddingsRequest(BaseModel):
    """OpenAI's embeddings request; unknown fields are ignored as OpenAI's own server does."""

    model_config = ConfigDict(extra="ignore")
    model: str
    input: Texts
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = None
    user: str | None = None
    truncate: bool = False


class CompletionsRequest(BaseModel):
    """OpenAI's (legacy) completions request, with the CLI's sampling options (`top_k`)."""

    model_config = ConfigDict(extra="ignore")
    model: str
    prompt: str | list[str]
    max_tokens: int = Field(16, ge=0)
    temperature: float = Field(1.0, ge=0.0)
    top_p: float | None = None
    top_k: int | None = None
    seed: int | None = None
    stream: bool = False
    n: int = 1
    stop: str | list[str] | None = None
    echo: bool = False
    user: str | None = None
    truncate: bool = False


class AttentionRequest(_Body):
    model: str | None = None
    input: str


# ----------------------------------------------------------------------------- errors

class ApiError(Exception):
    def __init__(self, status: int, message: str, kind: str = "invalid_request_error",
                 headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.message, self.kind, self.headers = status, message, kind, headers or {}


def error_response(status: int, message: str, kind: str = "invalid_request_error",
                   headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": kind, "code": status}}, status, headers=headers)


def validation_message(exc: RequestValidationError) -> tuple[int, str]:
    """(status, one line naming each wrong field) from pydantic's errors."""
    errors = exc.errors()
    for e in errors:
        if e.get("type") == "json_invalid":
            why = (e.get("ctx") or {}).get("error", "")
            return 400, f"the request body is not valid JSON ({why})" if why else "the request body is not valid JSON"
        if tuple(e.get("loc", ())) == ("body",):
            return 400, "the request body must be a JSON object (send it with Content-Type: application/json)"
    by_field: dict[str, list[str]] = {}
    for e in errors:
        loc = [str(x) for x in e.get("loc", ()) if x != "body"]
        # a union (str | list[str]) reports one error per branch, under the branch's name
        branch = next((x for x in loc if x in ("str", "list[str]")), None)
        loc = [x for x in loc if x not in ("str", "list[str]")]
        where = ".".join(loc) or "body"
        if e.get("type") == "missing":
            msg = "field required"
        elif e.get("type") == "extra_forbidden":
            msg = "unknown field (see /docs for the fields)"
        elif branch == "list[str]" and len(loc) > 1 and e.get("type") == "string_type":
            msg = "must be a string"
        elif branch is not None and e.get("type") in ("string_type", "list_type"):
            msg = "must be a string or a list of strings"
        else:
            msg = str(e.get("msg"))
        by_field.setdefault(where, [])
        if msg not in by_field[where]:
            by_field[where].append(msg)
    # an item's own error ("input.1: must be a string") says more than its union's ("input: ...")
    by_field = {k: v for k, v in by_field.items() if not any(o.startswith(k + ".") for o in by_field)}
    return 422, "; ".join(f"{k}: {' or '.join(v)}" for k, v in list(by_field.items())[:5])
