"""The CSV logger of a resumed run: the interrupted run's rows up to each chain's checkpoint stay, those past it go
(the resumed run logs them again), so no epoch or step appears twice; wandb online only where its server answers."""

from __future__ import annotations

import csv

import pytest

from csg.engine.loggers import CSVLogger


def _rows(path):
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def test_a_resumed_run_drops_the_rows_past_each_chains_checkpoint(tmp_path):
    first = CSVLogger(tmp_path)
    for epoch in range(4):
        for chain in (0, 1):
            first.log_epoch(epoch, {"chain": chain, "epoch": epoch, "train_loss": 1.0 / (epoch + 1)})
    for step in (10, 20, 30, 40):
        first.log_step(step, {"chain": 0, "loss": 0.5})
    first.close()
    # chain 0's checkpoint: epoch 2 next, 25 iterations done; chain 1's: epoch 3 next
    resumed = CSVLogger(tmp_path, append=True, resumed_at={0: (2, 25), 1: (3, 35)})
    resumed.log_epoch(2, {"chain": 0, "epoch": 2, "train_loss": 0.3})
    resumed.log_step(30, {"chain": 0, "loss": 0.4})
    resumed.close()
    epochs = [(row["chain"], row["epoch"]) for row in _rows(tmp_path / "epochs.csv")]
    assert epochs == [("0", "0"), ("1", "0"), ("0", "1"), ("1", "1"), ("1", "2"), ("0", "2")]
    steps = [(row["step"], row["loss"]) for row in _rows(tmp_path / "steps.csv")]
    assert steps == [("10", "0.5"), ("20", "0.5"), ("30", "0.4")]


def test_one_chain_without_a_chain_column_and_a_plain_append(tmp_path):
    first = CSVLogger(tmp_path)
    for epoch in range(3):
        first.log_epoch(epoch, {"epoch": epoch, "lr": 0.1})
    first.close()
    CSVLogger(tmp_path, append=True, resumed_at={3: (1, 0)}).close()  # opens nothing: the file is untouched
    assert len(_rows(tmp_path / "epochs.csv")) == 3
    resumed = CSVLogger(tmp_path, append=True, resumed_at={3: (1, 0)})  # the run's only chain, index 3
    resumed.log_epoch(1, {"epoch": 1, "lr": 0.2})
    resumed.close()
    assert [(row["epoch"], row["lr"]) for row in _rows(tmp_path / "epochs.csv")] == [("0", "0.1"), ("1", "0.2")]
    appended = CSVLogger(tmp_path, append=True)  # no positions given: every row stays
    appended.log_epoch(2, {"epoch": 2, "lr": 0.3})
    appended.close()
    assert [row["epoch"] for row in _rows(tmp_path / "epochs.csv")] == ["0", "1", "2"]


def test_wandb_online_without_a_reachable_server_is_one_line_before_anything_runs(monkeypatch):
    # wandb would start, then fail with a CommError; the check connects to WANDB_BASE_URL's host first
    import socket

    from csg.checks import check_command
    from csg.engine import loggers
    from csg.errors import ConfigError
    from tests.conftest import ROOT

    listening = socket.socket()
    listening.bind(("127.0.0.1", 0))
    port = listening.getsockname()[1]
    listening.listen()
    monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{port}")
    loggers.check_wandb_online({"mode": "online"})  # a server that answers: nothing to say
    listening.close()  # the port is closed now: the connection is refused
    loggers._unreachable.cache_clear()
    with pytest.raises(ConfigError) as refused:
        loggers.check_wandb_online({"mode": "online"})
    assert str(refused.value) == (
        f"logger.mode='online' is not allowed: offline or disabled on a machine that cannot reach wandb (127.0.0.1:"
        f"{port}: Connection refused): logger.mode=offline logs into the run folder, and `wandb sync <run folder>/"
        "wandb/offline-run-*` uploads it later from a machine with network")
    loggers.check_wandb_online({"mode": "offline"})  # offline needs no network
    assert check_command(["logger=wandb", "logger.mode=online"], ROOT / "configs") == str(refused.value)
    assert check_command(["logger=wandb"], ROOT / "configs") is None


@pytest.mark.parametrize("url", ["http://[::1", "http://localhost:99999", "localhost:8080", "ftp://example.org"])
@pytest.mark.parametrize("mode", ["online", "offline"])
def test_a_malformed_wandb_base_url_is_one_line_naming_it(monkeypatch, url, mode):
    """issue 74: wandb's own URL check (every mode but disabled) ended the run in a traceback."""
    from csg.engine import loggers
    from csg.errors import ConfigError

    monkeypatch.setenv("WANDB_BASE_URL", url)
    with pytest.raises(ConfigError, match="the http\\(s\\) URL of a wandb server") as refused:
        loggers.check_wandb_online({"mode": mode})
    assert refused.value.key == "WANDB_BASE_URL" and "\n" not in str(refused.value)
    loggers.check_wandb_online({"mode": "disabled"})  # no wandb at all: nothing to check


def test_a_server_that_is_not_wandbs_is_one_line_when_the_run_starts_logging(monkeypatch, tmp_path):
    import http.server
    import threading

    from csg.engine import loggers
    from csg.errors import ConfigError

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{server.server_address[1]}")
        monkeypatch.setenv("WANDB_API_KEY", "a" * 40)
        monkeypatch.setenv("WANDB_INIT_TIMEOUT", "20")
        loggers.check_wandb_online({"mode": "online"})  # it answers TCP: the check cannot tell it from wandb's
        with pytest.raises(ConfigError, match="a wandb run wandb.init can start \\(it failed: ") as refused:
            loggers.WandbLogger(tmp_path, {}, project="csg-test", mode="online")
        assert "\n" not in str(refused.value) and "<" not in str(refused.value)
    finally:
        server.shutdown()
