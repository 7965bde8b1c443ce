#!/usr/bin/env bash
# Firewall rules for Corral's GCE agents: the ports the trial containers use between agents
# (1734, 1750, 12350 SSH, 12355 GLOO rendezvous, the GLOO and NCCL port ranges, TensorBoard
# 2600-2900), open to instances carrying the agents' network tag only. Nothing is opened to
# the world; agents reach the API (HTTPS) through the VPC's implied allow-egress rule.
# Corral itself uses 12355 and the two ranges; 1734, 1750, 12350 and 2600-2900 are the seeds'
# requirements, open for trial images that use them (nothing in Corral listens there yet).
# Idempotent: an existing rule is updated in place.
#
# Usage:
#   PROJECT=my-project infra/gcp/firewall.sh            # create or update the rules
#   infra/gcp/firewall.sh --dry-run                     # print them (no gcloud, no account)
# Settings (environment):
#   PROJECT          (required unless --dry-run) the agents' project
#   NETWORK          the agents' VPC network (default: default)
#   AGENT_TAG        the network tag every pool puts on its agents (the pools'
#                    network_tags; default corral-agent)
#   RULE_PREFIX      prefix of the rule names (default corral-agents)
#   GLOO_PORT_RANGE  must match the cluster config's task_container_defaults.gloo_port_range
#                    (the agents give trials that range), LOW-HIGH or LOW:HIGH
#                    (default 1024-65535: Determined's behaviour when unset)
#   NCCL_PORT_RANGE  must match task_container_defaults.nccl_port_range; same form and default
#   TENSORBOARD_SOURCE_RANGES  optional comma-separated CIDRs (your office or VPN) that may
#                    reach TensorBoard on the agents; 0.0.0.0/0 is refused
#   DRY_RUN=1        the same as --dry-run
# Docs: docs/gcp.md, "Networking".
set -euo pipefail

for arg in "$@"; do
    case "$arg" in
    --dry-run) DRY_RUN=1 ;;
    -h | --help)
        sed -n '2,26p' "$0"
        exit 0
        ;;
    *)
        echo "firewall.sh: unknown argument $arg (see --help)" >&2
        exit 2
        ;;
    esac
done

DRY_RUN=${DRY_RUN:-0}
if [ "$DRY_RUN" = "1" ]; then
    PROJECT=${PROJECT:-PROJECT}
else
    PROJECT=${PROJECT:?set PROJECT}
fi
NETWORK=${NETWORK:-default}
AGENT_TAG=${AGENT_TAG:-corral-agent}
RULE_PREFIX=${RULE_PREFIX:-corral-agents}
GLOO_PORT_RANGE=${GLOO_PORT_RANGE:-1024-65535}
NCCL_PORT_RANGE=${NCCL_PORT_RANGE:-1024-65535}
TENSORBOARD_SOURCE_RANGES=${TENSORBOARD_SOURCE_RANGES:-}

fail() {
    echo "firewall.sh: $*" >&2
    exit 2
}

# "LOW-HIGH" or "LOW:HIGH" (Determined's master.yaml form) -> "LOW-HIGH" (gcloud's form).
port_range() {
    local name=$1 value=$2 low high
    if ! [[ "$value" =~ ^([0-9]{1,5})[-:]([0-9]{1,5})$ ]]; then
        fail "$name: must be LOW-HIGH or LOW:HIGH, got '$value'"
    fi
    low=$((10#${BASH_REMATCH[1]}))
    high=$((10#${BASH_REMATCH[2]}))
    if [ "$low" -lt 1024 ] || [ "$high" -gt 65535 ] || [ "$low" -gt "$high" ]; then
        fail "$name: must lie within 1024-65535 with LOW <= HIGH, got '$value'"
    fi
    echo "$low-$high"
}

[[ "$AGENT_TAG" =~ ^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$ ]] ||
    fail "AGENT_TAG: must be a GCE network tag (lowercase, digits, '-'), got '$AGENT_TAG'"
gloo=$(port_range GLOO_PORT_RANGE "$GLOO_PORT_RANGE")
nccl=$(port_range NCCL_PORT_RANGE "$NCCL_PORT_RANGE")
if [ -n "$TENSORBOARD_SOURCE_RANGES" ]; then
    IFS=, read -ra cidrs <<<"$TENSORBOARD_SOURCE_RANGES"
    for cidr in "${cidrs[@]}"; do
        [[ "$cidr" =~ ^([0-9]{1,3}\.){3}[0-9]{1,3}/[0-9]{1,2}$ ]] ||
            fail "TENSORBOARD_SOURCE_RANGES: '$cidr' is not an IPv4 CIDR"
        [[ "$cidr" != */0 ]] ||
            fail "TENSORBOARD_SOURCE_RANGES: '$cidr' would open TensorBoard to the world"
    done
fi

# Between agents: the seeds' fixed ports, TensorBoard, and the GLOO/NCCL ranges (one entry
# when equal: the default).
between="tcp:1734,tcp:1750,tcp:12350,tcp:12355,tcp:2600-2900,tcp:$gloo"
if [ "$nccl" != "$gloo" ]; then
    between="$between,tcp:$nccl"
fi

run() {
    if [ "$DRY_RUN" = "1" ]; then
        printf '%q ' "$@"
        echo
    else
        "$@"
    fi
}

g=(gcloud --project="$PROJECT" --quiet compute firewall-rules)

# Create, or update the rule if it exists (same flags minus the immutable ones).
apply_rule() {
    local name=$1
    shift
    if [ "$DRY_RUN" = "1" ]; then
        run "${g[@]}" create "$name" --network="$NETWORK" --direction=INGRESS --action=ALLOW "$@"
    elif "${g[@]}" describe "$name" >/dev/null 2>&1; then
        run "${g[@]}" update "$name" "$@"
    else
        run "${g[@]}" create "$name" --network="$NETWORK" --direction=INGRESS --action=ALLOW "$@"
    fi
}

apply_rule "$RULE_PREFIX-between" \
    --description="Corral: trial traffic between agents (sync, SSH, GLOO, NCCL, TensorBoard)" \
    --rules="$between" --source-tags="$AGENT_TAG" --target-tags="$AGENT_TAG"

if [ -n "$TENSORBOARD_SOURCE_RANGES" ]; then
    apply_rule "$RULE_PREFIX-tensorboard" \
        --description="Corral: TensorBoard on the agents from the operators' network" \
        --rules="tcp:2600-2900" --source-ranges="$TENSORBOARD_SOURCE_RANGES" \
        --target-tags="$AGENT_TAG"
fi
