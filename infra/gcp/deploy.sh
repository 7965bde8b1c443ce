#!/usr/bin/env bash
# Deploy Corral's GCP control plane: Firestore, Pub/Sub topics (and a dead-letter topic), a
# service account per function with least-privilege roles, five Cloud Functions (2nd gen),
# Cloud Scheduler ticks, and the log sink that turns Spot preemptions into messages.
# Idempotent: re-running updates in place.
#
# Usage:
#   PROJECT=my-project CONFIG_FILE=cluster.yaml USERS=alice@example.com infra/gcp/deploy.sh \
#       [--zone=us-central1-a] [--agent-image=projects/my-project/global/images/corral-agent-...]
#   infra/gcp/deploy.sh --dry-run ...    # print the commands (no gcloud, no account)
# Settings (environment; the options above set ZONE and AGENT_IMAGE):
#   PROJECT       (required) the project of the control plane and of the agents; the functions
#                 get it as GOOGLE_CLOUD_PROJECT, the project of pools that leave it out
#   CONFIG_FILE   (required) the cluster config; stored in Secret Manager, mapped to the
#                 functions' CORRAL_CLUSTER_CONFIG (a new version reaches new instances)
#   USERS         comma-separated emails allowed to call the API (roles/run.invoker + app list)
#   REGION        functions, Scheduler and Firestore location (default us-central1)
#   LABEL_KEY / LABEL_VALUE   the ownership label every pool must use (default managed-by=corral)
#   NAME_PREFIX   the pools' name_prefix (default corral-agent); IAM conditions use it
#   ZONE          optional: zone(s), comma-separated, of pools that leave zone out (CORRAL_ZONE)
#   AGENT_IMAGE   optional: the agent image (infra/agent-image) of pools that leave
#                 boot_disk_source_image out (CORRAL_AGENT_IMAGE)
#   AGENT_TAG     the network tag firewall.sh's rules target (default corral-agent): pools that
#                 leave network_tags out get it (CORRAL_AGENT_NETWORK_TAG)
#   CHECKPOINT_BUCKET    optional: bucket trials write checkpoints to (objectAdmin for the
#                 corral-trial account the agents mint trial tokens of)
#   TRIAL_DATA_BUCKETS   optional: comma-separated buckets trials read data from (objectViewer)
#   DRY_RUN=1     the same as --dry-run
#   PYTHON        the interpreter that reads the config with Corral's loader (default python3;
#                 it needs the project's dependencies: PYTHON=.venv/bin/python)
# Docs: docs/gcp.md (what each step is for, and what IAM can and cannot restrict on GCE).
set -euo pipefail
cd "$(dirname "$0")/../.."

while [ $# -gt 0 ]; do
    case "$1" in
    --dry-run) DRY_RUN=1 ;;
    --zone=*) ZONE=${1#--zone=} ;;
    --agent-image=*) AGENT_IMAGE=${1#--agent-image=} ;;
    --zone | --agent-image)
        [ $# -ge 2 ] || { echo "deploy.sh: $1 needs a value" >&2; exit 2; }
        if [ "$1" = --zone ]; then ZONE=$2; else AGENT_IMAGE=$2; fi
        shift
        ;;
    -h | --help)
        sed -n '2,25p' "$0"
        exit 0
        ;;
    *)
        echo "deploy.sh: unknown argument $1 (see --help)" >&2
        exit 2
        ;;
    esac
    shift
done

PROJECT=${PROJECT:?set PROJECT}
CONFIG_FILE=${CONFIG_FILE:?set CONFIG_FILE (the cluster config)}
REGION=${REGION:-us-central1}
USERS=${USERS:-}
CHECKPOINT_BUCKET=${CHECKPOINT_BUCKET:-}
TRIAL_DATA_BUCKETS=${TRIAL_DATA_BUCKETS:-}
LABEL_KEY=${LABEL_KEY:-managed-by}
LABEL_VALUE=${LABEL_VALUE:-corral}
NAME_PREFIX=${NAME_PREFIX:-corral-agent}
ZONE=${ZONE:-}
AGENT_IMAGE=${AGENT_IMAGE:-}
RUNTIME=${RUNTIME:-python311}
SECRET=corral-cluster-config
BUILD=${BUILD_DIR:-build/gcp}
SA_DOMAIN="$PROJECT.iam.gserviceaccount.com"
AGENT_SA="corral-agent@$SA_DOMAIN"
PYTHON=${PYTHON:-python3}

