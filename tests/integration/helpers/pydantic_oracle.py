# SPDX-License-Identifier: Apache-2.0
"""The reference's request validation, as the oracle for hyperpodrun's 422
bodies: the field types and validators of the reference agent's /start and
/update models (docs/operator-api.md, "Validation"), checked by
pydantic 2 and reported as FastAPI reports a body's errors (loc under
"body", no "url", a validator's exception as its text).

Run with a Python that has pydantic 2. Reads a JSON list of request bodies
(each a JSON text) on stdin; prints a JSON list holding, for each, the
"detail" list of its 422, or null when the body is valid."""

import json
import sys
from typing import Any, Dict, List, Optional, Union

from pydantic import BaseModel, Field, ValidationError, field_validator


class _Job(BaseModel):
    rank: int
    nnodes: int
    faultCount: int
    master_addr: str
    master_port: Union[int, str]
    log_monitoring_configuration: Optional[List[Dict[str, Any]]] = None
    ipVersion: Optional[str] = None
    rankIps: Optional[List[Dict[str, Union[str, int]]]] = None
    worker_data: Optional[Any] = None
    spare: Union[bool, int] = False

    @field_validator("master_addr")
    @classmethod
    def _addr(cls, v):
        if not v:
            raise ValueError("Empty master_addr received from operator")
        return v

    @field_validator("master_port")
    @classmethod
    def _port(cls, v):
        if isinstance(v, str):
            return int(v) if v else 0
        return v

    @field_validator("spare")
    @classmethod
    def _spare(cls, v):
        return bool(v) if isinstance(v, int) else v


class StartRequest(_Job):
    progress: Dict[str, Any] = Field(default_factory=dict)


def detail(text):
    try:
        StartRequest.model_validate(json.loads(text))
    except ValidationError as e:
        out = []
        for err in e.errors(include_url=False):
            err["loc"] = ["body", *err["loc"]]
            if "ctx" in err:
                err["ctx"] = {k: str(v) if isinstance(v, Exception) else v
                              for k, v in err["ctx"].items()}
            out.append(err)
        return out
    return None


if __name__ == "__main__":
    json.dump([detail(t) for t in json.load(sys.stdin)], sys.stdout)
