"""Writes to the world state (SPEC W1–W4), one module per noun: every change is an event; read models
follow by projection."""
