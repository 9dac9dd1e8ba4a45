"""What a request handler is, and what each area of the broker's APIs hands KafkaApis.

Each area (metadata, topics, configs, groups, replicas, ...) is an object built with its collaborators and
answering a few APIs; `handlers()` names them. KafkaApis (broker/apis.py) builds its one table from the areas
once, at start-up, so no handler is ever replaced afterwards and the table says who answers what.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

from kafkalite.protocol import RequestHeader
from kafkalite.security.session import Session

Body = dict[str, Any]
# A request body in, a response body out (None: an acks=0 produce, never answered; a PreEncoded: an answer kept).
Handler = Callable[[RequestHeader, Body, Session], Awaitable[Any]]


class ApiArea(Protocol):
    def handlers(self) -> Mapping[int, Handler]: ...
