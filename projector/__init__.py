"""The streamsaver projector: keeps the cross-thread projections (thread registry, run and
metadata indexes) current, and rebuilds and verifies every index by replay."""
