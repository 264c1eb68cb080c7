"""The streamsaver projector: rebuilds and verifies indexes by replaying the streams."""
