#!/usr/bin/env bash
# Corral on a stock deep-learning image (AWS Deep Learning AMI, GCP Deep Learning VM): the
# driver, CUDA, Docker and the NVIDIA Container Toolkit are there already, so only the agent
# and the log forwarder are installed. Run it as root while building an image from such a
# base (the "deep-learning" build of corral-agent.pkr.hcl does), or once on an instance.
#
# Usage:
#   sudo CLOUD=aws AGENT_SOURCE=/path/to/corral infra/agent-image/deep-learning-image.sh
#   CLOUD=gcp infra/agent-image/deep-learning-image.sh --dry-run   # print the steps
# Settings: CLOUD (aws|gcp, required), AGENT_SOURCE and PYTHON (see scripts/install-agent.sh).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"

for arg in "$@"; do
    case "$arg" in
    --dry-run) export DRY_RUN=1 ;;
    -h | --help)
        sed -n '2,12p' "$0"
        exit 0
        ;;
    *)
        echo "deep-learning-image.sh: unknown argument $arg (see --help)" >&2
        exit 2
        ;;
    esac
done
# shellcheck source=SCRIPTDIR/scripts/lib.sh
. "$HERE/scripts/lib.sh"
require_cloud

# What the stock image must already have; the full build (install-nvidia.sh) otherwise.
for tool in nvidia-smi docker; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        if [ "$DRY_RUN" = "1" ]; then
            log "(dry run) $tool not found here: a deep-learning image has it"
        else
            die "$tool not found: not a deep-learning image; build the full image instead"
        fi
    fi
done
if [ "$DRY_RUN" != "1" ] && ! command -v nvidia-ctk >/dev/null 2>&1; then
    log "warning: no nvidia-ctk: set agent_docker_runtime to the image's GPU runtime"
fi

bash "$HERE/scripts/install-agent.sh"
bash "$HERE/scripts/install-log-forwarder.sh"
log "done: the bootstrap starts corral-agent.service at boot"
