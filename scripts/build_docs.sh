#!/usr/bin/env bash
# Build the API reference site strictly (any mkdocs, griffe or mkdocstrings warning fails)
# and print the folder it was written to.
#
# Usage: scripts/build_docs.sh [-o OUTDIR]      (default OUTDIR: site/, git-ignored)
#
# Needs the `docs` extra in the Python that runs it ($PYTHON, else `python`):
#   pip install -e ".[docs]"
# No network: the guide pages are generated from README.md by scripts/docs_pages.py (an
# mkdocs hook, nothing written into docs/site/), the API pages are read from the sources by
# griffe (no import), and no remote inventory or font is fetched at build time.
set -euo pipefail
cd "$(dirname "$0")/.."

OUT="site"
while [[ $# -gt 0 ]]; do
    case "$1" in
        -o|--output) OUT="$2"; shift 2 ;;
        -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
        *) echo "build_docs.sh: unknown argument: $1" >&2; exit 2 ;;
    esac
done

PYTHON="${PYTHON:-python}"
if ! "$PYTHON" -c "import mkdocs, material, mkdocstrings, mkdocstrings_handlers.python" 2>/dev/null; then
    echo "build_docs.sh: the docs extra is missing for $PYTHON: pip install -e \".[docs]\"" >&2
    exit 1
fi

export NO_MKDOCS_2_WARNING=1   # mkdocs-material's banner about its successor
"$PYTHON" -m mkdocs build --strict --clean --site-dir "$OUT"
echo "site: $(cd "$OUT" && pwd)"
