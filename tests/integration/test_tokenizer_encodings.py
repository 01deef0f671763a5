"""A model card whose encoding is a Hugging Face tokenizer.json the operator supplies (SPEC §5, W4, C6): the
catalog loads it, world items store their counts in it, and the compiler's budget is counted with it, exactly
as the library counts."""

from __future__ import annotations

import json

import pytest

from context_app.catalog import selectors as catalog_selectors
from context_app.catalog.services import DEFAULT_CATALOG, model_catalog_replace
from context_app.compilation.services.compiles import context_compile
from context_app.compilation.services.replays import context_replay
from context_app.world.models import Tool, WorldItem
from nexum.adapters.tokenization import UnknownEncoding, counter_for, default_registry
from nexum.core.compilation.rendering import SECTION_TITLES
from nexum.core.digests import canonical_json
from tests.integration.compile_world import build_auth_world
from tests.tokenizer_files import library_count, write_byte_level_bpe

pytestmark = pytest.mark.django_db

ENCODING = "tiny-llama"
CARD = {
    "word": "tiny-llama",
    "model_id": "tiny-llama-2b",
    "tier": "local",
    "context_window": 32768,
    "capabilities": ["quick"],
    "encoding": ENCODING,
}


@pytest.fixture
def tokenizer_file(tmp_path, settings):
    path = write_byte_level_bpe(tmp_path / "tokenizer.json")
    settings.NEXUM_TOKENIZER_ENCODINGS = {ENCODING: str(path)}
    settings.NEXUM_ITEM_ENCODINGS = ["cl100k_base", ENCODING]
    default_registry.cache_clear()
    yield path
    default_registry.cache_clear()


def catalog_with(*cards):
    document = json.loads(DEFAULT_CATALOG.read_text())
    document["cards"] += list(cards)
    return document


def pinned_part(prompt_block: str) -> str:
    """The prompt block up to the first section after the pinned ones."""
    ends = [
        prompt_block.index(f"\n\n## {SECTION_TITLES[section]}")
        for section in ("evidence", "failure", "decision", "fact", "artifact", "progress")
        if f"\n\n## {SECTION_TITLES[section]}" in prompt_block
    ]
    return prompt_block[: min(ends, default=len(prompt_block))]


def test_a_card_on_a_tokenizer_json_compiles_within_a_budget_counted_by_that_tokenizer(
    project, tokenizer_file
):
    auth = build_auth_world(project, filler=40)
    model_catalog_replace(project_id=auth.project_id, catalog=catalog_with(CARD), actor="test")
    assert (
        catalog_selectors.budget_for(project_id=auth.project_id, word="tiny-llama").card.encoding == ENCODING
    )

    # W4: every item's count is stored in the new encoding when recorded, as the library counts it
    for item in WorldItem.objects.filter(project_id=auth.project_id):
        assert item.token_counts[ENCODING] == library_count(tokenizer_file, item.rendered), item.rendered

    outcome = context_compile(
        project_id=auth.project_id,
        task_id=str(auth.task.id),
        model_word="tiny-llama",
        overrides={"context_tokens": 3000},
        actor="test",
    )
    context = outcome.context
    assert context.encoding == ENCODING
    block_tokens = library_count(tokenizer_file, context.prompt_block)
    assert block_tokens == context.prompt_tokens
    assert block_tokens + context.tool_tokens <= context.budget["context_tokens"] == 3000
    assert context.excluded_count > 0  # the budget binds: items were left out, counted in this encoding
    tools = Tool.objects.filter(project_id=auth.project_id, name__in=context.tools)
    definitions = [
        canonical_json({"name": tool.name, "description": tool.description, "schema": tool.schema})
        for tool in tools
    ]
    assert context.section_tokens["tools"] == context.tool_tokens
    assert context.tool_tokens == sum(library_count(tokenizer_file, text) for text in definitions)
    assert context.section_tokens["pinned"] == library_count(
        tokenizer_file, pinned_part(context.prompt_block)
    )
    # the same block in cl100k is a different number: the card's encoding, not cl100k, was used
    assert counter_for("cl100k_base").count(context.prompt_block) != block_tokens
    replay = context_replay(project_id=auth.project_id, digest=context.digest)
    assert replay.matches


def test_a_card_on_a_tokenizer_json_that_does_not_load_is_refused_at_catalog_load(
    project, tmp_path, settings
):
    broken = tmp_path / "tokenizer.json"
    broken.write_text('{"model": {"type": "BPE"}}')
    settings.NEXUM_TOKENIZER_ENCODINGS = {ENCODING: str(broken)}
    default_registry.cache_clear()
    try:
        with pytest.raises(UnknownEncoding) as raised:
            model_catalog_replace(project_id=str(project.id), catalog=catalog_with(CARD), actor="test")
    finally:
        default_registry.cache_clear()
    assert raised.value.field == f"cards[{len(catalog_with()['cards'])}].encoding"  # the card appended
    assert "Hugging Face tokenizer.json" in raised.value.message
    assert catalog_selectors.catalog_version(str(project.id)) == 0
