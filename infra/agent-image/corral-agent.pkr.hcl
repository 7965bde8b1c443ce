# The Corral agent image: an AWS AMI and a GCE image the agents boot from (docs/agent-image.md).
#
# Two builds, each for both clouds:
#   agent          Ubuntu 22.04 (or Amazon Linux 2023 on AWS) + NVIDIA driver + NVIDIA
#                  Container Toolkit + Docker + Python + the Corral agent (systemd unit,
#                  started by the bootstrap) + the log forwarder (CloudWatch agent / Ops Agent)
#   deep-learning  a stock deep-learning image (AWS Deep Learning AMI, GCP Deep Learning VM)
#                  that already has the driver, CUDA and Docker: only the agent and the
#                  log forwarder (deep-learning-image.sh)
#
#   packer init infra/agent-image          # Packer >= 1.7: fetches the plugins (plugins.pkr.hcl)
#   packer build -only='agent.amazon-ebs.ubuntu' -var aws_region=us-west-2 infra/agent-image
#   packer build -only='agent.googlecompute.ubuntu' -var gcp_project_id=my-project infra/agent-image
#
# Each provisioning step is a shell script under scripts/ (shellcheck-clean, DRY_RUN=1 prints
# instead of changing anything); tests/infra/test_agent_image.py validates this template
# offline with `packer validate` and runs the scripts' dry runs.

variable "image_name_prefix" {
  type        = string
  default     = "corral-agent"
  description = "Prefix of the image names; also the GCE image family."
}

variable "corral_version" {
  type        = string
  default     = "0.1.0"
  description = "Version label put on the image (pyproject.toml's version)."
}

variable "agent_wheel_url" {
  type        = string
  default     = ""
  description = "Install the agent from this wheel URL instead of the uploaded sources."
}

variable "nvidia_driver_branch" {
  type        = string
  default     = "535"
  description = "NVIDIA server driver branch (Ubuntu: nvidia:<branch>-server)."
}

variable "aws_region" {
  type    = string
  default = "us-east-1"
}

variable "aws_instance_type" {
  type        = string
  default     = "g4dn.xlarge"
  description = "The build instance (a GPU type lets the build run nvidia-smi; any type builds)."
}

variable "aws_subnet_id" {
  type        = string
  default     = ""
  description = "Subnet of the build instance; empty for the default VPC."
}

variable "aws_ami_regions" {
  type        = list(string)
  default     = []
  description = "Other regions to copy the AMI to."
}

variable "aws_dlami_name" {
  type        = string
  default     = "Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 22.04) *"
  description = "Name filter of the AWS Deep Learning AMI (owner amazon) for the deep-learning build."
}

variable "gcp_project_id" {
  type        = string
  default     = ""
  description = "Project the GCE image is built in (required for the googlecompute builds)."
}

variable "gcp_zone" {
  type    = string
  default = "us-central1-a"
}

variable "gcp_machine_type" {
  type    = string
  default = "n1-standard-4"
}

variable "gcp_dlvm_image_family" {
  type        = string
  default     = "common-cu124-debian-12-py310"
  description = "Deep Learning VM image family (project deeplearning-platform-release)."
}

locals {
  stamp      = formatdate("YYYYMMDDhhmmss", timestamp())
  version    = replace(var.corral_version, ".", "-")
  image_name = "${var.image_name_prefix}-${local.version}-${local.stamp}"
  # Which cloud each builder is: the scripts' CLOUD.
  cloud = {
    "amazon-ebs"    = "aws"
    "googlecompute" = "gcp"
  }
  agent_source = var.agent_wheel_url != "" ? var.agent_wheel_url : "/tmp/corral-image/src"
  aws_tags = {
    "corral:image"   = "agent"
    "corral:version" = var.corral_version
  }
  gcp_labels = {
    "corral-image"   = "agent"
    "corral-version" = local.version
  }
  # What both builds upload: the provisioning scripts and unit files to /tmp/corral-image/,
  # and the project's sources, installed into the agent's venv (unless agent_wheel_url is set),
  # to /tmp/corral-image/src/.
  image_files = ["${path.root}/scripts", "${path.root}/files"]
  project_files = [
    "${path.root}/../../pyproject.toml",
    "${path.root}/../../README.md",
    "${path.root}/../../functions",
    "${path.root}/../../agent_runtime",
  ]
}

# ---- AWS ----------------------------------------------------------------------------------
source "amazon-ebs" "ubuntu" {
  region        = var.aws_region
  instance_type = var.aws_instance_type
  subnet_id     = var.aws_subnet_id
  ami_name      = "${local.image_name}-ubuntu2204"
  ami_regions   = var.aws_ami_regions
  ssh_username  = "ubuntu"
  source_ami_filter {
    filters = {
      name                = "ubuntu/images/hvm-ssd/ubuntu-jammy-22.04-amd64-server-*"
      root-device-type    = "ebs"
      virtualization-type = "hvm"
    }
    owners      = ["099720109477"] # Canonical
    most_recent = true
  }
  launch_block_device_mappings {
    device_name           = "/dev/sda1"
    volume_size           = 64
    volume_type           = "gp3"
    iops                  = 3000
    throughput            = 125
    delete_on_termination = true
  }
  tags = merge(local.aws_tags, { "corral:base" = "ubuntu-22.04" })
}

