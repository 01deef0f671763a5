"""Gunicorn's settings for Nexum (``make serve`` starts ``gunicorn -c deploy/gunicorn.conf.py``).

The defaults suit one machine behind a reverse proxy that terminates TLS; the environment changes them, and
``GUNICORN_CMD_ARGS`` reaches every other gunicorn option.
"""

import multiprocessing
import os

wsgi_app = "config.wsgi:application"
bind = os.environ.get("NEXUM_WEB_BIND", "127.0.0.1:8000").split(",")
# Threads share a process's compile cache and database connections (persistent, see CONN_MAX_AGE).
worker_class = "gthread"
workers = int(os.environ.get("NEXUM_WEB_WORKERS") or 2 * multiprocessing.cpu_count() + 1)
threads = int(os.environ.get("NEXUM_WEB_THREADS") or 4)
# A request's work is bounded (checks and slow resolves run in the Celery worker): a worker silent this
# long is stuck and is replaced; on restart, requests in flight get graceful_timeout to finish.
timeout = int(os.environ.get("NEXUM_WEB_TIMEOUT") or 60)
graceful_timeout = 30
keepalive = 5
# Recycle each worker after about a thousand requests, staggered so they never all restart at once.
max_requests = 1000
max_requests_jitter = 100
# The proxies whose X-Forwarded-Proto/-For are believed: a request they mark https is secure for Django
# (SSL redirect, secure cookies) without trusting the header from anyone else.
forwarded_allow_ips = os.environ.get("NEXUM_FORWARDED_ALLOW_IPS", "127.0.0.1,::1")
accesslog = "-"
errorlog = "-"


def post_fork(server, worker):
    """Each worker tells the application (config/settings.py) the thread and worker counts it serves with, as
    finally configured (GUNICORN_CMD_ARGS and the command line included): an open event stream holds one of
    its process's threads, so the streams' bounds derive from them (NEXUM_EVENT_STREAMS_MAX, and all of a
    process's threads but one)."""
    os.environ["NEXUM_WEB_THREADS"] = str(worker.cfg.threads)
    os.environ["NEXUM_WEB_WORKERS"] = str(server.cfg.workers)
