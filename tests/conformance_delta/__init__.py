"""Upstream conformance specs not yet in the released langgraph-checkpoint-conformance."""
