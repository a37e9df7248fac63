"""calibrate-workload's three phases at reduced scale on a CPU, to choose the GPU fit's starting point and search.

Wan2.1-14B at 81 frames (75,600 tokens) with layers cut to ``--heads`` heads, samples drawn at layer 20 / step 25,
verified there over ``--seeds``; the simulated L2 (FA4 on the H100) shrunk with the sequence (50 MiB x 75,600 /
363,600), so each head's K/V overflows it as at 364K. The L2 figures are still only indicative: a head is 4.6 waves
here, 21.5 at 364K.

    python benchmarks/results/scene-workload-h200/cpu_trial.py --generator scene --sharpness 0.7,1,1.4,2 \\
        --replicates 2 --set ground_sharpness=0.3 --search ground_local=0.2,0.6 --seeds 0,1
    python benchmarks/results/scene-workload-h200/cpu_trial.py --generator clusters --verify-only --seeds 0,1
"""

from __future__ import annotations

import argparse
import concurrent.futures
import multiprocessing
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch
import yaml

from wavealign import hardware, workloads

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "lab"))  # the lab's studies are scripts, not a package
import calibrate_workload as cal

FRAMES, LAYER, STEP = 81, 20, 25


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--generator", default="scene", choices=workloads.generator_names())
    parser.add_argument("--heads", type=int, default=8, help="heads per layer (Wan2.1-14B has 40)")
    parser.add_argument("--sharpness", default="0.7,1,1.4,2")
    parser.add_argument("--noise", default="0.1")
    parser.add_argument("--replicates", type=int, default=2)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a hand-set knob changed")
    parser.add_argument("--search", action="append", default=[], metavar="KEY=V1,V2")
    parser.add_argument("--seeds", default="0")
    parser.add_argument("--l2-target", default="relative", choices=cal.L2_TARGETS)
    parser.add_argument("--verify-only", action="store_true", help="verify the generator's calibrated values")
    args = parser.parse_args(argv)

    wl = replace(workloads.preset("wan2.1-14b", FRAMES, "720p"), heads=args.heads)
    h100 = hardware.get("h100")
    shrunk = replace(h100, l2_bytes=int(h100.l2_bytes * wl.seq_len / 363_600))
    sim_settings = cal.SimSettings(shrunk, "fa4", wl.head_dim, 128, cal.SIM_PAPER_ROW_JITTER)
    changes = {k: yaml.safe_load(v) for k, _, v in (item.partition("=") for item in args.set)}
    generator = workloads.GENERATORS[args.generator]
    base = generator.calibrated() if args.verify_only else replace(generator(), **changes)
    seeds = [int(s) for s in args.seeds.split(",")]
    started = time.perf_counter()
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(2, mp_context=context) as pool:
        fitted, cfg = None, base
        if not args.verify_only:
            sharpness, noise = ([float(x) for x in text.split(",")] for text in (args.sharpness, args.noise))
            rows = cal.sample(wl, base, cal.search_settings(args.search, base), sharpness, noise,
                              replicates=args.replicates, layers=[LAYER],
                              steps=[STEP], seed=0, block_size=128, device=torch.device("cpu"),
                              sim_settings=sim_settings, pool=pool)
            fitted = cal.fit(rows, mix_step=0.05, restarts=32, seed=0, l2_target=args.l2_target)
            cfg = cal.fitted_config(base, fitted.choice, fitted.mix, fitted.setting)
            print("predicted density", {m: round(100 * v, 1) for m, v in fitted.predicted_density.items()})
        checked = cal.verify(wl, cfg, [(s, LAYER, STEP) for s in seeds], block_size=128, device=torch.device("cpu"),
                             sim_settings=sim_settings, random_density=0.25, random_seed=0, pool=pool)
    print(cal.markdown(cal.residuals(checked), "cpu_trial.py " + " ".join(argv), args.l2_target, fitted))
    print(f"wall {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
