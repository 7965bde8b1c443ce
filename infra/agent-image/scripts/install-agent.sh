#!/usr/bin/env bash
# The Corral agent in its own venv (/opt/corral-agent) on Python >= 3.11, and its systemd
# unit, installed but not enabled: the bootstrap (functions/corral/bootstrap) writes
# /etc/corral/agent.yaml, then starts it.
#
# AGENT_SOURCE: the project's sources (a directory with pyproject.toml: what Packer uploads),
# a built wheel, or an https:// URL of one (default: /tmp/corral-image/src).
# PYTHON: the interpreter to use (default: the first of python3.12, python3.11, python3 that
# is 3.11 or newer; else python3.11 is installed from the distribution).
set -euo pipefail
# shellcheck source=SCRIPTDIR/lib.sh
. "$(dirname "$0")/lib.sh"
FILES="$(dirname "$0")/../files"

AGENT_SOURCE=${AGENT_SOURCE:-/tmp/corral-image/src}
VENV=/opt/corral-agent

recent_enough() { "$1" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; }

find_python() {
    local candidate
    for candidate in ${PYTHON:-} python3.12 python3.11 python3; do
        if command -v "$candidate" >/dev/null 2>&1 && recent_enough "$candidate"; then
            command -v "$candidate"
            return 0
        fi
    done
    return 1
}

if ! PY=$(find_python); then
    log "no Python >= 3.11 on this base: installing python3.11"
    case "$(package_manager)" in
    apt) install_packages python3.11 python3.11-venv ;;
    dnf) install_packages python3.11 python3.11-pip ;;
    esac
    PY=$(find_python) || PY=/usr/bin/python3.11
    [ "$DRY_RUN" = "1" ] || recent_enough "$PY" || die "still no Python >= 3.11 (set PYTHON=...)"
fi
log "agent venv on $PY"

case "$AGENT_SOURCE" in
https://* | http://*) SPEC="corral[agent] @ $AGENT_SOURCE" ;;
*)
    [ "$DRY_RUN" = "1" ] || [ -e "$AGENT_SOURCE" ] || die "AGENT_SOURCE $AGENT_SOURCE not found"
    SPEC="${AGENT_SOURCE}[agent]"
    ;;
esac

run "$PY" -m venv "$VENV"
run "$VENV/bin/pip" install --quiet --upgrade pip
run "$VENV/bin/pip" install --quiet "$SPEC"
run "$VENV/bin/corral-agent" --help >/dev/null

# The vendor unit directory: a unit the bootstrap writes to /etc/systemd/system (an agent
# wheel given at launch) takes precedence over it.
put "$FILES/corral-agent.service" /usr/lib/systemd/system/corral-agent.service 0644
run mkdir -p /etc/corral /var/lib/corral
run systemctl daemon-reload
