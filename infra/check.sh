#!/usr/bin/env bash
# Template checks: `sam validate` and `cfn-lint` on infra/template.yaml, offline.
#
# Both tools live in their own venv (.venv-sam): aws-sam-cli pins older boto3 and click
# than the project uses. They need no AWS account: a region is enough, and the AWS config
# and credential files are masked so a broken local profile cannot break the check.
#
# Exit status: 0 when both checks pass, or when the venv cannot be built here (no network,
# pip failure, no venv module): then a "skipped: ..." line says why. Non-zero only for a real
# template error (or a tool crash), which must fail CI.
set -uo pipefail
cd "$(dirname "$0")/.."

SAM_CLI_VERSION=1.170.0
CFN_LINT_VERSION=1.58.0
PYTHON=${PYTHON:-python3}
VENV=${SAM_VENV:-.venv-sam}
TEMPLATE=${TEMPLATE:-infra/template.yaml}
STAMP="$VENV/.installed-sam-$SAM_CLI_VERSION-cfn-lint-$CFN_LINT_VERSION"

skip() {
    echo "template-check skipped: $*" >&2
    exit 0
}

if [ "${CORRAL_SKIP_TEMPLATE_CHECK:-}" = "1" ]; then
    skip "CORRAL_SKIP_TEMPLATE_CHECK=1"
fi

if [ ! -f "$STAMP" ]; then
    echo "template-check: building $VENV (aws-sam-cli $SAM_CLI_VERSION, cfn-lint $CFN_LINT_VERSION)"
    log=$(mktemp)
    trap 'rm -f "$log"' EXIT
    if ! { [ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"; } >"$log" 2>&1; then
        tail -n 3 "$log" >&2
        skip "cannot create $VENV with $PYTHON"
    fi
    # Short timeouts: on a machine without a package index this should give up in seconds.
    if ! "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
        --timeout 20 --retries 1 \
        "aws-sam-cli==$SAM_CLI_VERSION" "cfn-lint==$CFN_LINT_VERSION" >"$log" 2>&1; then
        grep -v '^WARNING: Location' "$log" | tail -n 3 >&2
        skip "cannot install aws-sam-cli/cfn-lint into $VENV (offline or no package index?)"
    fi
    touch "$STAMP"
fi

export AWS_DEFAULT_REGION=us-east-1 AWS_REGION=us-east-1
export AWS_CONFIG_FILE=/dev/null AWS_SHARED_CREDENTIALS_FILE=/dev/null
export AWS_EC2_METADATA_DISABLED=true SAM_CLI_TELEMETRY=0

status=0
echo "template-check: sam validate"
"$VENV/bin/sam" validate --template "$TEMPLATE" --region us-east-1 || status=1
echo "template-check: cfn-lint"
"$VENV/bin/cfn-lint" "$TEMPLATE" && echo "$TEMPLATE: cfn-lint clean" || status=1
exit $status
