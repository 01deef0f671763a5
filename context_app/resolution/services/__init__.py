"""Writes of the context resolver (SPEC R1–R11), one module per noun. Every change is an event; read models
follow by projection."""
