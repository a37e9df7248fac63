"""Fit the synthetic workload generator so the paper's four methods give Table I's densities and L2 hit rates.

The generator's head types (spatial, temporal, 3D-local, semantic, sink) each get a sharpness multiplier and a
noise energy from a candidate grid, and a layer gets a head-type mix. Three seeded phases:

1. **sample**: for every head type and candidate, ``--replicates`` heads drawn over ``--layers`` x ``--steps``
   x the model's heads; each method's mask through ``masks.build_for_heads`` (the call every sweep cell makes),
   its density, and ``wavealign.sim``'s L2 hits and look-ups for ``--kernel`` on ``--hardware`` in the
   original row order (Table I's setting: FA4 on the H100);
2. **fit**: one candidate per type and a mix on a simplex grid of step ``--mix-step``, minimising
   sum_m ((density_m - target_m) / 3 pts)^2 + ((L2_m - target_m) / 5 pts)^2 (the issue's tolerances), by
   alternating minimisation from ``--restarts`` seeded starts; a layer's L2 hit is its heads' hits over their
   look-ups (FA4 runs the heads one after another);
3. **verify**: whole layers (every head) at each (layer, step) of ``--verify-at`` with the fitted generator:
   each method's density and simulated L2 hit against the targets, and the iid random control's L2 hit.

Writes samples.csv, verify.csv, fit.json, calibrated.yaml (the generator with its provenance) and summary.md
under --out; ``--install`` also makes it the default generator (``wavealign/workloads/calibrated.yaml``).

GPU, the paper's case (Wan2.1-14B, 401 frames at 720p = 363,600 tokens, 40 heads):
    wavealign calibrate-workload --out benchmarks/results/calibration --device cuda --install
CPU, a reduced run:
    wavealign calibrate-workload --out /tmp/cal --model wan2.1-1.3b --frames 9 --resolution 480p \\
        --sharpness 0.7,1.4 --noise 0.1 --replicates 1 --layers 0 --steps 0 --verify-at 0:0 --block-size 64
"""

from __future__ import annotations

import concurrent.futures
import datetime
import itertools
import json
import multiprocessing
import random
import shlex
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import torch
import yaml

from wavealign import kernels, sim, synthetic, workloads
from wavealign.jobs._args import Parser
from wavealign.jobs._head_masks import add_workload_arguments, device_for, head_masks
from wavealign.jobs._paper import TABLE_I_DENSITY, TABLE_I_L2_HIT_PCT
from wavealign.jobs._paper import TABLE_I_METHODS as METHODS
from wavealign.jobs._records import write_csv
from wavealign.workloads.synthetic import CALIBRATED_PATH, HEAD_TYPES, GeneratorConfig, HeadProfile

EXTRAS = ("sim",)

DENSITY_TOLERANCE_PTS = 3.0
L2_TOLERANCE_PTS = 5.0


@dataclass(frozen=True)
class SampleRow:
    """One method's mask on one sampled head of one (type, candidate)."""

    head_type: str
    sharpness_multiplier: float
    noise: float
    replicate: int
    layer: int
    step: int
    head: int
    method: str
    density: float
    l2_hit_bytes: float
    l2_lookup_bytes: float


@dataclass(frozen=True)
class VerifyRow:
    """One method over one whole layer of the fitted generator (``method="random"``: the iid control)."""

    layer: int
    step: int
    method: str
    heads: int
    density: float
    target_density: float
    l2_hit_pct: float
    target_l2_hit_pct: float


def _csv_floats(text: str, name: str) -> list[float]:
    try:
        values = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"{name} must be a comma list of numbers, got {text!r}") from None
    if not values:
        raise ValueError(f"{name} must name at least one value, got {text!r}")
    return values


def _pairs(text: str) -> list[tuple[int, int]]:
    """``"20:25,5:10"`` -> [(20, 25), (5, 10)]: (layer, step) pairs."""
    try:
        pairs = [tuple(int(x) for x in item.split(":")) for item in text.split(",") if item.strip()]
    except ValueError:
        pairs = []
    if not pairs or any(len(p) != 2 for p in pairs):
        raise ValueError(f"--verify-at must be a comma list of LAYER:STEP pairs, got {text!r}")
    return pairs  # type: ignore[return-value]


