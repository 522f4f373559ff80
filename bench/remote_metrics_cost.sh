#!/usr/bin/env bash
# What the remote server's metrics cost per streamed update, in instructions of the whole
# server process: `acp-fast serve --testy` under callgrind, with and without `--metrics-port`,
# streaming N updates over WebSocket to acp_fast's benchmark client (which asks for batch
# frames); the difference of a long and a short stream cancels start-up and shutdown.
#
# Usage: bash bench/remote_metrics_cost.sh [LONG [SHORT [REPEATS]]]   (default 40000 10000 2)
# Needs valgrind and the package installed with the `remote` extra in the active Python.
# Prints one line per run: metrics off/on, the repeat, instructions per update.
set -euo pipefail
LONG=${1:-40000}
SHORT=${2:-10000}
REPEATS=${3:-2}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

free_port() {
    python -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# instructions of one server run that streams $2 updates; $1: extra server flags
server_instructions() {
    local port log pid
    port=$(free_port)
    log="$work/server.log"
    # shellcheck disable=SC2086
    PYTHONHASHSEED=0 valgrind --tool=callgrind --callgrind-out-file=/dev/null \
        acp-fast serve --testy --versions 1 --loop asyncio --port "$port" $1 > "$log" 2>&1 &
    pid=$!
    for _ in $(seq 1 300); do grep -q "listening" "$log" && break; sleep 0.2; done
    python -m acp_fast.benchmark.remote_client "ws://127.0.0.1:$port/acp" stream "$2" --warmup 0 \
        --loop asyncio > /dev/null
    kill -INT "$pid"
    wait "$pid" || true
    grep -o "Collected : [0-9]*" "$log" | grep -o "[0-9]*"
}

for flags in "" "--metrics-port 0"; do
    for rep in $(seq 1 "$REPEATS"); do
        long=$(server_instructions "$flags" "$LONG")
        short=$(server_instructions "$flags" "$SHORT")
        echo "metrics $([ -n "$flags" ] && echo on || echo off), run $rep: $(( (long - short) / (LONG - SHORT) )) instructions per update"
    done
done
