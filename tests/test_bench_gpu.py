"""scripts/bench_gpu.py (make bench-gpu): it runs, writes every named measure, and its ratios are its own numbers."""

from __future__ import annotations

import importlib.util

import pandas as pd
import pytest
import torch

from tests.conftest import ROOT

NAMED = ["device", "torch", "cuda", "sgdm_epoch_s", "csghmc_exploration_epoch_s", "csghmc_sampling_epoch_s",
         "csghmc_sampling_epoch_s_bf16", "plain_loop_sampling_epoch_s", "eval12_s",
         "eager_csghmc_sampling_epoch_s", "compiled_over_eager_sampling", "chains2_wall_over_chain1", "chains2_epoch_s",
         "chains_method", "chains2_streams_epoch_s", "chains2_streams_bf16_epoch_s", "chains2_vmap_epoch_s",
         "processes1_wall_over_process1",
         "projected_200_epoch_chain_min"]


def _bench():
    spec = importlib.util.spec_from_file_location("bench_gpu", ROOT / "scripts" / "bench_gpu.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(tmp_path, device, model):
    _bench().main(["--device", device, "--smoke", "--model", model, "--epochs", "1", "--chains", "1", "2", "--processes", "1",
                   "--out", str(tmp_path)])
    table = pd.read_csv(tmp_path / "gpu.csv").set_index("measure")["value"]
    missing = [name for name in NAMED if name not in table.index]
    assert not missing, missing
    return table, (tmp_path / "gpu.md").read_text()


def test_the_stand_in_data_loads_as_cifar(tmp_path):
    from csg.data import build_data
    from csg.data.cifar import write_stand_in

    write_stand_in(tmp_path, train=130, test=20)
    data = build_data("cifar10", root=str(tmp_path), download=False, batch_size=64)
    assert (data.num_train, data.num_test, len(data.train), data.input_shape) == (130, 20, 3, (3, 32, 32))
    assert "python-pickle" in data.source


def test_bench_gpu_smoke_on_the_cpu_writes_every_measure(tmp_path):
    table, report = _run(tmp_path, "cpu", "mlp")
    seconds = table.drop(["device", "torch", "cuda", "chains_method"]).astype(float)
    assert (seconds > 0).all()
    assert seconds["chains1_wall_over_chain1"] == 1.0 and seconds["processes1_wall_over_process1"] == 1.0
    assert seconds["chains2_wall_over_chain1"] == pytest.approx(
        seconds["chains2_epoch_s"] / seconds["csghmc_sampling_epoch_s"], rel=1e-4)
    assert seconds["csghmc_sampling_over_sgdm"] == pytest.approx(
        seconds["csghmc_sampling_epoch_s"] / seconds["sgdm_epoch_s"], rel=1e-4)
    for method in ("sequential", "vmap", "streams"):  # every method's K = 2 epoch over one chain's, fp32 (bf16: not vmap)
        assert seconds[f"chains2_{method}_wall_over_chain1"] == pytest.approx(
            seconds[f"chains2_{method}_epoch_s"] / seconds["csghmc_sampling_epoch_s"], rel=1e-4)
        assert (f"chains2_{method}_bf16_epoch_s" in seconds) == (method != "vmap")
    best = table["chains_method"]
    assert best in ("sequential", "vmap", "streams") and seconds["chains2_epoch_s"] == seconds[f"chains2_{best}_epoch_s"]
    assert not any(name.endswith("_peak_gib") for name in seconds.index)  # the GPU's memory: on CUDA only
    assert table["torch"] == torch.__version__ and "CPU" in table["device"]
    assert "| csghmc_sampling_epoch_s |" in report and "<= 3.0" in report and torch.__version__ in report


@pytest.mark.gpu
def test_bench_gpu_smoke_on_the_gpu(tmp_path):
    table, report = _run(tmp_path, "cuda", "resnet18")
    assert table["device"] == torch.cuda.get_device_name() and table["cuda"] == torch.version.cuda
    assert float(table["eval12_s"]) > 0 and torch.cuda.get_device_name() in report
    assert all(float(table[f"chains2_{m}_peak_gib"]) > 0 for m in ("sequential", "vmap", "streams"))
