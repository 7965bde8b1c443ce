#!/usr/bin/env bash
# Base packages and Docker (the trials' container engine), enabled at boot.
set -euo pipefail
# shellcheck source=SCRIPTDIR/lib.sh
. "$(dirname "$0")/lib.sh"

case "$(package_manager)" in
apt)
    run apt-get update -q
    run env DEBIAN_FRONTEND=noninteractive apt-get upgrade -y -q
    install_packages ca-certificates curl gnupg jq logrotate docker.io
    ;;
dnf)
    run dnf upgrade -y -q
    install_packages ca-certificates jq logrotate docker
    ;;
esac
run systemctl enable docker.service
