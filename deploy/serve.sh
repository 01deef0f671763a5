#!/usr/bin/env bash
# Nexum in production: migrate, collect static files, then run gunicorn, a Celery worker, the dispatcher (which
# sends again the requests no worker runs) and, when the Celery app has a beat schedule, Celery beat; when one
# of them stops, or on SIGINT/SIGTERM, stop them all.
# Usage: deploy/serve.sh [--check]    --check: only check that the required environment is set.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
for name in DATABASE_URL CELERY_BROKER_URL NEXUM_SECRET_KEY; do
    [ -n "${!name:-}" ] || missing+=("$name")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "serve: set ${missing[*]} first (README: \"Running in production\")" >&2
    exit 2
fi
if [ "${1:-}" = "--check" ]; then
    exit 0
fi

export NEXUM_DEBUG="${NEXUM_DEBUG:-false}"
python manage.py migrate --noinput
python manage.py collectstatic --noinput --verbosity 0

pids=()
signalled=0
stop_all() {
    kill -TERM "${pids[@]}" 2>/dev/null || true
}
trap 'signalled=1; stop_all' INT TERM

python -m celery -A nexum worker --loglevel INFO ${NEXUM_WORKER_CONCURRENCY:+--concurrency "$NEXUM_WORKER_CONCURRENCY"} &
pids+=($!)
python manage.py nexum_dispatcher &
pids+=($!)
if python -c 'from nexum.celery import app; raise SystemExit(0 if app.conf.beat_schedule else 1)'; then
    python -m celery -A nexum beat --loglevel INFO --schedule "${NEXUM_DATA_DIR:-data}/celerybeat-schedule" &
    pids+=($!)
fi
python -m gunicorn -c deploy/gunicorn.conf.py &
pids+=($!)

status=0
wait -n || status=$?
stop_all
wait || true
if [ "$signalled" = 1 ]; then
    status=0  # stopped as asked
fi
exit "$status"
