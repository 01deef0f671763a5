# Sourced by deploy/serve.sh: run long-lived processes side by side and stop them together, in bounded time.
#
#   start NAME COMMAND [ARG...]   run COMMAND in the background; NAME is how the stop's messages call it
#   supervise                     wait until one of them stops or SIGINT/SIGTERM comes, then stop them all
#
# Stopping sends each process one SIGTERM (a second could cut short what the first lets finish: the
# dispatcher's pass, a worker's warm shutdown) and gives them NEXUM_STOP_GRACE_S seconds (default 30), as a
# container's stop grace does; whatever is still running then is killed (SIGKILL) and named on stderr.
# supervise returns the status of the process that stopped first, 0 when a signal asked for the stop, and 1
# if one had to be killed.

pids=()
names=()
terminated=0  # how many of pids have been sent their SIGTERM
signalled=0

start() {
    local name=$1
    shift
    "$@" &
    pids+=($!)
    names+=("$name")
}

terminate_all() {
    local index
    for ((index = terminated; index < ${#pids[@]}; index++)); do
        kill -TERM "${pids[$index]}" 2>/dev/null || true
    done
    terminated=${#pids[@]}
}

any_running() {
    local pid
    for pid in "${pids[@]}"; do
        if kill -0 "$pid" 2>/dev/null; then
            return 0
        fi
    done
    return 1
}

trap 'signalled=1; terminate_all' INT TERM

supervise() {
    local grace=${NEXUM_STOP_GRACE_S:-30} status=0 killed=0 timer index
    if [ "$signalled" = 0 ]; then
        wait -n || status=$?
    fi
    terminate_all
    sleep "$grace" &
    timer=$!
    while any_running && kill -0 "$timer" 2>/dev/null; do
        wait -n || true
    done
    kill "$timer" 2>/dev/null || true
    for index in "${!pids[@]}"; do
        if kill -0 "${pids[$index]}" 2>/dev/null; then
            echo "serve: the ${names[$index]} (pid ${pids[$index]}) did not stop within ${grace} s of SIGTERM: killed" >&2
            kill -KILL "${pids[$index]}" 2>/dev/null || true
            killed=1
        fi
    done
    wait || true
    if [ "$signalled" = 1 ]; then
        status=0  # stopped as asked
    fi
    if [ "$killed" = 1 ] && [ "$status" = 0 ]; then
        status=1
    fi
    return "$status"
}
