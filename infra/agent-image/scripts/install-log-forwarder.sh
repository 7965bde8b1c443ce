#!/usr/bin/env bash
# The journal to the cloud's log service: on AWS the CloudWatch agent (tailing the journal
# exported to a file), on GCP the Ops Agent (its journald receiver). The log group is the
# pool's, read at boot from /etc/corral/agent.yaml by log_forwarder_config.py.
set -euo pipefail
# shellcheck source=SCRIPTDIR/lib.sh
. "$(dirname "$0")/lib.sh"
FILES="$(dirname "$0")/../files"
require_cloud

case "$CLOUD/$(package_manager)" in
aws/apt)
    arch=$(dpkg --print-architecture)
    deb=/tmp/amazon-cloudwatch-agent.deb
    run curl -fsSL -o "$deb" \
        "https://amazoncloudwatch-agent.s3.amazonaws.com/ubuntu/$arch/latest/amazon-cloudwatch-agent.deb"
    run env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$deb"
    run rm -f "$deb"
    ;;
aws/dnf)
    install_packages amazon-cloudwatch-agent
    ;;
gcp/*)
    script=/tmp/add-google-cloud-ops-agent-repo.sh
    run curl -fsSL -o "$script" https://dl.google.com/cloudagents/add-google-cloud-ops-agent-repo.sh
    run bash "$script" --also-install
    run rm -f "$script"
    put "$FILES/ops-agent.yaml" /etc/google-cloud-ops-agent/config.yaml 0644
    ;;
esac

put "$FILES/log_forwarder_config.py" /usr/local/lib/corral/log_forwarder_config.py 0755
put "$FILES/corral-log-forwarder.service" /usr/lib/systemd/system/corral-log-forwarder.service 0644
if [ "$CLOUD" = "aws" ]; then
    put "$FILES/corral-journal-export.service" \
        /usr/lib/systemd/system/corral-journal-export.service 0644
    put "$FILES/corral-journal.logrotate" /etc/logrotate.d/corral-journal 0644
fi
run mkdir -p /etc/corral
run sh -c "echo $CLOUD > /etc/corral/image-cloud"
run systemctl daemon-reload
