# Sourced by the scripts: make sure .venv exists (Python 3.11+) and has Armarius installed.
# Usage: ensure_venv [EXTRAS]
ensure_venv() {
    local extras="${1:-}" python="${PYTHON:-python3}"
    if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
        echo "Armarius needs Python 3.11 or newer; set PYTHON=/path/to/python3.11" >&2
        exit 1
    fi
    [ -x .venv/bin/python ] || "$python" -m venv .venv
    .venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip
    .venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".${extras:+[$extras]}"
}

# The browser tests drive Debian's chromium through Playwright (never a downloaded browser build, never
# `playwright install`): install the package when `chromium` is not on PATH.
ensure_chromium() {
    command -v chromium >/dev/null 2>&1 && return 0
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "chromium is not on PATH and apt-get is missing: install Chromium so that 'chromium' runs it;" \
             "the browser tests skip without it" >&2
        return 0
    fi
    echo "Installing Debian's chromium for the browser tests (apt-get install chromium)" >&2
    $sudo apt-get install -y --no-install-recommends chromium >/dev/null \
        || { $sudo apt-get update >/dev/null && $sudo apt-get install -y --no-install-recommends chromium >/dev/null; }
}
