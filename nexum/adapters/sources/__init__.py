"""Context sources (SPEC R1, R11): the port (``base.py``), the kinds (one module each, registered with
``@source_kind``: ``folder``, ``docs``, ``tickets_json``, ``http_json``) and their registry (``registry.py``:
``build_source(kind, name, config)`` builds one from its stored configuration). The resolver only ever sees
a source's ``spec`` and the items it returns. Every built-in kind reads only where the operator's
``SourcePolicy`` allows (``nexum.adapters.source_policy``): checked when it is configured and again at every
read. A source that cannot answer raises a ``SourceFailure``; ``fetch`` turns any failure into a failed
``SourceResult``, so a source that is down makes the bundle incomplete instead of failing the resolve."""
