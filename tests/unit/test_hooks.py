"""tasks_app announces, the layers above react: the handler table is what Django registered at start-up."""

from dataclasses import dataclass

import pytest

from nexum_web.handlers import HANDLERS
from tasks_app import hooks


def test_every_message_runs_the_handlers_of_the_table_in_order():
    for message_type, handlers in HANDLERS.items():
        assert tuple(hooks._handlers[message_type]) == handlers  # registered once by WebConfig.ready


def test_a_message_nobody_handles_is_an_error():
    @dataclass(frozen=True)
    class Unheard:
        task_id: str

    with pytest.raises(RuntimeError, match="no handler is registered for Unheard"):
        hooks.handle(Unheard("t1"))
