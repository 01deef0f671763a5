"""Nexum's framework-free core.

Nothing in this package imports Django, DRF, Celery or tiktoken (tests/unit/test_core_boundary.py walks
the imports to keep it so). Adapters around it live in the Django apps.
"""
