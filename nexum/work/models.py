"""Work in flight: who is running a pending request now, and when the dispatcher last sent it.

This is operational state, not a read model. Whether a request is pending or decided is a fact of the log
(``CompletionRequested`` … ``GateDecided``, ``ContextCompileRequested`` … ``ContextCompiled``) and of its
projections; a ``Work`` row only coordinates the processes working on one (the lease) and paces the
dispatcher (the sends). It is never rebuilt from the log, a rebuild never clears it, and losing it loses
nothing: a request without a row is sent again and leased again. A row lives while its request is in flight
and is deleted when the request is answered.
"""

from __future__ import annotations

from django.db import models


class Work(models.Model):
    key = models.CharField(primary_key=True, max_length=80, help_text="<kind>:<request id>")
    kind = models.CharField(max_length=32)
    request_id = models.UUIDField()
    project_id = models.UUIDField(null=True, blank=True, help_text="the request's project")

    # The lease: blank ``owner`` means nobody holds it.
    owner = models.CharField(max_length=200, blank=True, help_text="host:pid:token of the holding process")
    host = models.CharField(max_length=200, blank=True)
    process_space = models.CharField(
        max_length=200, blank=True, help_text="boot id and pid namespace: pids compare only within one"
    )
    pid = models.IntegerField(null=True, blank=True)
    pid_started = models.BigIntegerField(null=True, blank=True, help_text="clock ticks since boot")
    leased_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True, help_text="renewed by the holder's heartbeat")
    takeovers = models.PositiveIntegerField(default=0, help_text="leases taken from a dead or expired holder")
    check_name = models.CharField(max_length=200, blank=True, help_text="the check the holder runs now")
    check_pid = models.IntegerField(null=True, blank=True, help_text="its process group")
    check_started = models.BigIntegerField(null=True, blank=True)

    # The dispatcher's pacing.
    sends = models.PositiveIntegerField(default=0, help_text="times the dispatcher or an operator sent it")
    sent_at = models.DateTimeField(null=True, blank=True)
    next_send_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["key"]
        verbose_name = "work in flight"
        verbose_name_plural = "work in flight"

    def __str__(self) -> str:
        return f"{self.key} ({self.owner or 'no lease'})"
