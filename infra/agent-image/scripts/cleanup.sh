#!/usr/bin/env bash
# Last step of an image build: nothing of the build instance may carry over to the agents
# (machine id, cloud-init state, package caches, the uploaded sources).
set -euo pipefail
# shellcheck source=SCRIPTDIR/lib.sh
. "$(dirname "$0")/lib.sh"

case "$(package_manager)" in
apt) run apt-get clean ;;
dnf) run dnf clean all ;;
esac
if command -v cloud-init >/dev/null 2>&1; then
    run cloud-init clean --logs
fi
# An empty machine-id is regenerated at first boot: each agent gets its own journal id.
run truncate -s 0 /etc/machine-id
run rm -rf /tmp/corral-image /var/lib/corral/*
