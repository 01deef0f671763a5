"""The context-quality benchmark's dataset (bench/context_quality.py runs it): the hand-written scenarios in
``bench/data/context_quality/`` (one JSON file per domain), each checked against the dataset's rules as it is
loaded, and the generated distractor facts.

Each scenario is one task (objective, inputs, constraints, success criteria) with the facts it needs, each
tagged with its kind (``shared_words``, ``other_wording``, ``entity_hop``, ``with_another``), and look-alike
traps. Distractors are realistic facts about services no scenario asks about, from seeded templates.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from nexum.core.world.items import render_fact
from nexum.core.world.relevance import terms_of

DATA = Path(__file__).resolve().parent / "data" / "context_quality"
KINDS = ("shared_words", "other_wording", "entity_hop", "with_another")
# Words that carry no content: a fact sharing only these with a step shares no word with it.
_STOPWORD_TEXT = (
    "a about after all also an and any are as at be been before being but by can could do does each for "
    "from had has have how if in into is it its it's may might more most must no not of off on once one "
    "only or other our out over own per same should so some such than that the their them then there "
    "these they this those through to too under until up us use used uses using via was we were what when "
    "where which while who why will with within without would you your"
)
STOPWORDS = frozenset(_STOPWORD_TEXT.split())


class DatasetError(ValueError):
    """A scenario file that breaks the dataset's rules; the message names the scenario and the rule."""


@dataclass(frozen=True)
class Fact:
    key: str
    """``<scenario>/n<i>`` (needed), ``<scenario>/t<i>`` (trap) or ``distractor/<i>``."""
    subject: str
    text: str
    kind: str = ""
    """A needed fact's kind; empty for traps and distractors."""

    @property
    def rendered(self) -> str:
        return render_fact(self.text, subject=self.subject)


@dataclass(frozen=True)
class Scenario:
    id: str
    domain: str
    objective: str
    inputs: tuple[str, ...]
    constraints: tuple[str, ...]
    success_criteria: tuple[str, ...]
    needed: tuple[Fact, ...]
    traps: tuple[Fact, ...]

    @property
    def step_text(self) -> str:
        return " ".join((self.objective, *self.inputs, *self.constraints, *self.success_criteria))


# --- the dataset ------------------------------------------------------------------------------------------


def _stem(word: str) -> str:
    """A crude stem, enough to tell that "tokens" and "token" or "rotated" and "rotate" share a word."""
    for suffix in ("ing", "ed", "es", "s"):
        if len(word) > len(suffix) + 3 and word.endswith(suffix):
            return word[: -len(suffix)]
    return word


def content_words(text: str) -> frozenset[str]:
    """The stems of ``text``'s words that carry content (stopwords and numbers left out)."""
    return frozenset(
        _stem(term)
        for term in terms_of(text)
        if len(term) > 1 and term not in STOPWORDS and not term.isdigit()
    )


def scenario_from(document: Mapping[str, object], domain: str) -> Scenario:
    """One scenario of a domain file, checked against the dataset's rules (``DatasetError`` names one)."""
    name = str(document.get("id", "?"))

    def fail(rule: str) -> DatasetError:
        return DatasetError(f"scenario {name} ({domain}): {rule}")

    needed_specs = list(document.get("needed") or [])
    trap_specs = list(document.get("traps") or [])
    if not needed_specs:
        raise fail("it needs at least one fact")
    if not 1 <= len(trap_specs) <= 3:
        raise fail("it has 1 to 3 traps")
    needed = tuple(
        Fact(f"{name}/n{index}", spec["subject"], spec["text"], spec["kind"])
        for index, spec in enumerate(needed_specs)
    )
    traps = tuple(
        Fact(f"{name}/t{index}", spec["subject"], spec["text"]) for index, spec in enumerate(trap_specs)
    )
    scenario = Scenario(
        id=name,
        domain=domain,
        objective=str(document["objective"]),
        inputs=tuple(document.get("inputs") or ()),
        constraints=tuple(document.get("constraints") or ()),
        success_criteria=tuple(document.get("success_criteria") or ()),
        needed=needed,
        traps=traps,
    )
    step = content_words(scenario.step_text)
    for index, (spec, fact) in enumerate(zip(needed_specs, needed, strict=True)):
        shared = content_words(fact.rendered) & step
        if fact.kind not in KINDS:
            raise fail(f"needed fact {index} has kind {fact.kind!r}, not one of {', '.join(KINDS)}")
        if fact.kind == "shared_words" and not shared:
            raise fail(f"needed fact {index} is shared_words but shares no content word with the step")
        if fact.kind == "other_wording" and shared:
            raise fail(f"needed fact {index} is other_wording but shares {sorted(shared)} with the step")
        if fact.kind == "entity_hop":
            entity = spec.get("via", "")
            elsewhere = [other.text for other in needed if other is not fact] + list(scenario.inputs)
            if not entity or entity not in fact.text or not any(entity in text for text in elsewhere):
                raise fail(
                    f"needed fact {index} is entity_hop: its 'via' must name an entity in its text and in "
                    "another needed fact or the step's inputs"
                )
        if fact.kind == "with_another":
            partner = spec.get("with")
            if not isinstance(partner, int) or partner == index or not 0 <= partner < len(needed):
                raise fail(f"needed fact {index} is with_another: 'with' must be another needed fact's index")
    for index, trap in enumerate(traps):
        if not content_words(trap.rendered) & step:
            raise fail(f"trap {index} shares no content word with the step, so it is no look-alike")
    return scenario


