#!/usr/bin/env bash
# Nexum in production: migrate, collect static files, then run gunicorn, a Celery worker pool per queue, the
# dispatcher (which sends webhook deliveries, and again the requests no worker runs) and, when the Celery app has
# a beat schedule, Celery beat; when one of them stops, or on SIGINT/SIGTERM, stop them all within
# NEXUM_STOP_GRACE_S (deploy/supervise.bash).
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
if ! [[ "${NEXUM_STOP_GRACE_S:-30}" =~ ^[0-9]+([.][0-9]+)?$ ]]; then
    echo "serve: NEXUM_STOP_GRACE_S must be a number of seconds, not \"${NEXUM_STOP_GRACE_S}\"" >&2
    exit 2
fi
for name in NEXUM_WORKER_CONCURRENCY NEXUM_COMPILE_WORKER_CONCURRENCY NEXUM_WEBHOOK_WORKER_CONCURRENCY; do
    if [ -n "${!name:-}" ] && ! [[ "${!name}" =~ ^[1-9][0-9]*$ ]]; then
        echo "serve: $name must be a whole number of processes (1 or more), not \"${!name}\"" >&2
        exit 2
    fi
done
if [ "${1:-}" = "--check" ]; then
    exit 0
fi

export NEXUM_DEBUG="${NEXUM_DEBUG:-false}"
# Every process below keeps its metrics' counts in this folder and /metrics sums them (nexum/adapters/metrics.py);
# emptied at each start, as the processes whose counts it held are gone.
export PROMETHEUS_MULTIPROC_DIR="${PROMETHEUS_MULTIPROC_DIR:-${NEXUM_DATA_DIR:-data}/prometheus}"
rm -rf "$PROMETHEUS_MULTIPROC_DIR"
mkdir -p "$PROMETHEUS_MULTIPROC_DIR"
python manage.py migrate --noinput
python manage.py collectstatic --noinput --verbosity 0

source deploy/supervise.bash
# A worker pool per queue (CELERY_TASK_ROUTES in config/settings.py), so a backlog of one kind never delays another:
# completions (and the default queue: async resolves, health pings), compiles, webhook deliveries.
pool() {
    local name=$1 queues=$2 concurrency=$3
    start "$name worker" python -m celery -A config worker --loglevel INFO -Q "$queues" -n "$name@%h" \
        --concurrency "$concurrency"
}
pool completions completions,celery "${NEXUM_WORKER_CONCURRENCY:-$(nproc)}"
pool compiles compiles "${NEXUM_COMPILE_WORKER_CONCURRENCY:-2}"
pool webhooks webhooks "${NEXUM_WEBHOOK_WORKER_CONCURRENCY:-4}"
start dispatcher python manage.py nexum_dispatcher
if python -c 'from config.celery import app; raise SystemExit(0 if app.conf.beat_schedule else 1)'; then
    start beat python -m celery -A config beat --loglevel INFO --schedule "${NEXUM_DATA_DIR:-data}/celerybeat-schedule"
fi
start "web server" python -m gunicorn -c deploy/gunicorn.conf.py
supervise
