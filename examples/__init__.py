"""Runnable examples (docker-compose.yml runs examples.agent)."""
