"""benchmarks.scale, run tiny: every figure its table shows is measured, and they agree with
each other (no timing is asserted: speed is the benchmark's to report, as ratios)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from benchmarks import chat, scale

THREADS = 200
# two turns: a deleted thread must cost less than a live one; at one turn (three checkpoints)
# a deletion's records outweigh the thread on this version (docs/scale.md)
TURNS = 2


def test_a_tiny_run_reports_every_figure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "scale.json"
    argv = ["--threads", str(THREADS), "--turns", str(TURNS), "--repeat", "1", "--quiet"]
    assert scale.main([*argv, "--json", str(out)]) == 0
    table = capsys.readouterr().out
    report = json.loads(out.read_text())
    assert (report["threads"], report["turns"], report["topology"]) == (
        THREADS,
        TURNS,
        "standalone",
    )
    assert report["node_bytes"] > 0
    peers = {p["name"]: p for p in report["peers"]}
    assert set(peers) == {scale.STREAMSAVER, scale.PLAINREDIS}
    # one thread in chat.USERS matches the filter, and each of its checkpoints is listed
    matching = sum(1 for n in range(THREADS) if chat.user_of(n) == chat.user_of(7))
    for peer in peers.values():
        assert not peer["absent"], peer["absent"]
        assert peer["live_bytes"] > 0 and peer["live_keys"] > 0
        assert peer["deleted"] == THREADS
        assert 0 <= peer["deleted_bytes"] < peer["live_bytes"], peer
        assert peer["deleted_keys"] < peer["live_keys"]
        assert peer["write_s"] > 0 and peer["delete_s"] > 0
        assert peer["ops"]["list_filter"] > 0
    # LangGraph writes 1 + 2 checkpoints a turn (input, loop step 0, the reply)
    assert peers[scale.STREAMSAVER]["listed"] == peers[scale.PLAINREDIS]["listed"]
    assert peers[scale.STREAMSAVER]["listed"] == matching * 3 * TURNS
    ours = peers[scale.STREAMSAVER]
    assert ours["ids"] == THREADS
    assert ours["page"] == 20
    assert set(ours["ops"]) == {
        "thread_ids", "threads_page", "list_filter", "console_threads", "rebuild_all"
    }  # fmt: skip
    lag = ours["lag"]
    assert lag["max_pending"] >= 0 and lag["catch_up_s"] >= 0
    # the table shows each figure beside plainredis', as a ratio where both have it
    assert f"{THREADS} threads of {TURNS} chat turn(s), standalone" in table
    for label in ("bytes per live thread", "bytes per deleted thread", "`list(None, filter=...)`",
                  "`thread_ids()`", "console threads page", "`streamsaver rebuild --all`",
                  "projector: last write to lag 0"):  # fmt: skip
        assert label in table
    assert "ABSENT" not in table
