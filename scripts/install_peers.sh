#!/usr/bin/env bash
# Installs the pinned third-party ACP peers used by the interop tests and the end-to-end
# benchmarks (acp-fast bench):
#   * the official TypeScript SDK, @agentclientprotocol/sdk 2.4.0: `npm ci` in peers/ts
#     (exact versions from the committed peers/ts/package-lock.json);
#   * the official Python SDK, agent-client-protocol[http] 0.12.1 (its HTTP/WebSocket extra): pip, into the Python that runs
#     this script ($PYTHON, else `python3`/`python` on PATH: the current venv if one is active).
#
# Idempotent: each part is skipped when the pinned version is already in place.
# Non-interactive (works under CI=true with no stdin). Options:
#   --ts-only / --py-only   install one side only
#   --force                 reinstall even when the pinned version is present
# Exit status: 0 when everything asked for is installed; 1 when a part failed; a missing
# `node`/`npm` is reported and skipped (exit 0) unless --ts-only was given.
set -euo pipefail

TS_SDK_VERSION="2.4.0"
PY_SDK_VERSION="0.12.1"

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TS_DIR="$ROOT/peers/ts"
DO_TS=1
DO_PY=1
FORCE=0
for arg in "$@"; do
  case "$arg" in
    --ts-only) DO_PY=0 ;;
    --py-only) DO_TS=0 ;;
    --force) FORCE=1 ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "install_peers: unknown option $arg" >&2; exit 2 ;;
  esac
done

say() { echo "install_peers: $*"; }
status=0

if [[ -z "${PYTHON:-}" ]]; then
  PYTHON="$(command -v python3 || command -v python || true)"
fi

# --- TypeScript SDK -------------------------------------------------------------------------
if [[ $DO_TS == 1 ]]; then
  if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    say "ts: SKIPPED, node/npm not found (install Node >= 20 and npm, e.g. apt-get install nodejs npm)"
    [[ $DO_PY == 0 ]] && status=1
  else
    installed="$(node -p "try { require('$TS_DIR/node_modules/@agentclientprotocol/sdk/package.json').version } catch { '' }" 2>/dev/null || true)"
    if [[ $FORCE == 0 && "$installed" == "$TS_SDK_VERSION" ]]; then
      say "ts: @agentclientprotocol/sdk $TS_SDK_VERSION already installed in peers/ts/node_modules (node $(node --version))"
    else
      say "ts: running npm ci in peers/ts (node $(node --version), npm $(npm --version))"
      if (cd "$TS_DIR" && npm ci --no-audit --no-fund --loglevel=error </dev/null); then
        installed="$(node -p "require('$TS_DIR/node_modules/@agentclientprotocol/sdk/package.json').version")"
        if [[ "$installed" == "$TS_SDK_VERSION" ]]; then
          say "ts: installed @agentclientprotocol/sdk $installed"
        else
          say "ts: FAILED, got @agentclientprotocol/sdk $installed instead of $TS_SDK_VERSION"
          status=1
        fi
      else
        say "ts: FAILED, npm ci exited non-zero"
        status=1
      fi
    fi
  fi
fi

# --- Python SDK -----------------------------------------------------------------------------
if [[ $DO_PY == 1 ]]; then
  if [[ -z "$PYTHON" ]]; then
    say "py: FAILED, no python3/python on PATH (set PYTHON=...)"
    status=1
  else
    installed="$("$PYTHON" -c "import importlib.metadata as m; print(m.version('agent-client-protocol'))" 2>/dev/null || true)"
    if [[ $FORCE == 0 && "$installed" == "$PY_SDK_VERSION" ]] && "$PYTHON" -c "import httpx, websockets" 2>/dev/null; then
      say "py: agent-client-protocol $PY_SDK_VERSION already installed for $PYTHON"
    else
      say "py: pip install agent-client-protocol==$PY_SDK_VERSION into $PYTHON${installed:+ (had $installed)}"
      if "$PYTHON" -m pip install --quiet --disable-pip-version-check --no-input \
          "agent-client-protocol[http]==$PY_SDK_VERSION" </dev/null; then
        say "py: installed agent-client-protocol $("$PYTHON" -c "import importlib.metadata as m; print(m.version('agent-client-protocol'))")"
      else
        say "py: FAILED, pip exited non-zero"
        status=1
      fi
    fi
  fi
fi

exit $status
