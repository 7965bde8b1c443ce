"""Corral's default task image (docs/configuration.md, "Default task image").

Trials that name no image, in pools whose ``task_container_defaults`` set none, run in it.
Determined's default is its own environment image, which carries Determined's harness; Corral's
trials need none, so the default is a plain public image with what most trials need: CUDA,
cuDNN, Python 3 and PyTorch (torchrun included), from Docker Hub (pulled without a registry
login), the runtime variant (no compilers: about 3 GB instead of 9), and pinned to a tag so a
trial runs in the same image next month. Trials without GPUs get the same image: PyTorch runs on
the CPU in it, and an agent that runs both kinds pulls one image, not two.
"""

DEFAULT_IMAGE_GPU = "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime"
DEFAULT_IMAGE_CPU = DEFAULT_IMAGE_GPU
