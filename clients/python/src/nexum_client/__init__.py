"""nexum-client: a typed Python client for Nexum's REST API (see ``Nexum``)."""

from nexum_client.client import Nexum
from nexum_client.errors import (
    ApprovalTimeout,
    BadRequest,
    CompletionTimeout,
    Conflict,
    ConnectionFailed,
    Forbidden,
    NexumError,
    NotFound,
    Refused,
    ServerError,
    TooLarge,
    Unauthorized,
    Unavailable,
)
from nexum_client.models import Approval, Completion, Context, Event, Fork, Goal, Item, Resolution, Task

__all__ = [
    "Approval",
    "ApprovalTimeout",
    "BadRequest",
    "Completion",
    "CompletionTimeout",
    "Conflict",
    "ConnectionFailed",
    "Context",
    "Event",
    "Forbidden",
    "Fork",
    "Goal",
    "Item",
    "Nexum",
    "NexumError",
    "NotFound",
    "Refused",
    "Resolution",
    "ServerError",
    "Task",
    "TooLarge",
    "Unauthorized",
    "Unavailable",
]