source "amazon-ebs" "al2023" {
  region        = var.aws_region
  instance_type = var.aws_instance_type
  subnet_id     = var.aws_subnet_id
  ami_name      = "${local.image_name}-al2023"
  ami_regions   = var.aws_ami_regions
  ssh_username  = "ec2-user"
  source_ami_filter {
    filters = {
      name                = "al2023-ami-2023.*-x86_64"
      root-device-type    = "ebs"
      virtualization-type = "hvm"
    }
    owners      = ["amazon"]
    most_recent = true
  }
  launch_block_device_mappings {
    device_name           = "/dev/xvda"
    volume_size           = 64
    volume_type           = "gp3"
    iops                  = 3000
    throughput            = 125
    delete_on_termination = true
  }
  tags = merge(local.aws_tags, { "corral:base" = "al2023" })
}

source "amazon-ebs" "deep-learning" {
  region        = var.aws_region
  instance_type = var.aws_instance_type
  subnet_id     = var.aws_subnet_id
  ami_name      = "${local.image_name}-dlami"
  ami_regions   = var.aws_ami_regions
  ssh_username  = "ubuntu"
  source_ami_filter {
    filters = {
      name                = var.aws_dlami_name
      root-device-type    = "ebs"
      virtualization-type = "hvm"
    }
    owners      = ["amazon"]
    most_recent = true
  }
  tags = merge(local.aws_tags, { "corral:base" = "dlami" })
}

# ---- GCP ----------------------------------------------------------------------------------
source "googlecompute" "ubuntu" {
  project_id              = var.gcp_project_id
  zone                    = var.gcp_zone
  machine_type            = var.gcp_machine_type
  source_image_family     = "ubuntu-2204-lts"
  source_image_project_id = ["ubuntu-os-cloud"]
  image_name              = "${local.image_name}-ubuntu2204"
  image_family            = var.image_name_prefix
  image_labels            = local.gcp_labels
  disk_size               = 64
  ssh_username            = "packer"
}

source "googlecompute" "deep-learning" {
  project_id              = var.gcp_project_id
  zone                    = var.gcp_zone
  machine_type            = var.gcp_machine_type
  source_image_family     = var.gcp_dlvm_image_family
  source_image_project_id = ["deeplearning-platform-release"]
  image_name              = "${local.image_name}-dlvm"
  image_family            = "${var.image_name_prefix}-dlvm"
  image_labels            = local.gcp_labels
  disk_size               = 100
  ssh_username            = "packer"
}

# ---- builds -------------------------------------------------------------------------------
build {
  name    = "agent"
  sources = ["source.amazon-ebs.ubuntu", "source.amazon-ebs.al2023", "source.googlecompute.ubuntu"]

  provisioner "shell" {
    inline = ["mkdir -p /tmp/corral-image/src"]
  }
  provisioner "file" {
    sources     = local.image_files
    destination = "/tmp/corral-image/"
  }
  provisioner "file" {
    sources     = local.project_files
    destination = "/tmp/corral-image/src/"
  }
  provisioner "shell" {
    environment_vars = [
      "CLOUD=${local.cloud[source.type]}",
      "NVIDIA_DRIVER_BRANCH=${var.nvidia_driver_branch}",
      "AGENT_SOURCE=${local.agent_source}",
    ]
    execute_command = "sudo env {{ .Vars }} bash '{{ .Path }}'"
    inline = [
      "bash /tmp/corral-image/scripts/install-base.sh",
      "bash /tmp/corral-image/scripts/install-nvidia.sh",
      "bash /tmp/corral-image/scripts/install-agent.sh",
      "bash /tmp/corral-image/scripts/install-log-forwarder.sh",
      "bash /tmp/corral-image/scripts/cleanup.sh",
    ]
  }
}

build {
  name    = "deep-learning"
  sources = ["source.amazon-ebs.deep-learning", "source.googlecompute.deep-learning"]

  provisioner "shell" {
    inline = ["mkdir -p /tmp/corral-image/src"]
  }
  provisioner "file" {
    sources     = concat(local.image_files, ["${path.root}/deep-learning-image.sh"])
    destination = "/tmp/corral-image/"
  }
  provisioner "file" {
    sources     = local.project_files
    destination = "/tmp/corral-image/src/"
  }
  provisioner "shell" {
    environment_vars = [
      "CLOUD=${local.cloud[source.type]}",
      "AGENT_SOURCE=${local.agent_source}",
    ]
    execute_command = "sudo env {{ .Vars }} bash '{{ .Path }}'"
    inline = [
      "bash /tmp/corral-image/deep-learning-image.sh",
      "bash /tmp/corral-image/scripts/cleanup.sh",
    ]
  }
}
