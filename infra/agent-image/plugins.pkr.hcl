# The plugins, for Packer >= 1.7 (`packer init infra/agent-image` fetches them). Packer 1.6
# (Debian's package) has both builders built in and does not know this block: the offline
# check validates the template without this file there (tests/infra/test_agent_image.py).
packer {
  required_version = ">= 1.7.0"
  required_plugins {
    amazon = {
      version = ">= 1.2.0"
      source  = "github.com/hashicorp/amazon"
    }
    googlecompute = {
      version = ">= 1.1.0"
      source  = "github.com/hashicorp/googlecompute"
    }
  }
}