def _scaled(profile: HeadProfile, sharpness_multiplier: float, noise: float) -> HeadProfile:
    lo, hi = profile.sharpness
    return replace(profile, sharpness=(lo * sharpness_multiplier, hi * sharpness_multiplier), noise=noise)


def candidate_config(base: GeneratorConfig, head_type: str, sharpness_multiplier: float,
                     noise: float) -> GeneratorConfig:
    """``base`` with only ``head_type`` heads, its sharpness range scaled and its noise set."""
    only = {head_type: 1.0}
    return replace(base, profiles={**base.profiles, head_type: _scaled(base.profiles[head_type],
                                                                       sharpness_multiplier, noise)},
                   mix_first_layer=only, mix_last_layer=only)


def fitted_config(base: GeneratorConfig, choice: dict[str, tuple[float, float]],
                  mix: dict[str, float]) -> GeneratorConfig:
    """``base`` with each type's (sharpness multiplier, noise) of ``choice`` and one mix for every layer."""
    profiles = {t: _scaled(p, *choice[t]) for t, p in base.profiles.items()}
    return replace(base, profiles=profiles, mix_first_layer=dict(mix), mix_last_layer=dict(mix))


def simulated_l2(mask: np.ndarray, hardware: str, kernel: str, head_dim: int, block_size: int) -> tuple[float, float]:
    """(L2 hit bytes, L2 look-up bytes) of ``kernel`` on ``hardware`` over ``mask`` (H, MB, NB) in the original
    order, K/V and Q reads as ``sim.simulate`` counts them. Module level so a process pool can run it."""
    r = sim.simulate(torch.from_numpy(mask), order=None, hardware=hardware, backend=kernel, head_dim=head_dim,
                     block_size=block_size)
    q_bytes = kernels.get(kernel).execution.with_block_size(block_size).q_block_bytes(head_dim)
    lookups = sum(h.l2_lookups for h in r.per_head) * r.kv_block_bytes + mask.shape[0] * mask.shape[1] * q_bytes
    hits = sum(h.l2_hits for h in r.per_head) * r.kv_block_bytes
    return float(hits), float(lookups)


def sample(wl: workloads.Workload, base: GeneratorConfig, sharpness: list[float], noise: list[float], *,
           replicates: int, layers: list[int], steps: list[int], seed: int, block_size: int, device: torch.device,
           hardware: str, kernel: str, pool: concurrent.futures.Executor, log=print) -> list[SampleRow]:
    """Phase 1: every method's density and simulated L2 counts on sampled heads of every (type, candidate)."""
    rng = random.Random(seed)
    draws = [(rng.choice(layers), rng.choice(steps), rng.randrange(wl.heads)) for _ in range(replicates)]
    pending = []
    for head_type, mult, nz in itertools.product(HEAD_TYPES, sharpness, noise):
        cfg = candidate_config(base, head_type, mult, nz)
        start = time.perf_counter()
        for rep, (layer, step, head) in enumerate(draws):
            for _, method, mask, _ in head_masks(wl, [head], list(METHODS), layer=layer, step=step, seed=seed,
                                                 block_size=block_size, device=device, config=cfg):
                one_head = mask.cpu().numpy()[None]  # (1, MB, NB)
                meta = (head_type, mult, nz, rep, layer, step, head, method, float(one_head.mean()))
                pending.append((meta, pool.submit(simulated_l2, one_head, hardware, kernel, wl.head_dim,
                                                  block_size)))
        log(f"  sampled {head_type:9s} sharpness x{mult:<5g} noise {nz:<5g} {replicates} heads "
            f"in {time.perf_counter() - start:6.1f} s", flush=True)
    return [SampleRow(*meta, *future.result()) for meta, future in pending]


def _simplex(parts: int, step: float) -> np.ndarray:
    """Every mix of ``parts`` non-negative shares in multiples of ``step`` summing to 1: (n, parts)."""
    units = round(1 / step)
    rows = [c for c in itertools.product(range(units + 1), repeat=parts - 1) if sum(c) <= units]
    return np.array([[*c, units - sum(c)] for c in rows], dtype=np.float64) / units


