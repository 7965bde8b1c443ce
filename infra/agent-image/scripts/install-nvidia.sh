#!/usr/bin/env bash
# The NVIDIA driver (server branch NVIDIA_DRIVER_BRANCH) and the NVIDIA Container Toolkit,
# with Docker's default runtime left as runc: the agent asks for GPUs per container
# (DeviceRequest), and agent_docker_runtime: nvidia works too once nvidia-ctk registered it.
set -euo pipefail
# shellcheck source=SCRIPTDIR/lib.sh
. "$(dirname "$0")/lib.sh"

BRANCH=${NVIDIA_DRIVER_BRANCH:-535}
TOOLKIT_REPO=https://nvidia.github.io/libnvidia-container

case "$(package_manager)" in
apt)
    # Ubuntu's signed, prebuilt modules for the running kernel (no DKMS build at boot).
    install_packages ubuntu-drivers-common
    run ubuntu-drivers install --gpgpu "nvidia:${BRANCH}-server"
    install_packages "nvidia-utils-${BRANCH}-server"
    run sh -c "curl -fsSL $TOOLKIT_REPO/gpgkey | gpg --dearmor --yes \
-o /usr/share/keyrings/nvidia-container-toolkit-keyring.gpg"
    run sh -c "curl -fsSL $TOOLKIT_REPO/stable/deb/nvidia-container-toolkit.list \
| sed 's#deb https://#deb [signed-by=/usr/share/keyrings/nvidia-container-toolkit-keyring.gpg] https://#' \
> /etc/apt/sources.list.d/nvidia-container-toolkit.list"
    run apt-get update -q
    install_packages nvidia-container-toolkit
    ;;
dnf)
    # Amazon Linux 2023: NVIDIA's CUDA repository for amzn2023, DKMS against this kernel.
    install_packages "kernel-devel-$(uname -r)" "kernel-modules-extra-$(uname -r)" dkms
    run dnf config-manager --add-repo \
        https://developer.download.nvidia.com/compute/cuda/repos/amzn2023/x86_64/cuda-amzn2023.repo
    run dnf module install -y -q "nvidia-driver:${BRANCH}-dkms"
    run sh -c "curl -fsSL $TOOLKIT_REPO/stable/rpm/nvidia-container-toolkit.repo \
> /etc/yum.repos.d/nvidia-container-toolkit.repo"
    install_packages nvidia-container-toolkit
    ;;
esac
run nvidia-ctk runtime configure --runtime=docker
# Keeps the driver loaded between trials (first CUDA call in a container is then fast).
run systemctl enable nvidia-persistenced.service || log "no nvidia-persistenced unit: left as is"