# What the pools need beyond the fixed grants of step 6 (existing disks their base_config
# attaches, shared-VPC subnetworks), read first: an invalid config stops here, before any
# change. The same defaults as the functions get (GOOGLE_CLOUD_PROJECT, CORRAL_ZONE, ...).
POOL_NEEDS=$(env -u CORRAL_PROJECT GOOGLE_CLOUD_PROJECT="$PROJECT" CORRAL_ZONE="$ZONE" \
    CORRAL_AGENT_IMAGE="$AGENT_IMAGE" "$PYTHON" infra/gcp/iam_needs.py "$CONFIG_FILE" "$NAME_PREFIX")

run() {
    if [ "${DRY_RUN:-}" = "1" ]; then
        printf '%q ' "$@"
        echo
    else
        "$@"
    fi
}
# Create-or-ignore: "already exists" is success on a re-run.
ensure() { run "$@" 2>/dev/null || [ "${DRY_RUN:-}" = "1" ] || true; }

g=(gcloud --project="$PROJECT" --quiet)

# ---- 1. APIs ---------------------------------------------------------------------------
run "${g[@]}" services enable cloudfunctions.googleapis.com run.googleapis.com \
    cloudbuild.googleapis.com artifactregistry.googleapis.com eventarc.googleapis.com \
    pubsub.googleapis.com firestore.googleapis.com compute.googleapis.com \
    cloudscheduler.googleapis.com secretmanager.googleapis.com logging.googleapis.com

# ---- 2. Firestore (Native mode), composite indexes, TTL policies --------------------------
ensure "${g[@]}" firestore databases create --location="$REGION" --type=firestore-native
python3 - <<'PY' | while IFS= read -r line; do eval "ensure ${line}"; done
import json, shlex
spec = json.load(open("infra/gcp/firestore.indexes.json"))
for index in spec["indexes"]:
    fields = " ".join(
        "--field-config=" + shlex.quote(f"field-path={f['fieldPath']},order={f['order'].lower()}")
        for f in index["fields"]
    )
    print(f'"${{g[@]}}" firestore indexes composite create '
          f'--collection-group={index["collectionGroup"]} {fields}')
for field in spec["fieldOverrides"]:
    group, path = field["collectionGroup"], field["fieldPath"]
    if field.get("ttl"):
        print(f'"${{g[@]}}" firestore fields ttls update {path} --collection-group={group} --enable-ttl')
    if field.get("indexes") == []:
        print(f'"${{g[@]}}" firestore indexes fields update {path} --collection-group={group} --disable-indexes')
PY

# ---- 3. The cluster config as a secret ------------------------------------------------------
ensure "${g[@]}" secrets create "$SECRET" --replication-policy=automatic
run "${g[@]}" secrets versions add "$SECRET" --data-file="$CONFIG_FILE"

# ---- 4. Topics -------------------------------------------------------------------------------
TOPICS=(corral-schedule corral-scale-up corral-interruptions corral-idle-reap-tick)
for topic in "${TOPICS[@]}"; do ensure "${g[@]}" pubsub topics create "$topic"; done
# Commands that keep failing end here (step 7 points the subscriptions at it); its own
# subscription keeps them a week for an operator to read (docs/gcp.md, "Dead letters").
DEAD_LETTER=corral-dead-letter
ensure "${g[@]}" pubsub topics create "$DEAD_LETTER"
ensure "${g[@]}" pubsub subscriptions create "$DEAD_LETTER-sub" --topic="$DEAD_LETTER" \
    --message-retention-duration=7d --expiration-period=never

# ---- 5. Service accounts: one per function, one for the agents, one for their trials ---------
FUNCTIONS=(api schedule scale-up idle-reap spot-reconcile)
for name in "${FUNCTIONS[@]}" agent trial; do
    ensure "${g[@]}" iam service-accounts create "corral-$name" --display-name="Corral $name"
