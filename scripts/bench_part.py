#!/usr/bin/env python
"""Evaluating a sampled last layer at the cost of the layer: K members with the trunk once against K whole passes.

For each model, K = 100 members that share a frozen trunk and differ in their last layer are written as a
part-sampling run writes them (csg.engine.samples.SampleStore with part_keys: the head per sample, the rest once),
and one whole sample beside them for its size. Then, for K = 1, 10, 100, interleaved over rounds (medians):

- ``trunk once``: csg.evaluation.evaluate_samples(..., head=<last layer>): the members' files read, the trunk run
  once over the test inputs, each member's head on the kept features, every member's metrics and the average;
- ``whole passes``: the same call without ``head``: each member loaded whole and the whole model run.

Models: the CIFAR ResNet-18 (csg's ``resnet18``, head ``linear``) on 64 CIFAR-shaped inputs, and the MLP of the
embedded default (head ``7``) on the 1000 test digits of mnist5k. Writes results/bench/part.{csv,md}. ``--device cuda``
evaluates on the GPU (``make gpu-check``); ``--smoke`` the MLP alone (a check that it runs).

    python scripts/bench_part.py [--rounds 3] [--device cpu] [--smoke]
"""

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import pandas as pd  # noqa: E402
import torch  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

from csg.data import build_data  # noqa: E402
from csg.engine.part import select_part  # noqa: E402
from csg.engine.samples import REST, SampleStore  # noqa: E402
from csg.evaluation import equal_weights, evaluate_samples  # noqa: E402
from csg.io.atomic import atomic_write_text  # noqa: E402
from csg.reporting import markdown_table  # noqa: E402
from csg.models import create_model  # noqa: E402

MEMBERS = (1, 10, 100)
GOAL = 1.5  # evaluating 100 last-layer members at most 1.5x evaluating one (issue 48)


def setups(smoke: bool = False):
    torch.manual_seed(0)
    if smoke:
        digits = build_data("mnist5k", seed=0, device="cpu", batch_size=64, eval_batch_size=1000)
        yield "MLP, the 1000 mnist5k test digits", create_model("mlp", num_classes=10, input_shape=(1, 28, 28)), "7", \
            digits.test
        return
    cifar = DataLoader(TensorDataset(torch.randn(64, 3, 32, 32), torch.randint(0, 10, (64,))), batch_size=64)
    yield "CIFAR ResNet-18, 64 CIFAR-shaped inputs", create_model("resnet18", num_classes=10,
                                                                   input_shape=(3, 32, 32)), "linear", cifar
    digits = build_data("mnist5k", seed=0, device="cpu", batch_size=64, eval_batch_size=1000)
    yield "MLP, the 1000 mnist5k test digits", create_model("mlp", num_classes=10, input_shape=(1, 28, 28)), "7", \
        digits.test


def write_members(model: torch.nn.Module, head: str, folder: Path) -> tuple[SampleStore, list[Path], int, int]:
    """K members differing in ``head`` as a part-sampling run stores them; the bytes of a part and a whole sample."""
    part = select_part(model, [head])
    store = SampleStore(folder / "part", part_keys=part.sample_keys)
    generator = torch.Generator().manual_seed(1)
    head_module = model.get_submodule(head)
    paths = []
    for index in range(max(MEMBERS)):
        with torch.no_grad():
            head_module.weight.copy_(torch.randn(head_module.weight.shape, generator=generator) * 0.05)
        paths.append(store.save(model, index=index, cycle=index, epoch=index))
    whole = SampleStore(folder / "whole").save(model, index=0, cycle=0, epoch=0)
    return store, paths, paths[0].stat().st_size, whole.stat().st_size


