"""Requests in flight (issue 13): every accepted request reaches a decision through broker, database and
worker faults.

- ``kinds``: which requests are dispatched work (a completion, a queued compile) and where they live;
- ``dispatch``: the log is the outbox; sending a request, and the dispatcher's pass;
- ``leases``: one process at a time works on a request; takeovers of dead holders, fenced writes;
- ``worker``: the Celery options of the tasks that answer requests, and a run under the lease;
- ``selectors``: pending and stuck requests (the dispatcher, ``nexum_requeue``, the admin dashboard);
- ``models``: the ``Work`` table (operational state, not a read model).
"""
