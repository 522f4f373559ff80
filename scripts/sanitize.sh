#!/usr/bin/env bash
# Build the three compiled modules -- the engine (acp_fast._engine_c), the read gate
# (acp_fast.protocol._gate_c) and the hot path (acp_fast.roles._hot_c) -- with
# AddressSanitizer + UndefinedBehaviorSanitizer (ACP_FAST_SANITIZE=1, see setup.py) in a
# temporary copy of the checkout, check that all three link libasan and libubsan and are
# the ones imported, then run the engine, connection, read-gate and roles tests against
# them. Exits non-zero on any test failure and on any sanitizer report (ASan aborts the
# process; UBSan is made to halt on its first report, and the output is searched for
# reports as well).
#
# Usage: scripts/sanitize.sh [pytest args...]
#        (default: the engine and connection tests, and the tests of the gate and hot path)
# Env:   PYTHON (default: python3), KEEP_SANITIZE_DIR=1 keeps the temporary copy.
#
# CPython itself is not instrumented, so libasan is preloaded and leak detection is off
# (the interpreter keeps memory alive at exit on purpose). PYTHONMALLOC=malloc routes
# Python objects through malloc, so ASan sees overflows of Python buffers too.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$(pwd)"
PYTHON="${PYTHON:-python3}"

libasan="$("${CC:-gcc}" -print-file-name=libasan.so)"
if [ ! -e "$libasan" ]; then
    echo "sanitize.sh: libasan not found (install the compiler's sanitizer runtime)" >&2
    exit 2
fi

work="$(mktemp -d "${TMPDIR:-/tmp}/acp-fast-sanitize.XXXXXX")"
cleanup() { if [ -z "${KEEP_SANITIZE_DIR:-}" ]; then rm -rf "$work"; else echo "kept $work"; fi; }
trap cleanup EXIT

# The checkout's files (tracked and new, not ignored): no build outputs, no node_modules.
git ls-files -z --cached --others --exclude-standard -- . ':!:peers/ts/node_modules' \
    | xargs -0 -r cp -P --parents -t "$work"
# The pinned TypeScript SDK (scripts/install_peers.sh) is linked, not copied: the schema tests
# read the ACP schemas it ships, and must not skip when the peers are required (CI).
if [ -d "$ROOT/peers/ts/node_modules" ]; then ln -s "$ROOT/peers/ts/node_modules" "$work/peers/ts/node_modules"; fi
rm -f "$work"/acp_fast/*.so "$work"/acp_fast/_engine_c.cpp "$work"/acp_fast/protocol/*.so \
    "$work"/acp_fast/roles/*.so "$work"/acp_fast/protocol/_gate_c.c "$work"/acp_fast/roles/_hot_py.c

echo "=== sanitizer build (ASan + UBSan) in $work ==="
build() {
    if [ -z "${ACP_FAST_SANITIZE_ISOLATED:-}" ] && "$PYTHON" -c "import Cython, simdjson, setuptools" 2>/dev/null; then
        # The build requirements are installed here: build in place.
        ACP_FAST_SANITIZE=1 "$PYTHON" setup.py -q build_ext --inplace
    else
        # Otherwise let pip build a wheel with the pinned [build-system] requirements in an
        # isolated environment, and take the extensions out of it.
        ACP_FAST_SANITIZE=1 "$PYTHON" -m pip wheel -q --no-deps -w wheel .
        "$PYTHON" - <<'PY'
import glob, zipfile
(whl,) = glob.glob("wheel/*.whl")
with zipfile.ZipFile(whl) as z:
    for prefix in ("acp_fast/_engine_c", "acp_fast/protocol/_gate_c", "acp_fast/roles/_hot_c"):
        names = [n for n in z.namelist() if n.startswith(prefix) and n.endswith(".so")]
        assert len(names) == 1, (prefix, names)
        z.extract(names[0], ".")
PY
    fi
}
(cd "$work" && build >build.log 2>&1) || {
    tail -40 "$work/build.log" >&2
    exit 1
}

for pattern in acp_fast/_engine_c acp_fast/protocol/_gate_c acp_fast/roles/_hot_c; do
    sos=("$work"/$pattern*.so)
    if [ "${#sos[@]}" -ne 1 ] || [ ! -e "${sos[0]}" ]; then
        echo "sanitize.sh: expected one $pattern*.so in the sanitizer build, found: ${sos[*]}" >&2
        exit 1
    fi
    # (ldd's output is captured first: with pipefail, `ldd | grep -q` fails at random when
    # grep exits before ldd has written everything and ldd dies of SIGPIPE)
    linked="$(ldd "${sos[0]}")"
    if ! grep -q libasan <<<"$linked" || ! grep -q libubsan <<<"$linked"; then
        echo "sanitize.sh: ${sos[0]} is not linked against libasan/libubsan (ACP_FAST_SANITIZE ignored?)" >&2
        exit 1
    fi
    echo "sanitized build: ${sos[0]#"$work"/} links libasan + libubsan"
done

if [ "$#" -eq 0 ]; then
    # the engine (its outbox too) and the connection; the read gate (_gate_c: test_protocol_surfaces.py, and
    # on live connections test_roles.py); the hot path (_hot_c: every role test, the
    # dispatch of requests, notifications and session updates in test_roles*.py)
    set -- tests/test_engine_batch.py tests/test_engine_c_specific.py tests/test_engine_diff.py \
        tests/test_engine_encode.py tests/test_engine_envelope.py tests/test_engine_framing.py \
        tests/test_engine_line_splitter.py tests/test_engine_limits.py tests/test_engine_forwarder.py \
        tests/test_engine_outbox.py tests/test_connection.py tests/test_protocol_surfaces.py tests/test_roles.py \
        tests/test_roles_runtime.py
fi

log="$work/sanitize.log"
echo "=== tests under ASan/UBSan: $* ==="
status=0
(
    cd "$work"
    export LD_PRELOAD="$libasan"
    export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:halt_on_error=1:detect_stack_use_after_return=0"
    export UBSAN_OPTIONS="halt_on_error=1:abort_on_error=1:print_stacktrace=1"
    export PYTHONMALLOC=malloc
    "$PYTHON" - <<'PY'
import os
import acp_fast, acp_fast._engine_c as c
import acp_fast.protocol._gate_c as gate_c
import acp_fast.roles._hot_c as hot_c
from acp_fast.protocol import gate
from acp_fast.roles import _hot
assert acp_fast.IMPLEMENTATION == "c", acp_fast.IMPLEMENTATION
assert gate.compiled_available(), "the compiled read gate is not used"
assert _hot.IMPLEMENTATION == "c", _hot.IMPLEMENTATION
for module in (c, gate_c, hot_c):
    assert module.__file__.startswith(os.getcwd()), module.__file__
    print("sanitized:", module.__file__)
PY
    "$PYTHON" -m pytest -q -p no:cacheprovider "$@"
) 2>&1 | tee "$log" || status=$?


if grep -qE "ERROR: AddressSanitizer|runtime error:|ERROR: LeakSanitizer|SUMMARY: (Address|UndefinedBehavior)Sanitizer" "$log"; then
    echo "sanitize.sh: sanitizer report(s) above" >&2
    exit 1
fi
if [ "$status" -ne 0 ]; then
    echo "sanitize.sh: tests failed (exit $status)" >&2
    exit "$status"
fi
echo "sanitize.sh: clean (no ASan/UBSan report)"