def seconds(model, store: SampleStore, paths, loader, head: str | None, device: torch.device) -> float:
    start = time.perf_counter()
    evaluate_samples(model, (store.state_of(p) for p in paths), equal_weights(len(paths)), loader, device, head=head)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "bench")
    parser.add_argument("--device", default="cpu", help="where the members are evaluated (cpu, cuda)")
    parser.add_argument("--smoke", action="store_true", help="the MLP alone: a check that it runs, not a measure")
    args = parser.parse_args()
    device, rows = torch.device(args.device), []
    for name, model, head, loader in setups(args.smoke):
        model.to(device).eval()
        with tempfile.TemporaryDirectory() as tmp:
            store, paths, part_bytes, whole_bytes = write_members(model, head, Path(tmp))
            rest_bytes = (store.directory / REST).stat().st_size
            seconds(model, store, paths[:1], loader, head, device)  # warm-up
            times = {(k, way): [] for k in MEMBERS for way in ("trunk once", "whole passes")}
            for _ in range(args.rounds):
                for k in MEMBERS:
                    times[k, "trunk once"].append(seconds(model, store, paths[:k], loader, head, device))
                    times[k, "whole passes"].append(seconds(model, store, paths[:k], loader, None, device))
        one = statistics.median(times[1, "trunk once"])
        for (k, way), values in times.items():
            rows.append({"model": name, "members": k, "evaluation": way, "median_s": statistics.median(values),
                         "over_one_member": statistics.median(values) / one, "rounds": args.rounds,
                         "sample_bytes": part_bytes if way == "trunk once" else whole_bytes,
                         "rest_bytes_once": rest_bytes if way == "trunk once" else 0, "device": str(device)})
    frame = pd.DataFrame(rows)
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out / "part.csv", frame.to_csv(index=False))
    atomic_write_text(args.out / "part.md", report(frame))
    print(report(frame))


def report(frame: pd.DataFrame) -> str:
    lines = ["# A sampled last layer: evaluation at the cost of the layer (`scripts/bench_part.py`)", "",
             f"{_where(frame.device.iloc[0])}, torch {torch.__version__}; medians of "
             f"{int(frame.rounds.iloc[0])} interleaved rounds. Members share a frozen trunk and differ in the last "
             "layer, stored as a part-sampling run stores them (the head per sample, the rest once). Each time "
             "includes reading the members' files, every member's metrics and the average.", ""]
    rows = []
    for name, block in frame.groupby("model", sort=False):
        for k in MEMBERS:
            once = block[(block.members == k) & (block.evaluation == "trunk once")].iloc[0]
            whole = block[(block.members == k) & (block.evaluation == "whole passes")].iloc[0]
            rows.append([name, k, f"{once.median_s:.3f}", f"{whole.median_s:.3f}", f"{once.over_one_member:.2f}",
                         f"{whole.median_s / once.median_s:.1f}"])
    lines += markdown_table(["model", "members K", "trunk once, s", "K whole passes, s", "trunk once / one member",
                             "whole / trunk once"], rows, align="lrrrrr")
    rows = []
    for name, block in frame.groupby("model", sort=False):
        once = block[block.evaluation == "trunk once"].iloc[0]
        whole = block[block.evaluation == "whole passes"].iloc[0]
        rows.append([name, f"{once.sample_bytes:,}", f"{whole.sample_bytes:,}", f"{once.rest_bytes_once:,}"])
    lines += ["", *markdown_table(["model", "bytes per sample, last layer", "bytes per sample, whole model",
                                   "the rest, once"], rows, align="lrrr"), ""]
    for name, block in frame.groupby("model", sort=False):
        once = block[block.evaluation == "trunk once"].set_index("members").median_s
        ratio = once[max(MEMBERS)] / once[1]
        verdict = "met" if ratio <= GOAL else "MISSED"
        each = (once[max(MEMBERS)] - once[1]) / (max(MEMBERS) - 1)
        lines.append(f"- {name}: {max(MEMBERS)} members cost {ratio:.2f}x one member (goal <= {GOAL}): {verdict}. "
                     f"One member (the trunk's pass included) takes {1000 * once[1]:.1f} ms, each further member "
                     f"{1000 * each:.2f} ms (its file read, its head, its metrics and its share of the average).")
    return "\n".join(lines) + "\n"


def _where(device: str) -> str:
    if device.startswith("cuda"):
        return f"{torch.cuda.get_device_name(torch.device(device))} (CUDA {torch.version.cuda})"
    return f"CPU, {torch.get_num_threads()} torch threads"


if __name__ == "__main__":
    main()