def load_scenarios(directory: Path = DATA) -> list[Scenario]:
    """Every scenario of every domain file, in file then scenario order; ids unique across files."""
    scenarios = [
        scenario_from(document, path.stem)
        for path in sorted(directory.glob("*.json"))
        for document in json.loads(path.read_text())
    ]
    seen: set[str] = set()
    for scenario in scenarios:
        if scenario.id in seen:
            raise DatasetError(f"scenario id {scenario.id} is used twice")
        seen.add(scenario.id)
    return scenarios


# --- distractors ------------------------------------------------------------------------------------------

_SERVICES_TEXT = (
    "billing-api checkout ledger notifier search-indexer media-resizer geo-router auth-gateway "
    "report-builder inventory-sync pricing-engine chat-relay fraud-scorer email-sender feature-store "
    "export-worker catalog-api shipping-quotes audit-trail session-broker"
)
_SERVICES = _SERVICES_TEXT.split()
_COMPONENTS_TEXT = (
    "connection pool|retry policy|rate limiter|request timeout|health check|log level|cache TTL|"
    "batch size|worker concurrency|circuit breaker|queue depth alarm|TLS certificate|read replica|"
    "cron schedule|feature flag|memory limit|autoscaling target|error budget|schema version|"
    "trace sampling rate"
)
_COMPONENTS = _COMPONENTS_TEXT.split("|")
_TEAMS_TEXT = "payments platform growth data mobile web infra security search ml"
_TEAMS = _TEAMS_TEXT.split()
_NUMBERS = (2, 3, 5, 8, 10, 15, 20, 30, 45, 60, 90, 120, 256, 512, 1024)
_UNITS = ("seconds", "minutes", "requests per second", "MiB", "connections", "retries", "percent")
_TEMPLATES = (
    "The {component} of {service} is set to {number} {unit} since the {team} team's last change.",
    "{service} reads its {component} from config/{service}.yaml; a change needs a rolling restart.",
    "The {team} team owns {service}; page them in #{team}-oncall for anything about its {component}.",
    "Raising the {component} of {service} above {number} {unit} caused an incident in {month}.",
    "{service} emits the metric {metric} every {number} seconds; dashboards for it live in Grafana folder "
    "{team}.",
    "The {component} for {service} in staging differs from production: {number} versus {other} {unit}.",
    "Runbook: when {service} alerts on {component}, first check the {other_service} dependency.",
    "{service} was migrated from {old} to {new} in {month}; the old {component} settings no longer apply.",
    "Do not change the {component} of {service} in the {month} freeze without the {team} lead's approval.",
    "The nightly job {job} depends on {service} and retries {number} times before it pages.",
    "{service} logs at {level} in production; set LOG_LEVEL only through the deploy manifest.",
    "Load tests show {service} saturates at {number} {unit} on two replicas.",
    "The {team} team plans to retire {service}'s {component} in favour of the shared one next quarter.",
    "{service} talks to {other_service} over gRPC with a deadline of {number} {unit}.",
    "A known flaky test in {service} is test_{metric}; it is quarantined, not fixed.",
)
_MONTHS_TEXT = "January February March April May June July August September October November December"
_MONTHS = _MONTHS_TEXT.split()
_STACKS = ("Heroku", "ECS", "Kubernetes", "Nomad", "bare EC2", "Cloud Run")


def distractor_facts(count: int, *, seed: int = 24) -> list[Fact]:
    """``count`` realistic facts about services no scenario asks about, from templates; the same ``count``
    and ``seed`` give the same facts."""
    rng = random.Random(seed)
    facts = []
    for index in range(count):
        service, other_service = rng.sample(_SERVICES, 2)
        component = rng.choice(_COMPONENTS)
        old, new = rng.sample(_STACKS, 2)
        values = {
            "service": service,
            "other_service": other_service,
            "component": component,
            "team": rng.choice(_TEAMS),
            "number": rng.choice(_NUMBERS),
            "other": rng.choice(_NUMBERS),
            "unit": rng.choice(_UNITS),
            "month": rng.choice(_MONTHS),
            "metric": f"{service.replace('-', '_')}_{component.split()[-1]}_{rng.choice(('total', 'count'))}",
            "job": f"{rng.choice(('reconcile', 'export', 'rollup', 'cleanup'))}-{service}",
            "old": old,
            "new": new,
            "level": rng.choice(("INFO", "WARN", "DEBUG")),
        }
        facts.append(
            Fact(f"distractor/{index}", f"{service} {component}", rng.choice(_TEMPLATES).format(**values))
        )
    return facts
