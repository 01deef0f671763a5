"""Context quality (issue 24, item 6): does a compiled context hold the facts a step needs, and what else?
Run by hand; a fixed slice of it is a test (tests/integration/test_context_quality.py).

    .venv/bin/python bench/context_quality.py                      # SQLite, every scenario, 3,000 distractors
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/nexum_bench .venv/bin/python bench/context_quality.py
    .venv/bin/python bench/context_quality.py --verified-half --scale 50000 --model-words quick --json

The world is the hand-written dataset in ``bench/data/context_quality/`` (one JSON file per domain, loaded and
checked by ``bench/context_quality_data.py``): each scenario is one task (objective, inputs, constraints,
success criteria) with the facts it needs, each tagged with its kind (``shared_words``, ``other_wording``,
``entity_hop``, ``with_another``), and look-alike traps. Every scenario is a task of one goal and every fact a
goal fact, so each scenario's facts are unrelated facts for all the others; ``--scale N`` adds N generated
distractor facts (seeded templates, default 3,000).
``--verified-half`` marks every other fact (in a seeded shuffle) verified.

The world is loaded into a fresh project through the event store as bench/worlds.py loads its items, each
task is compiled through the compile service (``context_compile``) for each model word, and the facts that
reached the prompt are read from the stored context's ``included`` ids. Per model word it prints recall
(overall and per kind), steps with every needed fact, the trap rate (share of steps with at least one trap
included), the unrelated share of the included facts' tokens (anything not needed by the step, traps
included; cl100k_base via the project's counter) and the prompt tokens. In the same run three baselines
fill the same fact budget the compiler spent on facts (the compile costs of the facts it included), by first
fit in their own order: BM25 over stemmed words (``bm25s``, Snowball English), embeddings (``wordllama``,
weights shipped in the wheel, never downloaded, through its own float API) and the reciprocal-rank fusion
of the two (k = 60). Their query is the compiler's (``ranking.query_text``: the step's objective, inputs,
constraints and success criteria). Uses (and resets) the database.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

import django

django.setup()

from bench.context_quality_data import KINDS, Fact, Scenario, distractor_facts, load_scenarios  # noqa: E402
from context_app.catalog.services import DEFAULT_CATALOG, model_catalog_replace  # noqa: E402
from context_app.compilation.services.compiles import context_compile  # noqa: E402
from nexum.adapters.tokenization import counter_for  # noqa: E402
from nexum.core.compilation.costs import ITEM_OVERHEAD  # noqa: E402
from nexum.core.compilation.model import CompileInput, Step  # noqa: E402
from nexum.core.compilation.ranking import query_text  # noqa: E402
from nexum.core.compilation.rendering import VERIFIED_LABEL  # noqa: E402
from nexum.core.world.items import DEFAULT_TRUST_CLASS, FactRecorded, item_terms, token_counts  # noqa: E402
from nexum.eventstore import store  # noqa: E402
from tasks_app.models import Task  # noqa: E402
from tasks_app.services.goals import goal_create  # noqa: E402
from tasks_app.services.lifecycle import task_start  # noqa: E402
from tasks_app.services.projects import project_create  # noqa: E402

MODEL_WORDS = ("quick", "local", "frontier")
METHODS = ("nexum", "bm25", "embeddings", "fused")
GOAL = "Keep the company's production platform healthy: work through this quarter's engineering tickets"
ENCODING = "cl100k_base"
BATCH = 1000
RRF_K = 60
_ID_NAMESPACE = uuid.UUID("6f1d2a4e-3c57-4e0b-9a5d-0c7be2f8a113")


# --- the world --------------------------------------------------------------------------------------------


@dataclass
class QualityWorld:
    project_id: str
    scenarios: list[Scenario]
    task_ids: dict[str, str]
    """Scenario id → task id."""
    facts: dict[str, Fact]
    """Item id → fact."""
    verified: frozenset[str]
    """Item ids of verified facts."""
    ids: dict[str, str]
    """Fact key → item id."""


def item_id_for(slug: str, key: str) -> str:
    """A fact's item id: fixed for a slug and key, so ties (by id) fall the same way in every run."""
    return str(uuid.uuid5(_ID_NAMESPACE, f"{slug}/{key}"))


