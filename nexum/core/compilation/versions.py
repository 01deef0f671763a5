"""The compiler's versions: the renderer every digest names, and the version from which each change of
ranking applies. Every version still renders, so a context stored by one replays to its own digest."""

COMPILER_VERSION = 6
"""The renderer's version, part of every digest. Version 2 gives every retrieved and evidence item its origin
line and lets a compile show the entries of a fold instead of its summary (``Fold``); version 3 quotes
retrieved ``agent_reported`` content as data too; version 4 ranks against the whole step and the focus with
normalized words and leaves facts below the relevance floor out; version 5 ranks by meaning too (the
lexical score fused with the cosine of the items' and the step's int8 vectors), against the step's own words
(``query_text``: the goal's words are shared by every task), leaves facts and evidence below the floor out,
and lets facts in through a named entity they share with a relevant fact or the step (second hops). It
records its embedder in the digest. ``compile_context`` renders the older versions still, so a context stored
by one replays to its own digest. Version 6 ranks facts against the step's vector moved toward its best
facts' (``ranking._fed_back``: pseudo-relevance feedback) and links facts through the heads of qualified
names too (``entities.with_heads``)."""
COMPILER_VERSIONS = (1, 2, 3, 4, 5, 6)
RELEVANT_FROM = 4
"""The first version with the whole-step query, normalized words and the relevance floor."""
MEANING_FROM = 5
"""The first version that ranks by meaning, floors evidence and follows named entities."""
FEEDBACK_FROM = 6
"""The first version that ranks facts by the fed-back query vector and links through entity heads."""
