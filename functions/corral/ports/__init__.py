"""Ports: the Protocols the services need from the outside world."""
