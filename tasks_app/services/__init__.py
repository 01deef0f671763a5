"""Writes to projects, agent tokens and the task graph, one module per noun. Every change is an event; read
models follow by projection."""
