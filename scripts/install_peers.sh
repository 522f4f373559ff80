#!/usr/bin/env bash
# Installs the pinned third-party ACP peers used by the interop tests and the end-to-end
# benchmarks (acp-fast bench):
#   * the official TypeScript SDK, @agentclientprotocol/sdk 2.4.0: `npm ci` in peers/ts
#     (exact versions from the committed peers/ts/package-lock.json);
#   * the official Python SDK, agent-client-protocol[http] 0.12.1 (its HTTP/WebSocket extra): pip, into the Python that runs
#     this script ($PYTHON, else `python3`/`python` on PATH: the current venv if one is active);
#   * the system peers of the fleet tests, Debian's `redis-server` (Redis >= 7) and `haproxy`:
#     apt-get (after apt-get update), as root only. The tests start their own servers on free
#     loopback ports; the packages' services are not used.
#
# Idempotent: each part is skipped when the pinned version is already in place.
# Non-interactive (works under CI=true with no stdin). Options:
#   --ts-only / --py-only / --system-only   install one part only
#   --force                 reinstall even when the pinned version is present (not the system peers)
# Exit status: 0 when everything asked for is installed; 1 when a part failed; a missing
# `node`/`npm`, and system peers that cannot be installed (not root, no apt-get, apt-get
# failed), are reported and skipped (exit 0) unless --ts-only / --system-only was given.
set -euo pipefail

TS_SDK_VERSION="2.4.0"
PY_SDK_VERSION="0.12.1"

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TS_DIR="$ROOT/peers/ts"
SYSTEM_PEERS=(redis-server haproxy)  # Debian package = command
DO_TS=1
DO_PY=1
DO_SYS=1
FORCE=0
for arg in "$@"; do
  case "$arg" in
    --ts-only) DO_PY=0; DO_SYS=0 ;;
    --py-only) DO_TS=0; DO_SYS=0 ;;
    --system-only) DO_TS=0; DO_PY=0 ;;
    --force) FORCE=1 ;;
    -h|--help) sed -n '2,21p' "$0"; exit 0 ;;
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
    [[ $DO_PY == 0 && $DO_SYS == 0 ]] && status=1
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

# --- system peers (Debian packages) ---------------------------------------------------------
if [[ $DO_SYS == 1 ]]; then
  wanted=()
  for pkg in "${SYSTEM_PEERS[@]}"; do
    # (haproxy lives in /usr/sbin, which a user's PATH may lack)
    command -v "$pkg" >/dev/null 2>&1 || [[ -x "/usr/sbin/$pkg" ]] || wanted+=("$pkg")
  done
  skip_sys() {
    say "system: SKIPPED ${wanted[*]}, $1 (install them with: apt-get install ${wanted[*]})"
    [[ $DO_TS == 0 && $DO_PY == 0 ]] && status=1
    return 0
  }
  if [[ ${#wanted[@]} == 0 ]]; then
    :
  elif [[ "$(id -u)" != 0 ]]; then
    skip_sys "not root"
  elif ! command -v apt-get >/dev/null 2>&1; then
    skip_sys "no apt-get (not Debian)"
  else
    say "system: apt-get install ${wanted[*]}"
    if DEBIAN_FRONTEND=noninteractive apt-get update -qq </dev/null \
        && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${wanted[@]}" </dev/null >/dev/null; then
      :
    else
      skip_sys "apt-get failed"
    fi
  fi
  if command -v redis-server >/dev/null 2>&1; then
    redis_version="$(redis-server --version | sed -n 's/.* v=\([0-9][0-9.]*\).*/\1/p')"
    if [[ "${redis_version%%.*}" -ge 7 ]] 2>/dev/null; then
      say "system: redis-server $redis_version at $(command -v redis-server)"
    else
      say "system: FAILED, redis-server ${redis_version:-of unknown version} is older than 7 (Streams, consumer groups)"
      status=1
    fi
  fi
  if command -v haproxy >/dev/null 2>&1; then
    say "system: haproxy $(haproxy -v | sed -n '1s/^HAProxy version \([^ ]*\).*/\1/p') at $(command -v haproxy)"
  fi
fi

exit $status