done
sa() { echo "serviceAccount:corral-$1@$SA_DOMAIN"; }

# ---- 6. IAM: least privilege ----------------------------------------------------------------
for name in "${FUNCTIONS[@]}"; do
    # Firestore reads and writes (no finer role exists for Firestore data).
    run "${g[@]}" projects add-iam-policy-binding "$PROJECT" --member="$(sa "$name")" \
        --role=roles/datastore.user --condition=None
    run "${g[@]}" secrets add-iam-policy-binding "$SECRET" --member="$(sa "$name")" \
        --role=roles/secretmanager.secretAccessor
done
# Who sends which command (a topic-level binding, never project-wide publish).
publish() { run "${g[@]}" pubsub topics add-iam-policy-binding "$1" --member="$(sa "$2")" --role=roles/pubsub.publisher; }
publish corral-schedule api             # submit / kill wake the scheduler
publish corral-scale-up schedule        # one launch command per planned instance
publish corral-scale-up scale-up        # a deferred retry of the same launch
publish corral-schedule scale-up        # a failed launch asks for a new plan
publish corral-schedule idle-reap
publish corral-schedule spot-reconcile  # interrupted trials need replacing
# Compute Engine: instanceAdmin.v1, conditioned on the instance / disk name prefix. IAM
# conditions cannot read labels on Compute Engine (only names, types and Resource Manager
# tags), so the name prefix is the tightest condition available; the label re-check in the
# provider keeps foreign instances untouched within it (docs/gcp.md).
CONDITION="expression=!(resource.type in ['compute.googleapis.com/Instance','compute.googleapis.com/Disk']) || resource.name.extract('/instances/{n}').startsWith('$NAME_PREFIX-') || resource.name.extract('/disks/{n}').startsWith('$NAME_PREFIX-'),title=corral-owned-names"
for name in scale-up idle-reap spot-reconcile; do
    run "${g[@]}" projects add-iam-policy-binding "$PROJECT" --member="$(sa "$name")" \
        --role=roles/compute.instanceAdmin.v1 --condition="$CONDITION"
done
# The seed's "Service Account User", on the agent's account only: scale_up attaches it to VMs.
run "${g[@]}" iam service-accounts add-iam-policy-binding "$AGENT_SA" \
    --member="$(sa scale-up)" --role=roles/iam.serviceAccountUser
run "${g[@]}" projects add-iam-policy-binding "$PROJECT" --member="serviceAccount:$AGENT_SA" \
    --role=roles/logging.logWriter --condition=None
# Each pool's own needs (infra/gcp/iam_needs.py), for scale_up, which creates the instances:
# - an existing disk its base_config attaches (the seed's example): its name is outside the
#   condition above, so scale_up gets a custom role holding only compute.disks.useReadOnly
#   (a READ_ONLY attachment) or compute.disks.use, on that disk alone;
# - a shared VPC (the seed's Compute Network User): roles/compute.networkUser on the host
#   project's subnetwork the pool names (only that one, never the whole host project).
while IFS=$'\t' read -r kind a b c d; do
    case "$kind" in
    disk) # project zone name mode
        if [ "$d" = READ_ONLY ]; then
            role=corralDiskReader perm=compute.disks.useReadOnly
        else
            role=corralDiskUser perm=compute.disks.use
        fi
        ensure gcloud --quiet iam roles create "$role" --project="$a" --stage=GA \
            --title="Corral: attach an existing disk" --permissions="$perm"
        run gcloud --quiet compute disks add-iam-policy-binding "$c" --project="$a" --zone="$b" \
            --member="$(sa scale-up)" --role="projects/$a/roles/$role"
        ;;
    subnet) # host project, region, name
        run gcloud --quiet compute networks subnets add-iam-policy-binding "$c" --project="$a" \
            --region="$b" --member="$(sa scale-up)" --role=roles/compute.networkUser
        ;;
    warning) echo "deploy.sh: warning: $a" >&2 ;;
    esac
