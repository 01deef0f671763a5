"""Signed webhooks (issue 18): an operator registers a URL for a project; every event of the project's log
after that is POSTed to it, signed, at least once, retried with backoff.

- ``models``: webhooks, one delivery per (webhook, event) and its attempts (operational state, not read
  models: a rebuild never touches them);
- ``services``: registering and removing webhooks, recording the deliveries due from the log, one attempt;
- ``signing``: the ``Nexum-Signature`` header;
- ``tasks``: the delivery task and its work kind (nexum/work: leases, the dispatcher's pass);
- ``api`` and ``admin``: the operator's configuration and the attempts.
"""
