"""Check kinds: one module per kind, each a ``CheckSpec`` registered with ``@check_kind`` (``registry.py``
finds every module of this package). Adding a kind is adding a module here, and its tests."""
