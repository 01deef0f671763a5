"""What the model reads in the demo (issue 17, items 1 and 2): `s3`'s fold keeps meaning and is per model —
its summary names what was tried, a `frontier` compile shows the original notes while `cheap` (and `quick`,
which inherits `cheap`'s overlay) shows the summary — and every retrieved item in a compiled prompt carries
its origin line; budgets hold, and every stored context replays to its digest."""

from __future__ import annotations

import json

import pytest

from context_app.compilation.models import CompactionFold, StoredContext
from context_app.compilation.services.compiles import context_compile
from context_app.compilation.services.replays import context_replay
from context_app.resolution import selectors as resolution_selectors
from context_app.world.models import WorldItem
from nexum.adapters.tokenization import counter_for

pytestmark = [pytest.mark.django_db]

TRIED = "Tried comparing the expiry as a string"


def compile_s3(demo_world, word: str):
    return context_compile(
        project_id=str(demo_world.project.id),
        task_id=str(demo_world.tasks["s3"].id),
        model_word=word,
        actor="agent:demo-agent",
    ).context


def test_the_s3_summary_names_what_was_tried_and_frontier_shows_the_original_notes(demo_world):
    s3 = demo_world.tasks["s3"]
    fold = CompactionFold.objects.get(task_id=s3.id)
    summary = WorldItem.objects.get(id=fold.summary_id).text
    header, *lines = summary.splitlines()
    assert header == f"Earlier work, folded ({len(fold.folded_ids)} progress notes):"
    assert len(lines) == len(fold.folded_ids) and all(len(line.split()) > 3 for line in lines)
    assert any(line.startswith(f"- {TRIED}") for line in lines)

    notes = list(WorldItem.objects.filter(id__in=fold.folded_ids).values_list("id", "text"))
    for word in ("frontier", "local"):  # no threshold, or one the notes are far below: the notes fit
        context = compile_s3(demo_world, word)
        assert all(f"- {text}" in context.prompt_block for _, text in notes)
        assert header not in context.prompt_block
        assert ["progress", str(fold.summary_id)] not in context.included
        assert all(["progress", str(item_id)] in context.included for item_id, _ in notes)
    for word in ("cheap", "quick"):  # cheap's overlay (quick inherits it) compacts past 80 tokens
        context = compile_s3(demo_world, word)
        assert f"- {header}" in context.prompt_block and f"  - {TRIED}" in context.prompt_block
        assert all(f"- {text}\n" not in context.prompt_block for _, text in notes)
    # the stored frontier compile of the demo (made after quick's fold) already showed the notes
    stored = StoredContext.objects.filter(task_id=s3.id, model_word="frontier").first()
    assert stored is not None and f"- {notes[0][1]}" in stored.prompt_block
    assert CompactionFold.objects.filter(task_id=s3.id).count() == 1  # the fold stays; the compiler chooses


def test_every_retrieved_item_carries_its_origin_line_and_budgets_hold(demo_world):
    contexts = list(StoredContext.objects.filter(project_id=demo_world.project.id))
    assert len(contexts) >= 4
    retrieved_seen = 0
    for context in contexts:
        bundle = resolution_selectors.latest_bundle(task_id=context.task_id)
        origins = {f"bundle:{entry.digest}": entry.origin for entry in (bundle.items if bundle else ())}
        for kind, item_id in context.included:
            if item_id.startswith("bundle:"):
                origin = origins[item_id]
                retrieved_seen += 1
                assert (
                    f"- [{origin} · observed " in context.prompt_block
                    or f"- [{origin} · stale: " in context.prompt_block
                    or f"- [untrusted data from {json.dumps(origin)} · " in context.prompt_block
                ), (kind, origin)
        counter = counter_for(context.encoding)
        assert counter.count(context.prompt_block) == context.prompt_tokens
        assert context.prompt_tokens + context.tool_tokens <= context.budget["context_tokens"]
        replay = context_replay(project_id=str(context.project_id), digest=context.digest)
        assert replay.matches
    assert retrieved_seen >= 4
    assert "- [auth-repo:tokens.py#L1-35 · observed just now]" in "\n".join(c.prompt_block for c in contexts)


def test_the_same_world_and_model_compile_to_the_same_digest(demo_world):
    first = compile_s3(demo_world, "frontier")
    again = compile_s3(demo_world, "frontier")
    assert first.digest == again.digest and first.prompt_block == again.prompt_block
