"""Agent bootstrap: the EC2 user data / GCE startup-script that starts ``corral-agent``."""

from corral.bootstrap.render import BootstrapSettings, render_bootstrap

__all__ = ["BootstrapSettings", "render_bootstrap"]