def build_quality_world(
    *, slug: str, scenarios: Sequence[Scenario], scale: int, verified_half: bool, seed: int = 24
) -> QualityWorld:
    """A fresh project with the default catalog, one goal with a running task per scenario, and every
    scenario's facts plus ``scale`` distractors as goal facts (appended as bench/worlds.py does, 1,000 at a
    time; the same texts, terms and token counts the fact service records)."""
    project = project_create(slug=slug, name=f"Context quality {slug}", actor="bench")
    project_id = str(project.id)
    model_catalog_replace(
        project_id=project_id, catalog=json.loads(DEFAULT_CATALOG.read_text()), actor="bench"
    )
    goal = goal_create(
        project_id=project_id,
        objective=GOAL,
        tasks=[
            {
                "key": scenario.id,
                "objective": scenario.objective,
                "inputs": list(scenario.inputs),
                "constraints": list(scenario.constraints),
                "success_criteria": list(scenario.success_criteria),
            }
            for scenario in scenarios
        ],
        actor="bench",
    )
    tasks = {task.key: str(task.id) for task in Task.objects.filter(goal_id=goal.id).exclude(id=goal.id)}
    for task_id in tasks.values():
        task_start(project_id=project_id, task_id=task_id, actor="bench")
    facts = [fact for scenario in scenarios for fact in (*scenario.needed, *scenario.traps)]
    facts += distractor_facts(scale, seed=seed)
    ids = {fact.key: item_id_for(slug, fact.key) for fact in facts}
    order = sorted(ids.values())
    random.Random(seed).shuffle(order)
    verified = frozenset(order[: len(order) // 2]) if verified_half else frozenset()
    counter = counter_for(ENCODING)
    for start in range(0, len(facts), BATCH):
        events = [
            FactRecorded(
                item_id=ids[fact.key],
                goal_id=str(goal.id),
                task_id=None,
                text=fact.text,
                trust_class=DEFAULT_TRUST_CLASS,
                token_counts=token_counts(fact.rendered, [counter]),
                terms=list(item_terms(fact.subject, fact.text)),
                subject=fact.subject,
                verified=ids[fact.key] in verified,
            )
            for fact in facts[start : start + BATCH]
        ]
        store.append(
            stream_id=f"qualityload-{project_id}-{start}",
            events=events,
            expected_version=0,
            project_id=project_id,
            actor="bench",
        )
    return QualityWorld(
        project_id, list(scenarios), tasks, {ids[fact.key]: fact for fact in facts}, verified, ids
    )


# --- metrics ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Selection:
    """The facts one method put in one step's context, and that context's prompt tokens (None: not a
    compile, a baseline's list)."""

    fact_keys: tuple[str, ...]
    prompt_tokens: int | None = None


@dataclass(frozen=True)
class Quality:
    steps: int
    needed: int
    recall: float
    recall_by_kind: dict[str, float]
    steps_complete: int
    trap_rate: float
    unrelated_share: float
    fact_tokens: float
    """Mean tokens of the included facts per step."""
    prompt_tokens: float | None
    """Mean prompt tokens per step (compiles only)."""


def quality(
    scenarios: Sequence[Scenario], selections: Mapping[str, Selection], tokens_of: Callable[[str], int]
) -> Quality:
    """The measures of one method over ``scenarios`` (``selections`` by scenario id; ``tokens_of`` a fact
    key's tokens): recall over all needed facts and per kind, steps with every needed fact, the share of
    steps with at least one trap included, and the share of included fact tokens not needed by the step."""
    found = {kind: 0 for kind in KINDS}
    total = {kind: 0 for kind in KINDS}
    complete = trapped = 0
    unrelated_tokens = all_tokens = 0
    prompt_tokens: list[int] = []
    for scenario in scenarios:
        selection = selections[scenario.id]
        included = set(selection.fact_keys)
        needed = {fact.key for fact in scenario.needed}
        for fact in scenario.needed:
            total[fact.kind] += 1
            found[fact.kind] += fact.key in included
        complete += needed <= included
        trapped += any(trap.key in included for trap in scenario.traps)
        for key in included:
            tokens = tokens_of(key)
            all_tokens += tokens
            unrelated_tokens += tokens * (key not in needed)
        if selection.prompt_tokens is not None:
            prompt_tokens.append(selection.prompt_tokens)
    needed_count = sum(total.values())
    steps = len(scenarios)
    return Quality(
        steps=steps,
        needed=needed_count,
        recall=sum(found.values()) / needed_count if needed_count else 0.0,
        recall_by_kind={kind: found[kind] / total[kind] for kind in KINDS if total[kind]},
        steps_complete=complete,
        trap_rate=trapped / steps if steps else 0.0,
        unrelated_share=unrelated_tokens / all_tokens if all_tokens else 0.0,
        fact_tokens=all_tokens / steps if steps else 0.0,
        prompt_tokens=sum(prompt_tokens) / len(prompt_tokens) if prompt_tokens else None,
    )


def first_fit(ranked: Iterable[str], costs: Mapping[str, int], budget: int) -> tuple[str, ...]:
    """The ids of ``ranked`` taken in order while their costs fit ``budget`` (an item that does not fit is
    skipped and the next tried, as the compiler packs)."""
    chosen, left = [], budget
    for item in ranked:
        if costs[item] <= left:
            chosen.append(item)
            left -= costs[item]
    return tuple(chosen)


def reciprocal_rank_fusion(rankings: Sequence[Sequence[str]], k: int = RRF_K) -> list[str]:
    """Ids by the sum of 1 / (k + rank) over ``rankings`` (rank from 1), ties by id."""
    scores: dict[str, float] = {}
    for ranking in rankings:
        for rank, item in enumerate(ranking, start=1):
            scores[item] = scores.get(item, 0.0) + 1.0 / (k + rank)
    return sorted(scores, key=lambda item: (-scores[item], item))


# --- baselines --------------------------------------------------------------------------------------------


class Baselines:
    """BM25 (stemmed) and embeddings over one world's facts: each ranks every fact for a query, best first,
    ties by item id (``reciprocal_rank_fusion`` fuses the two)."""

    def __init__(self, facts: Mapping[str, Fact]):
        import bm25s
        import numpy as np
        import Stemmer

        logging.getLogger("bm25s").setLevel(logging.WARNING)  # its index building logs at DEBUG
        self.ids = sorted(facts)
        texts = [facts[item].rendered for item in self.ids]
        self._np = np
        self._stemmer = Stemmer.Stemmer("english")
        self._bm25 = bm25s.BM25()
        corpus = bm25s.tokenize(texts, stopwords="en", stemmer=self._stemmer, show_progress=False)
        self._vocabulary = frozenset(corpus.vocab)
        self._bm25.index(corpus, show_progress=False)
        self._tokenize = bm25s.tokenize
        self._embedder = embedder()
        self._vectors = self._embedder.embed(texts, norm=True)

    def bm25(self, query: str) -> list[str]:
        words = self._tokenize(
            [query], stopwords="en", stemmer=self._stemmer, return_ids=False, show_progress=False
        )[0]
        return self._ranked(self._bm25.get_scores([word for word in words if word in self._vocabulary]))

    def embeddings(self, query: str) -> list[str]:
        scores = self._vectors @ self._embedder.embed([query], norm=True)[0]
        return self._ranked(scores)

    def _ranked(self, scores) -> list[str]:
        order = self._np.lexsort((self._np.arange(len(self.ids)), -self._np.asarray(scores, dtype=float)))
        return [self.ids[index] for index in order]


def embedder():
    """WordLlama's 256-dimension model from the files its wheel ships. Its own look-up beside the package
    misses the wheel's ``tokenizers/`` folder and would download, so the package folder is given as the
    cache folder and downloads are off: a missing file is an error, never a fetch."""
    import wordllama

    return wordllama.WordLlama.load(dim=256, cache_dir=Path(wordllama.__file__).parent, disable_download=True)


# --- the run ----------------------------------------------------------------------------------------------


def measure(
    built: QualityWorld, *, model_words: Sequence[str] = MODEL_WORDS, baselines: Baselines | None = None
) -> dict[str, dict[str, Quality]]:
    """Every scenario's task compiled through the service for each model word, the baselines filling the
    compiler's fact budget: ``{word: {method: Quality}}``."""
    counter = counter_for(ENCODING)
    counts = {item: counter.count(fact.rendered) for item, fact in built.facts.items()}
    label = counter.count(VERIFIED_LABEL)
    # What a fact costs the compiler: its stored count, the item overhead and, when verified, the label.
    costs = {item: count + ITEM_OVERHEAD + label * (item in built.verified) for item, count in counts.items()}
    keys = {item: fact.key for item, fact in built.facts.items()}
    tokens_by_key = {keys[item]: count for item, count in counts.items()}
    rankings: dict[str, dict[str, list[str]]] = {}
    if baselines is not None:
        for scenario in built.scenarios:
            query = query_text(
                CompileInput(
                    goal=GOAL,
                    step=Step("baseline", scenario.objective, scenario.inputs),
                    constraints=scenario.constraints,
                    success_criteria=scenario.success_criteria,
                )
            )
            bm25, embedded = baselines.bm25(query), baselines.embeddings(query)
            rankings[scenario.id] = {
                "bm25": bm25,
                "embeddings": embedded,
                "fused": reciprocal_rank_fusion([bm25, embedded]),
            }
    results: dict[str, dict[str, Quality]] = {}
    for word in model_words:
        selections: dict[str, dict[str, Selection]] = {method: {} for method in METHODS}
        for scenario in built.scenarios:
            outcome = context_compile(
                project_id=built.project_id,
                task_id=built.task_ids[scenario.id],
                model_word=word,
                actor="bench",
            )
            included = [item for kind, item in outcome.context.included if kind == "fact"]
            selections["nexum"][scenario.id] = Selection(
                tuple(keys[item] for item in included), outcome.context.prompt_tokens
            )
            budget = sum(costs[item] for item in included)
            for method, ranked in rankings.get(scenario.id, {}).items():
                chosen = first_fit(ranked, costs, budget)
                selections[method][scenario.id] = Selection(tuple(keys[item] for item in chosen))
        results[word] = {
            method: quality(built.scenarios, chosen, tokens_by_key.__getitem__)
            for method, chosen in selections.items()
            if chosen
        }
    return results


def percent(value: float) -> str:
    return f"{100 * value:5.1f}%"


def table(results: Mapping[str, Mapping[str, Quality]]) -> str:
    """One row per model word and method, the measures side by side."""
    short = {
        "shared_words": "shared",
        "other_wording": "other",
        "entity_hop": "entity",
        "with_another": "with",
    }
    header = (
        f"{'word':<9}{'method':<11}{'recall':>7}"
        + "".join(f"{short[kind]:>8}" for kind in KINDS)
        + f"{'complete':>10}{'traps':>8}{'unrelated':>10}{'fact tok':>9}{'prompt':>8}"
    )
    lines = [header, "-" * len(header)]
    for word, methods in results.items():
        for method, measured in methods.items():
            lines.append(
                f"{word:<9}{method:<11}{percent(measured.recall):>7}"
                + "".join(f"{percent(measured.recall_by_kind.get(kind, 0.0)):>8}" for kind in KINDS)
                + f"{f'{measured.steps_complete}/{measured.steps}':>10}{percent(measured.trap_rate):>8}"
                + f"{percent(measured.unrelated_share):>10}{measured.fact_tokens:>9.0f}"
                + (f"{measured.prompt_tokens:>8.0f}" if measured.prompt_tokens is not None else f"{'-':>8}")
            )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    from django.core.management import call_command
    from django.db import connection

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=int, default=3000, help="generated distractor facts (default 3000)")
    parser.add_argument("--verified-half", action="store_true", help="half the facts verified (seeded)")
    parser.add_argument("--model-words", default=",".join(MODEL_WORDS), help="comma-separated catalog words")
    parser.add_argument("--slice", type=int, default=None, metavar="K", help="only the first K scenarios")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    options = parser.parse_args(argv)
    if options.scale < 0 or (options.slice is not None and options.slice < 1):
        parser.error("--scale is 0 or more and --slice 1 or more")
    words = [word.strip() for word in options.model_words.split(",") if word.strip()]
    unknown = sorted(set(words) - set(MODEL_WORDS) - {"local-70b", "best", "cheap"})
    if not words or unknown:
        parser.error(
            f"--model-words: unknown {', '.join(unknown) or '(none given)'}; the catalog's are "
            + ", ".join(MODEL_WORDS)
        )

    started = time.perf_counter()
    scenarios = load_scenarios()[: options.slice]
    call_command("migrate", verbosity=0)
    call_command("flush", interactive=False, verbosity=0)
    built = build_quality_world(
        slug="context-quality", scenarios=scenarios, scale=options.scale, verified_half=options.verified_half
    )
    loaded = time.perf_counter() - started
    baselines = Baselines(built.facts)
    results = measure(built, model_words=words, baselines=baselines)
    elapsed = time.perf_counter() - started
    unrelated = len(built.facts) - round(sum(len(s.needed) for s in scenarios) / len(scenarios))
    summary = {
        "database": connection.vendor,
        "scenarios": len(scenarios),
        "domains": len({scenario.domain for scenario in scenarios}),
        "facts": len(built.facts),
        "needed": sum(len(scenario.needed) for scenario in scenarios),
        "traps": sum(len(scenario.traps) for scenario in scenarios),
        "distractors": options.scale,
        "verified": len(built.verified),
        "seconds": round(elapsed, 1),
        "load_seconds": round(loaded, 1),
    }
    if options.json:
        print(
            json.dumps(
                {**summary, "results": {w: {m: vars(q) for m, q in r.items()} for w, r in results.items()}},
                indent=2,
            )
        )
        return
    print(
        f"database {summary['database']}: {summary['scenarios']} scenarios in {summary['domains']} domains, "
        f"{summary['facts']} goal facts ({summary['needed']} needed, {summary['traps']} traps, "
        f"{options.scale} generated; ~{unrelated} unrelated per step), {summary['verified']} verified; "
        f"loaded in {loaded:.1f} s, measured in {elapsed:.1f} s"
    )
    print(table(results))


if __name__ == "__main__":
    main()
