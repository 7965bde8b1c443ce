#!/usr/bin/env bash
# Template checks, offline: `sam validate` and `cfn-lint` on infra/template.yaml, then the
# checkov security scan.
#
# The tools live in their own venvs: aws-sam-cli pins older boto3 and click than the project
# uses (.venv-sam), and checkov brings ~100 packages of its own (.venv-sam/checkov, nested so
# .gitignore and `make clean` already cover it). They need no AWS account: a region is
# enough, and the AWS config and credential files are masked so a broken local profile cannot
# break the check. Each venv is built once and kept (a stamp file names the pinned versions).
#
# Exit status: 0 when every check passes, or when a venv cannot be built here (no network,
# pip failure, no venv module): then a "skipped: ..." line says why. Non-zero for a real
# template error, a security finding not on the skip list below (or a tool crash), which
# must fail CI.
set -uo pipefail
cd "$(dirname "$0")/.."

SAM_CLI_VERSION=1.170.0
CFN_LINT_VERSION=1.58.0
CHECKOV_VERSION=3.3.30
PYTHON=${PYTHON:-python3}
VENV=${SAM_VENV:-.venv-sam}
SCAN_VENV=${SCAN_VENV:-$VENV/checkov}
TEMPLATE=${TEMPLATE:-infra/template.yaml}

# Findings we accept, each explained in docs/security.md ("Security scan: accepted
# findings"). Anything else checkov reports fails the check.
CHECKOV_SKIPS=(
    CKV_AWS_27  # SQS encryption: false positive, every queue sets SqsManagedSseEnabled (SSE-SQS)
    CKV_AWS_115 # no reserved concurrency: it would eat a new account's 10 unreserved slots
    CKV_AWS_116 # no Lambda DLQ: SQS-fed functions use the queues' DLQs; timers re-fire
    CKV_AWS_117 # not in a VPC: the functions reach AWS APIs only, no private resources
    CKV_AWS_119 # tables use DynamoDB's default encryption at rest, not a customer key
    CKV_AWS_158 # log groups use CloudWatch's default encryption, not a customer key
    CKV_AWS_173 # environment variables hold no secrets (names, URLs, the tag pair)
)

skipped() {
    echo "template-check skipped: $*" >&2
}

# build VENV STAMP PACKAGE...: create the venv and install the pinned packages once.
build() {
    local venv=$1 stamp=$2 log
    shift 2
    [ -f "$stamp" ] && return 0
    echo "template-check: building $venv ($*)"
    log=$(mktemp)
    if ! { [ -x "$venv/bin/python" ] || "$PYTHON" -m venv "$venv"; } >"$log" 2>&1; then
        tail -n 3 "$log" >&2
        rm -f "$log"
        skipped "cannot create $venv with $PYTHON"
        return 1
    fi
    # Short timeouts: on a machine without a package index this should give up in seconds.
    if ! "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
        --timeout 20 --retries 1 "$@" >"$log" 2>&1; then
        grep -v '^WARNING: Location' "$log" | tail -n 3 >&2
        rm -f "$log"
        skipped "cannot install $* into $venv (offline or no package index?)"
        return 1
    fi
    rm -f "$log"
    touch "$stamp"
}

if [ "${CORRAL_SKIP_TEMPLATE_CHECK:-}" = "1" ]; then
    skipped "CORRAL_SKIP_TEMPLATE_CHECK=1"
    exit 0
fi

export AWS_DEFAULT_REGION=us-east-1 AWS_REGION=us-east-1
export AWS_CONFIG_FILE=/dev/null AWS_SHARED_CREDENTIALS_FILE=/dev/null
export AWS_EC2_METADATA_DISABLED=true SAM_CLI_TELEMETRY=0

status=0
if build "$VENV" "$VENV/.installed-sam-$SAM_CLI_VERSION-cfn-lint-$CFN_LINT_VERSION" \
    "aws-sam-cli==$SAM_CLI_VERSION" "cfn-lint==$CFN_LINT_VERSION"; then
    echo "template-check: sam validate"
    "$VENV/bin/sam" validate --template "$TEMPLATE" --region us-east-1 || status=1
    echo "template-check: cfn-lint"
    "$VENV/bin/cfn-lint" "$TEMPLATE" && echo "$TEMPLATE: cfn-lint clean" || status=1
    # The optional agents' network (security group for the seeds' ports): plain CloudFormation.
    "$VENV/bin/cfn-lint" infra/network.yaml && echo "infra/network.yaml: cfn-lint clean" || status=1
fi

# checkov: the CloudFormation checks (IAM, encryption, logging...) on the SAM template, and
# its secrets scan over infra/ (the template, the Chalice config, the GCP deploy script).
# The deploy script's gcloud IAM bindings are not something checkov reads: the IAM rules for
# GCP are checked by tests/infra/test_iam_policies.py.
if build "$SCAN_VENV" "$SCAN_VENV/.installed-checkov-$CHECKOV_VERSION" \
    "checkov==$CHECKOV_VERSION"; then
    export LOG_LEVEL=ERROR  # checkov warns it cannot enrich the Fn::Sub (JSON text) policies
    echo "template-check: checkov (accepted: ${CHECKOV_SKIPS[*]})"
    skip_list=$(IFS=,; echo "${CHECKOV_SKIPS[*]}")
    "$SCAN_VENV/bin/checkov" --quiet --compact --skip-download \
        --framework cloudformation --file "$TEMPLATE" --skip-check "$skip_list" \
        && echo "$TEMPLATE: checkov clean" || status=1
    "$SCAN_VENV/bin/checkov" --quiet --compact --skip-download \
        --framework secrets --enable-secret-scan-all-files --directory infra \
        && echo "infra/: checkov secrets scan clean" || status=1
fi
exit $status