@dataclass(frozen=True)
class Fit:
    """The fitted choice: per type a candidate (sharpness multiplier, noise), a mix, and the predicted figures."""

    choice: dict[str, tuple[float, float]]
    mix: dict[str, float]
    loss: float
    predicted_density: dict[str, float]
    predicted_l2_hit_pct: dict[str, float]


def fit(rows: list[SampleRow], *, mix_step: float, restarts: int, seed: int) -> Fit:
    """Phase 2: the candidate per type and the mix closest to Table I, by alternating minimisation."""
    candidates = sorted({(r.sharpness_multiplier, r.noise) for r in rows})
    shape = (len(HEAD_TYPES), len(candidates), len(METHODS))
    density, hits, lookups, count = (np.zeros(shape) for _ in range(4))
    for r in rows:
        idx = (HEAD_TYPES.index(r.head_type), candidates.index((r.sharpness_multiplier, r.noise)),
               METHODS.index(r.method))
        density[idx] += r.density
        hits[idx] += r.l2_hit_bytes
        lookups[idx] += r.l2_lookup_bytes
        count[idx] += 1
    if (count == 0).any():
        raise ValueError("every (head type, candidate, method) needs at least one sample")
    density, hits, lookups = density / count, hits / count, lookups / count
    target_d = np.array([100 * TABLE_I_DENSITY[m] for m in METHODS])
    target_l2 = np.array([TABLE_I_L2_HIT_PCT[m] for m in METHODS])
    mixes = _simplex(len(HEAD_TYPES), mix_step)

    def figures(w: np.ndarray, sel: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        types = np.arange(len(HEAD_TYPES))
        d = 100 * w @ density[types, sel]
        l2 = 100 * (w @ hits[types, sel]) / np.maximum(w @ lookups[types, sel], 1e-30)
        return d, l2

    def loss(w: np.ndarray, sel: np.ndarray) -> np.ndarray:
        d, l2 = figures(w, sel)
        return (((d - target_d) / DENSITY_TOLERANCE_PTS) ** 2).sum(-1) + \
            (((l2 - target_l2) / L2_TOLERANCE_PTS) ** 2).sum(-1)

    rng = np.random.default_rng(seed)
    best: tuple[float, np.ndarray, np.ndarray] | None = None
    for _ in range(restarts):
        sel = rng.integers(len(candidates), size=len(HEAD_TYPES))
        w = mixes[rng.integers(len(mixes))]
        for _ in range(50):
            w = mixes[int(np.argmin(loss(mixes, sel)))]
            new = sel.copy()
            for t in range(len(HEAD_TYPES)):
                trials = np.repeat(new[None], len(candidates), 0)
                trials[:, t] = np.arange(len(candidates))
                new[t] = int(np.argmin([loss(w[None], s)[0] for s in trials]))
            if (new == sel).all():
                break
            sel = new
        value = float(loss(w[None], sel)[0])
        if best is None or value < best[0]:
            best = (value, w, sel)
    value, w, sel = best  # type: ignore[misc]
    d, l2 = figures(w[None], sel)
    return Fit(choice={t: candidates[int(sel[i])] for i, t in enumerate(HEAD_TYPES)},
               mix={t: round(float(w[i]), 6) for i, t in enumerate(HEAD_TYPES)}, loss=value,
               predicted_density={m: float(d[0, i]) / 100 for i, m in enumerate(METHODS)},
               predicted_l2_hit_pct={m: float(l2[0, i]) for i, m in enumerate(METHODS)})


def verify(wl: workloads.Workload, cfg: GeneratorConfig, at: list[tuple[int, int]], *, seed: int, block_size: int,
           device: torch.device, hardware: str, kernel: str, random_density: float,
           pool: concurrent.futures.Executor, log=print) -> list[VerifyRow]:
    """Phase 3: every method over whole layers of the fitted generator, and the iid random control."""
    out = []
    for layer, step in at:
        start = time.perf_counter()
        dens: dict[str, list[float]] = {m: [] for m in METHODS}
        futures: dict[str, list] = {m: [] for m in METHODS}
        for _, method, mask, _ in head_masks(wl, None, list(METHODS), layer=layer, step=step, seed=seed,
                                             block_size=block_size, device=device, config=cfg):
            one_head = mask.cpu().numpy()[None]  # (1, MB, NB)
            dens[method].append(float(one_head.mean()))
            futures[method].append(pool.submit(simulated_l2, one_head, hardware, kernel, wl.head_dim, block_size))
        for method in METHODS:
            counts = np.array([f.result() for f in futures[method]])
            out.append(VerifyRow(layer, step, method, wl.heads, float(np.mean(dens[method])),
                                 TABLE_I_DENSITY[method], 100 * counts[:, 0].sum() / counts[:, 1].sum(),
                                 TABLE_I_L2_HIT_PCT[method]))
        log(f"  verified layer {layer} step {step}: {wl.heads} heads in {time.perf_counter() - start:6.1f} s",
            flush=True)
    nb = wl.num_blocks(block_size)
    rand = synthetic.random_mask(wl.heads, nb, nb, random_density, seed=seed).numpy()
    hits, lookups = simulated_l2(rand, hardware, kernel, wl.head_dim, block_size)
    out.append(VerifyRow(-1, -1, "random", wl.heads, float(rand.mean()), random_density, 100 * hits / lookups,
                         TABLE_I_L2_HIT_PCT["random"]))
    return out


def _residuals(rows: list[VerifyRow]) -> dict[str, dict[str, float]]:
    """Per method, the mean over verified layers of density and L2 hit, and their distance to the targets (pts)."""
    out = {}
    for method in [*METHODS, "random"]:
        mine = [r for r in rows if r.method == method]
        density = float(np.mean([r.density for r in mine]))
        l2 = float(np.mean([r.l2_hit_pct for r in mine]))
        out[method] = {"density_pct": round(100 * density, 2),
                       "density_error_pts": round(100 * (density - mine[0].target_density), 2),
                       "l2_hit_pct": round(l2, 2), "l2_error_pts": round(l2 - mine[0].target_l2_hit_pct, 2)}
    return out


def _markdown(residuals: dict[str, dict[str, float]], fitted: Fit, command: str) -> str:
    lines = [f"`{command}`", "", "| method | density | Table I | error (pts, goal +-3) | L2 hit (sim) | Table I | "
             "error (pts, goal +-5) |", "|---|---|---|---|---|---|---|"]
    for method, r in residuals.items():
        target_d = TABLE_I_DENSITY.get(method)
        ok_d = "" if method == "random" else (" ok" if abs(r["density_error_pts"]) <= DENSITY_TOLERANCE_PTS
                                               else " **miss**")
        ok_l = " ok" if abs(r["l2_error_pts"]) <= L2_TOLERANCE_PTS else " **miss**"
        lines.append(f"| {method} | {r['density_pct']:.1f}% | "
                     f"{f'{100 * target_d:.1f}%' if target_d else 'set'} | {r['density_error_pts']:+.1f}{ok_d} | "
                     f"{r['l2_hit_pct']:.1f}% | {TABLE_I_L2_HIT_PCT[method]:.1f}% | {r['l2_error_pts']:+.1f}{ok_l} |")
    lines += ["", "Fitted head-type mix (every layer) and per-type (sharpness multiplier, noise): " +
              ", ".join(f"{t} {fitted.mix[t]:.2f} {fitted.choice[t]}" for t in HEAD_TYPES)]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = Parser("calibrate-workload", __doc__)
    parser.add_argument("--out", default="wavealign-runs/calibration", help="output folder")
    add_workload_arguments(parser)
    parser.add_argument("--sharpness", default="0.5,0.7,1,1.4,2,2.8", help="candidate sharpness multipliers")
    parser.add_argument("--noise", default="0.1,0.35", help="candidate noise energies")
    parser.add_argument("--replicates", type=int, default=2, help="sampled heads per (type, candidate)")
    parser.add_argument("--layers", default="5,20,35", help="layers the sampled heads are drawn from")
    parser.add_argument("--steps", default="10,25,40", help="denoising steps the sampled heads are drawn from")
    parser.add_argument("--verify-at", default="20:25,5:10,35:40", help="LAYER:STEP pairs verified whole")
    parser.add_argument("--mix-step", type=float, default=0.05, help="grid step of the head-type mix")
    parser.add_argument("--restarts", type=int, default=64)
    parser.add_argument("--hardware", default="h100", help="the simulated GPU of Table I's L2 hit rates")
    parser.add_argument("--kernel", default="fa4", help="the simulated kernel of Table I")
    parser.add_argument("--random-density", type=float, default=0.25, help="density of the iid random control")
    parser.add_argument("--workers", type=int, default=None, help="simulator processes (default: CPUs, max 8)")
    parser.add_argument("--install", action="store_true", help="make the fit the default generator")
    args = parser.parse_args(argv)

    wl = workloads.preset(args.model, args.frames, args.resolution)
    sharpness = _csv_floats(args.sharpness, "--sharpness")
    noise = _csv_floats(args.noise, "--noise")
    layers = [int(x) for x in _csv_floats(args.layers, "--layers")]
    steps = [int(x) for x in _csv_floats(args.steps, "--steps")]
    at = _pairs(args.verify_at)
    base = GeneratorConfig()
    for name, values, ok in (("--sharpness", sharpness, lambda x: x > 0), ("--noise", noise, lambda x: 0 <= x <= 1),
                             ("--layers", [*layers, *(p[0] for p in at)], lambda x: 0 <= x < wl.layers),
                             ("--steps", [*steps, *(p[1] for p in at)], lambda x: 0 <= x < base.num_steps)):
        bad = [x for x in values if not ok(x)]
        if bad:
            raise ValueError(f"{name} has {bad}; expected sharpness > 0, noise in [0, 1], layers in "
                             f"[0, {wl.layers}), steps in [0, {base.num_steps})")
    if args.replicates < 1 or args.restarts < 1 or not 0 < args.mix_step <= 0.5:
        raise ValueError(f"--replicates and --restarts must be >= 1 and --mix-step in (0, 0.5], got "
                         f"{args.replicates}, {args.restarts}, {args.mix_step}")
    device = device_for(args.device)
    kernels.get(args.kernel)  # an unknown kernel fails before any work
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    command = "wavealign calibrate-workload " + shlex.join(argv)
    workers = args.workers or min(8, multiprocessing.cpu_count())
    print(f"{args.model} {wl.seq_len} tokens, {wl.heads} heads on {device}; {len(HEAD_TYPES)} types x "
          f"{len(sharpness) * len(noise)} candidates x {args.replicates} heads; {workers} simulator processes",
          flush=True)
    started = time.perf_counter()
    ctx = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
        rows = sample(wl, base, sharpness, noise, replicates=args.replicates, layers=layers, steps=steps,
                      seed=args.seed, block_size=args.block_size, device=device, hardware=args.hardware,
                      kernel=args.kernel, pool=pool)
        write_csv(out / "samples.csv", SampleRow, rows)
        fitted = fit(rows, mix_step=args.mix_step, restarts=args.restarts, seed=args.seed)
        print(f"fit: loss {fitted.loss:.3f}, mix {fitted.mix}, candidates {fitted.choice}", flush=True)
        cfg = fitted_config(base, fitted.choice, fitted.mix)
        checked = verify(wl, cfg, at, seed=args.seed, block_size=args.block_size, device=device,
                         hardware=args.hardware, kernel=args.kernel, random_density=args.random_density, pool=pool)
    write_csv(out / "verify.csv", VerifyRow, checked)
    residuals = _residuals(checked)
    provenance = {"command": command, "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d"),
                  "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
                  "workload": f"{args.model} {args.frames} frames {args.resolution}, {wl.seq_len} tokens",
                  "targets": "WaveAlign paper Table I (densities; original-order L2 hit, H100, FA4)",
                  "simulated": f"{args.kernel} on {args.hardware}", "verified_at": [list(p) for p in at],
                  "fit_loss": round(fitted.loss, 4), "residuals": residuals,
                  "wall_s": round(time.perf_counter() - started, 1)}
    (out / "fit.json").write_text(json.dumps({**asdict(fitted), "provenance": provenance}, indent=1))
    document = {"provenance": provenance, "generator": cfg.to_dict()}
    text = "# The synthetic workload generator fitted by `wavealign calibrate-workload` (provenance below).\n" + \
        yaml.safe_dump(document, sort_keys=False, width=120)
    (out / "calibrated.yaml").write_text(text)
    if args.install:
        CALIBRATED_PATH.write_text(text)
        print(f"installed as the default generator: {CALIBRATED_PATH}")
    table = _markdown(residuals, fitted, command)
    (out / "summary.md").write_text(table + "\n")
    print()
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
