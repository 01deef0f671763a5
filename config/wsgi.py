"""The WSGI application (gunicorn, ``runserver``). Under the embedded default (no broker) the process that
serves it also runs the embedded dispatcher (``nexum.work.embedded``)."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
application = get_wsgi_application()

from nexum.work.embedded import start_embedded_dispatcher  # noqa: E402 (needs the settings loaded above)

start_embedded_dispatcher()
