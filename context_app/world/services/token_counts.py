"""Token counts in another encoding (W4): ``item_token_counts_ensure`` adds the counts of an encoding for
items recorded before it was needed (one event per batch)."""

from __future__ import annotations

from context_app.world.models import WorldItem
from context_app.world.services.recording import append_events
from nexum.adapters.tokenization import counter_for
from nexum.core.world.items import ItemTokensCounted, token_counts_stream

TOKEN_COUNT_BATCH = 1000


def item_token_counts_ensure(*, project_id: str, encoding: str, actor: str = "system") -> int:
    """Count, once, the items of the project that have no count in ``encoding``; returns how many."""
    counter = counter_for(encoding)  # an unknown encoding is refused here, before anything is read
    missing = [
        (str(item_id), rendered)
        for item_id, rendered, counts in WorldItem.objects.filter(project_id=project_id)
        .order_by("position")
        .values_list("id", "rendered", "token_counts")
        if encoding not in counts
    ]
    for start in range(0, len(missing), TOKEN_COUNT_BATCH):
        batch = missing[start : start + TOKEN_COUNT_BATCH]
        event = ItemTokensCounted(
            encoding=encoding, counts={item_id: counter.count(rendered) for item_id, rendered in batch}
        )
        # No version guard: a count is a pure function of the item's text; two writers record the same.
        append_events(token_counts_stream(project_id), [event], None, project_id, actor, None)
    return len(missing)
