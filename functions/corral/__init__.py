"""Corral: a serverless control plane for elastic GPU training clusters."""
