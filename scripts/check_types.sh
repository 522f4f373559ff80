#!/usr/bin/env bash
# The user-facing code type-checks strictly: every file in examples/ and the README's Python
# snippets of the builder API (all but the sans-IO engine's, whose frames are told apart by
# their ``kind`` at run time) pass `mypy --strict` and `pyright` in strict mode (pyrightconfig.json), and none of
# them needs a `cast`, an `isinstance` narrowing or a `type: ignore` to do so (the typed API
# must carry the version and the role by itself).
#
# Usage: scripts/check_types.sh            (pyright from npm, pinned below, cached in .cache/)
# Env:   PYTHON (default: python), PYRIGHT (a pyright command to use instead of the pinned one)
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python}
PYRIGHT_VERSION=1.1.407

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# the README's builder-API snippets, one file each (readme_1.py, readme_2.py, …)
"$PYTHON" - "$work" <<'PY'
import re, sys
from pathlib import Path
blocks = re.findall(r"```python\n(.*?)```", Path("README.md").read_text(encoding="utf-8"), flags=re.S)
blocks = [b for b in blocks if "from acp_fast import engine" not in b]
for i, block in enumerate(blocks, 1):
    Path(sys.argv[1], f"readme_{i}.py").write_text(block, encoding="utf-8")
print(f"{len(blocks)} README snippets of the builder API")
PY
files=(examples "$work")

echo "-- forbidden escapes (cast, isinstance, type: ignore)"
if grep -rnE '\bcast\(|\bisinstance\(|type: *ignore' examples "$work"/*.py; then
    echo "error: the user-facing code above needs an escape from the type checker" >&2
    exit 1
fi

echo "-- mypy --strict"
"$PYTHON" -m mypy --strict --no-incremental "${files[@]}"

echo "-- pyright (strict)"
if [ -n "${PYRIGHT:-}" ]; then
    pyright=($PYRIGHT)
else
    prefix=.cache/pyright-$PYRIGHT_VERSION
    if [ ! -x "$prefix/node_modules/.bin/pyright" ]; then
        npm install --silent --no-audit --no-fund --prefix "$prefix" "pyright@$PYRIGHT_VERSION" >/dev/null
    fi
    pyright=("$prefix/node_modules/.bin/pyright")
fi
"${pyright[@]}" -p pyrightconfig.json --pythonpath "$(command -v "$PYTHON")" examples "$work"/*.py
