# Shared by the image scripts (sourced, not run). DRY_RUN=1 prints what would change instead
# of changing it: the offline check (tests/infra/test_agent_image.py) runs every script so.
# shellcheck shell=bash

DRY_RUN=${DRY_RUN:-0}

log() { echo "corral-image: $*" >&2; }
die() {
    log "error: $*"
    exit 1
}

# Run a command, or print it in a dry run.
run() {
    if [ "$DRY_RUN" = "1" ]; then
        echo "DRY-RUN: $*"
    else
        "$@"
    fi
}

# Copy a file into place (mode given), or say so in a dry run.
put() {
    local src=$1 dst=$2 mode=$3
    [ -f "$src" ] || die "missing $src"
    run install -D -m "$mode" "$src" "$dst"
}

# apt or dnf: Ubuntu/Debian and Amazon Linux 2023 are the supported bases.
package_manager() {
    if [ -n "${PKG:-}" ]; then
        echo "$PKG"
    elif command -v apt-get >/dev/null 2>&1; then
        echo apt
    elif command -v dnf >/dev/null 2>&1; then
        echo dnf
    else
        die "neither apt-get nor dnf: use an Ubuntu, Debian or Amazon Linux 2023 base"
    fi
}

install_packages() {
    case "$(package_manager)" in
    apt)
        run env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@"
        ;;
    dnf) run dnf install -y -q "$@" ;;
    esac
}

# CLOUD must be aws or gcp.
require_cloud() {
    case "${CLOUD:-}" in
    aws | gcp) ;;
    *) die "set CLOUD=aws or CLOUD=gcp (got '${CLOUD:-}')" ;;
    esac
}
