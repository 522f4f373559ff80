#!/usr/bin/env bash
# Install one built wheel into a fresh venv with no compiler usable, and run the test suite
# against the installed package (not the checkout).
#
# Usage: scripts/test_wheel.sh PYTHON WHEEL SDIST [pytest args...]
#   PYTHON  the interpreter the venv is made from (e.g. ~/.pyenv/versions/3.12.1/bin/python3)
#   WHEEL   the wheel to install (its [test] extra and the pinned Python SDK peer come too)
#   SDIST   the sdist the tests are taken from (unpacked to a temporary folder; the .py files
#           of its acp_fast/ are removed there: what is left (.pyx/.pxd/.pyi, read by source
#           tests) is no package, so the installed regular package is always the one imported)
# Env: ACP_FAST_NO_EXTENSIONS (passed on: the pure twin), KEEP_WHEEL_TEST_DIR=1.
#
# "No compiler": gcc/g++/cc/c++/clang (and the target-prefixed names) are shadowed on PATH
# by scripts that fail, pip may only install binary distributions, and the wheel comes from
# a local folder (--no-index for acp-fast itself). The TypeScript peers are linked from the
# checkout's peers/ts/node_modules (scripts/install_peers.sh installs them).
set -euo pipefail
[ $# -ge 3 ] || { sed -n '2,16p' "$0"; exit 2; }
cd "$(dirname "$0")/.."
ROOT="$(pwd)"
PY="$1"; WHEEL="$(cd "$(dirname "$2")" && pwd)/$(basename "$2")"; SDIST="$(cd "$(dirname "$3")" && pwd)/$(basename "$3")"
shift 3

work="$(mktemp -d "${TMPDIR:-/tmp}/acp-fast-wheeltest.XXXXXX")"
cleanup() { if [ -z "${KEEP_WHEEL_TEST_DIR:-}" ]; then rm -rf "$work"; else echo "kept $work"; fi; }
trap cleanup EXIT

# Compilers fail loudly if anything tries to build.
mkdir "$work/nocc"
for cc in cc c++ gcc g++ clang clang++ x86_64-linux-gnu-gcc x86_64-linux-gnu-g++ ld; do
    printf '#!/bin/sh\necho "test_wheel: no compiler allowed here ($0)" >&2\nexit 1\n' >"$work/nocc/$cc"
    chmod +x "$work/nocc/$cc"
done
export PATH="$work/nocc:$PATH" CC="$work/nocc/cc" CXX="$work/nocc/c++"
export PIP_ONLY_BINARY=":all:" PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 PYTHONDONTWRITEBYTECODE=1

"$PY" -m venv "$work/venv"
VPY="$work/venv/bin/python"
"$VPY" -m pip install -q "${WHEEL}[test]"
"$VPY" -m pip install -q "agent-client-protocol[http]==0.12.1"

# The tests, from the sdist, without the package's Python sources.
mkdir "$work/src"
tar xzf "$SDIST" -C "$work/src" --strip-components=1
find "$work/src/acp_fast" -name '*.py' -delete
if [ -d "$ROOT/peers/ts/node_modules" ]; then ln -s "$ROOT/peers/ts/node_modules" "$work/src/peers/ts/node_modules"; fi

cd "$work/src"
"$VPY" - <<'PY'
import os, sys, sysconfig, acp_fast
from pathlib import Path
where = Path(acp_fast.__file__).resolve().parent.parent
assert where == Path(sysconfig.get_paths()["platlib"]).resolve(), f"acp_fast imported from {where}"
print(f"testing acp_fast {acp_fast.IMPLEMENTATION} twin installed in {where} on Python {sys.version.split()[0]}")
if not os.environ.get("ACP_FAST_NO_EXTENSIONS"):
    assert acp_fast.IMPLEMENTATION == "c"
PY
if [ -n "${ACP_FAST_NO_EXTENSIONS:-}" ]; then set -- -m "not c_extension" "$@"; fi
"$VPY" -m pytest -q -p no:cacheprovider "$@"