done <<<"$POOL_NEEDS"
# The trials' own account (docs/security.md, "Trial credentials"): the agent mints a token
# of it per trial (Token Creator on this account only; never the instance's identity); it
# reaches the checkpoint bucket and the data buckets, nothing else.
TRIAL_SA="corral-trial@$SA_DOMAIN"
run "${g[@]}" iam service-accounts add-iam-policy-binding "$TRIAL_SA" \
    --member="serviceAccount:$AGENT_SA" --role=roles/iam.serviceAccountTokenCreator
if [ -n "${CHECKPOINT_BUCKET:-}" ]; then
    run "${g[@]}" storage buckets add-iam-policy-binding "gs://$CHECKPOINT_BUCKET" \
        --member="serviceAccount:$TRIAL_SA" --role=roles/storage.objectAdmin
fi
for bucket in ${TRIAL_DATA_BUCKETS//,/ }; do
    run "${g[@]}" storage buckets add-iam-policy-binding "gs://$bucket" \
        --member="serviceAccount:$TRIAL_SA" --role=roles/storage.objectViewer
done

# ---- 7. The functions --------------------------------------------------------------------------
# Cloud Functions wants main.py and requirements.txt at the source root: stage them.
run rm -rf "$BUILD"
run mkdir -p "$BUILD"
run cp -r functions/corral "$BUILD/corral"
if [ "${DRY_RUN:-}" != "1" ]; then
    echo "from corral.handlers.gcp.main import api, idle_reap, scale_up, schedule, spot_reconcile  # noqa: F401" >"$BUILD/main.py"
    printf '%s\n' "pydantic>=2.7,<3" "pyyaml>=6.0" "aws-lambda-powertools[validation]>=3.0,<4" \
        "functions-framework>=3.5" "google-cloud-firestore>=2.16" "google-cloud-compute>=1.19" \
        "google-cloud-pubsub>=2.21" "google-auth[requests]>=2.20" >"$BUILD/requirements.txt"
fi
# ';' separates the variables (gcloud's ^;^ syntax), so the USERS list keeps its commas.
ENV_VARS="GOOGLE_CLOUD_PROJECT=$PROJECT;CORRAL_LABEL_KEY=$LABEL_KEY;CORRAL_LABEL_VALUE=$LABEL_VALUE"
ENV_VARS="$ENV_VARS;CORRAL_USERS=$USERS"
# What pools may leave out because the deployment knows it (corral.domain.config.deployment).
if [ -n "$ZONE" ]; then ENV_VARS="$ENV_VARS;CORRAL_ZONE=$ZONE"; fi
if [ -n "$AGENT_IMAGE" ]; then ENV_VARS="$ENV_VARS;CORRAL_AGENT_IMAGE=$AGENT_IMAGE"; fi
# Pools that leave them out get the agent account and the firewall's tag (agent_identity.py).
ENV_VARS="$ENV_VARS;CORRAL_AGENT_SERVICE_ACCOUNT=$AGENT_SA;CORRAL_AGENT_NETWORK_TAG=${AGENT_TAG:-corral-agent}"
deploy() {  # name entry-point trigger-args...
    local name=$1 entry=$2
    shift 2
    run "${g[@]}" functions deploy "corral-$name" --gen2 --region="$REGION" --runtime="$RUNTIME" \
        --source="$BUILD" --entry-point="$entry" --service-account="corral-$name@$SA_DOMAIN" \
        --set-secrets="CORRAL_CLUSTER_CONFIG=$SECRET:latest" \
        --set-env-vars="^;^$ENV_VARS" "$@"
}
deploy api api --trigger-http --no-allow-unauthenticated --memory=512Mi --timeout=60s
deploy schedule schedule --trigger-topic=corral-schedule --retry --timeout=120s --max-instances=1
deploy scale-up scale_up --trigger-topic=corral-scale-up --retry --timeout=300s
deploy idle-reap idle_reap --trigger-topic=corral-idle-reap-tick --timeout=120s --max-instances=1
deploy spot-reconcile spot_reconcile --trigger-topic=corral-interruptions --retry --timeout=300s

# The API verifies ID tokens for its own URL: tell it its URL, then who may call it.
if [ "${DRY_RUN:-}" = "1" ]; then
    URL=https://corral-api-xyz.a.run.app
else
    URL=$("${g[@]}" functions describe corral-api --gen2 --region="$REGION" --format='value(serviceConfig.uri)')
fi
run "${g[@]}" run services update corral-api --region="$REGION" \
    --update-env-vars="CORRAL_API_AUDIENCE=$URL,CORRAL_AGENT_SERVICE_ACCOUNTS=$AGENT_SA"
# Agents of pools without a master_url reach the API at its own URL.
run "${g[@]}" run services update corral-scale-up --region="$REGION" \
    --update-env-vars="CORRAL_API_URL=$URL"
for user in ${USERS//,/ }; do
    run "${g[@]}" run services add-iam-policy-binding corral-api --region="$REGION" \
        --member="user:$user" --role=roles/run.invoker
done
run "${g[@]}" run services add-iam-policy-binding corral-api --region="$REGION" \
    --member="serviceAccount:$AGENT_SA" --role=roles/run.invoker

# Delayed commands come back through the subscription's retry backoff (pubsub_queue.py; the
# longest delay, 900 s, takes ~7 deliveries). A command that keeps failing goes to the
# dead-letter topic after 100 deliveries (Pub/Sub's maximum; ~16 h at the longest backoff,
# 600 s), inside the day the subscription retains it, instead of being dropped after that day.
# Pub/Sub's own service agent moves it: it must publish to the dead-letter topic and
# acknowledge on each subscription.
if [ "${DRY_RUN:-}" = "1" ]; then
    PROJECT_NUMBER=0
else
    PROJECT_NUMBER=$("${g[@]}" projects describe "$PROJECT" --format='value(projectNumber)')
fi
PUBSUB_AGENT="serviceAccount:service-$PROJECT_NUMBER@gcp-sa-pubsub.iam.gserviceaccount.com"
run "${g[@]}" pubsub topics add-iam-policy-binding "$DEAD_LETTER" --member="$PUBSUB_AGENT" \
    --role=roles/pubsub.publisher
for name in schedule scale-up spot-reconcile; do
    if [ "${DRY_RUN:-}" = "1" ]; then
        sub="eventarc-$REGION-corral-$name-000-sub-000"
    else
        trigger=$("${g[@]}" functions describe "corral-$name" --gen2 --region="$REGION" --format='value(eventTrigger.trigger)')
        sub=$("${g[@]}" eventarc triggers describe "${trigger##*/}" --location="$REGION" --format='value(transport.pubsub.subscription)')
    fi
    run "${g[@]}" pubsub subscriptions update "${sub##*/}" --min-retry-delay=10s --max-retry-delay=600s \
        --message-retention-duration=1d --dead-letter-topic="$DEAD_LETTER" --max-delivery-attempts=100
    run "${g[@]}" pubsub subscriptions add-iam-policy-binding "${sub##*/}" --member="$PUBSUB_AGENT" \
        --role=roles/pubsub.subscriber
done

# ---- 8. Timers (Cloud Scheduler publishes to the functions' topics) ---------------------------
tick() {  # job schedule topic kind
    ensure "${g[@]}" scheduler jobs create pubsub "$1" --location="$REGION" --schedule="$2" \
        --topic="$3" --message-body="{\"kind\":\"$4\",\"body\":{}}"
}
tick corral-schedule-tick "* * * * *" corral-schedule schedule
tick corral-idle-reap-tick "* * * * *" corral-idle-reap-tick idle_reap
tick corral-reconcile-tick "*/2 * * * *" corral-interruptions reconcile

# ---- 9. Spot preemptions: Cloud Audit Logs system events -> the interruptions topic -----------
ensure "${g[@]}" logging sinks create corral-preemptions \
    "pubsub.googleapis.com/projects/$PROJECT/topics/corral-interruptions" \
    --log-filter='protoPayload.methodName="compute.instances.preempted"'
if [ "${DRY_RUN:-}" = "1" ]; then
    WRITER="serviceAccount:service-0@gcp-sa-logging.iam.gserviceaccount.com"
else
    WRITER=$("${g[@]}" logging sinks describe corral-preemptions --format='value(writerIdentity)')
fi
run "${g[@]}" pubsub topics add-iam-policy-binding corral-interruptions --member="$WRITER" \
    --role=roles/pubsub.publisher

echo "Corral API: $URL  (set master_url of every pool to it)"
