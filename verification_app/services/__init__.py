"""Writes of the verification gate (SPEC V1–V8), one module per noun: ``contracts``, ``completions`` (asking),
``completion_runs`` (checking and deciding), ``approvals``.

Flow of a completion:
1. ``completion_request`` (the API's ``POST /tasks/{id}/complete``) records ``CompletionRequested`` at the
   task's current version, keeping the model's answer in the artifact store (it never decides: V6). A task
   that is not running gets ``skipped`` and nothing is written or run (V2). The request's id is derived from
   the task and that version, so of two concurrent requests exactly one is recorded; the other gets 409
   ``completion_pending`` naming the request to poll.
2. ``completion_run`` (a Celery task; in process right away when Celery is eager) runs the contract's checks
   in the sandbox. Each run is recorded (``CheckRunRecorded``, idempotency key ``check:<name>``); a
   redelivered message re-uses every recorded run and runs only the checks that have none. The request is
   sent to a worker once it is committed; if the broker is down it stays pending and the dispatcher sends it
   (``nexum.work.dispatch``). On a worker the run holds the request's lease (``nexum.work.leases``): the
   sandbox reports each check's process group to it, and every result is written only while the lease is
   still this run's.
3. The decision: ``GateDecided`` and the task's transition (``task_record_gate_decision`` at the version the
   request was recorded at) are appended in one transaction. If the task moved on meanwhile, the decision is
   ``skipped`` and the task is left alone. A redelivery after the decision changes nothing.
"""
