"""Every message kafkalite speaks, declared once in the schema DSL; MESSAGES indexes them by API key."""

from __future__ import annotations

from kafkalite.protocol.api_keys import ApiKey
from kafkalite.protocol.messages import acls, admin, cluster, controller, fetch, groups, offsets, produce, security
from kafkalite.protocol.schema import Message

MESSAGES: dict[ApiKey, Message] = {
    m.api_key: m
    for module in (cluster, produce, fetch, offsets, groups, admin, controller, acls, security)
    for m in module.ALL
}
