"""tasks_app announces, the layers above react: the handler table is what the bootstrap wired at start-up."""

from dataclasses import dataclass

import pytest

from config.bootstrap import MESSAGE_HANDLERS
from tasks_app import hooks


def test_every_message_runs_the_handlers_of_the_table_in_order():
    for message_type, handlers in MESSAGE_HANDLERS.items():
        assert tuple(hooks._handlers[message_type]) == tuple(handlers)  # wired once, at start-up


def test_a_message_nobody_handles_is_an_error():
    @dataclass(frozen=True)
    class Unheard:
        task_id: str

    with pytest.raises(RuntimeError, match="no handler is registered for Unheard"):
        hooks.handle(Unheard("t1"))
