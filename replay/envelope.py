"""The replay route's flat error envelope: `{"error": "…", "code": "…"}`, every error included."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from core.errors import MortarError
from core.http.envelopes import Envelope


class FlatErrorEnvelope(BaseModel):
    """The replay route's flat envelope: the message and the code, side by side."""

    model_config = ConfigDict(
        json_schema_extra={"examples": [{"error": "Run chatcmpl-… is gone.", "code": "run_gone"}]}
    )
    error: str = Field(description="What went wrong, for a person to read.")
    code: str = Field(description="A machine-readable code, such as `run_gone`.")


class FlatEnvelope(Envelope):
    schema = FlatErrorEnvelope

    def body(self, error: MortarError) -> dict[str, Any]:
        return {"error": error.message, "code": error.code}


FLAT_ENVELOPE = FlatEnvelope()
