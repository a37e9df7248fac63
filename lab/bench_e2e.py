"""Time a diffusers Wan transformer's forward: dense, and block-sparse in the original order, reordered, adaptive
and in the order chooser's pick.

A workload's calibrated method mask is replayed in every layer, and the method itself runs on every layer's live Q/K;
a static method (``radial``) runs itself.

Random weights give near-uniform attention, so masks built from the live Q/K would be near-dense; the kernel runs
instead the mask the calibrated synthetic workload gives (``method=file``), the same in every self-attention layer.
What building the method's mask costs a live pipeline is still paid inside the timed forward: with ``--estimator
live`` (the default) every layer runs the method on its own Q/K (SpargeAttn and MInference with their configs
tuned by a first, untimed forward, as a pipeline's first step tunes them) and discards the mask. A method with a token
order of its own (``vsa``: 3D cubes) pays it live too: its order, Q/K/V gathered into it, its mask, and one scatter of
Q's size standing in for the output's way back; its calibrated mask is the cube-order one, and the kernel's time
depends on the mask alone. A static method's mask is the same for every Q/K, so it runs in every layer as a user would
run it (``BlockSparseAttention`` plans it on the first call of the shape and reuses the plan), with no estimator. The
results say which. The transformer is the Wan2.1-14B configuration (diffusers' ``WanTransformer3DModel()`` defaults)
unless ``--config 1.3b``, with random bf16 weights: no download.

``auto`` (``reorder="auto"``) runs the order chooser once per layer and shape and keeps its pick across the
denoising steps, as a pipeline would: its warm-up is a forward of the whole model, whose layers run the original order
while the chooser makes every layer's choice on its own thread; the bench then waits for the last pick to land (how
long after the warm-up forward: ``choices_landed_ms``, 0 where all landed during it), a second untimed forward applies
them (their first plans), the timed forwards run the kept picks, and what choosing cost the host is reported beside
them (``choose_ms``), paid once per video shape.

Beside the forwards, the backend's kernel alone is timed on the replayed mask in the original order, WaveAlign's and
the chooser's pick; with the kernel's share of the original-order forward a, and an order's kernel speedup s, Amdahl's
bound 1 / (1 - a + a / s) is what that order's forward could reach if nothing around the kernel cost anything.
"""

from __future__ import annotations

import contextlib
import functools
import json
import platform
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from common import argument_parser, run_study

from jobs.arguments import check_at_least, check_device, choices_list
from wavealign.records import InputSpec

if TYPE_CHECKING:  # torch, the library and diffusers: each function imports what it runs, once arguments parse
    import torch


VARIANTS = ("dense", "never", "always", "adaptive", "auto")
ESTIMATORS = ("live", "none")
# diffusers' WanTransformer3DModel arguments of the 1.3B model (its defaults are the 14B's)
CONFIGS = {"14b": {}, "1.3b": {"num_attention_heads": 12, "ffn_dim": 8960, "num_layers": 30},
           # for tests on a CPU: two layers of two heads
           "tiny": {"num_attention_heads": 2, "attention_head_dim": 32, "ffn_dim": 64, "num_layers": 2,
                    "text_dim": 32, "freq_dim": 32}}
MODELS = {"14b": "wan2.1-14b", "1.3b": "wan2.1-1.3b"}  # their workload presets (wavealign.workloads)
LATENT_CHANNELS, TEXT_TOKENS = 16, 512


@dataclass(frozen=True)
class StepTiming:
    """One variant's forwards: medians over the timed forwards (CUDA events), and what its attention did."""

    variant: str
    forward_ms: float
    self_attention_ms: float  # the attn1 modules (projections, norms, RoPE, estimator, plan, attention), all layers
    estimator_ms: float  # the method run on the live Q/K, mask discarded, summed over layers (0 without)
    mask_ms: float  # replaying the mask file (a static method: building its mask), summed over layers (0 for dense)
    reorder_ms: float  # planning the orders, summed over layers
    reordered_layers: int
    planned_layers: int  # calls that built and planned their mask (a static method: the first of its shape only)
    forwards: int
    choose_ms: float = 0.0  # auto: the order chooser on its thread, summed over layers, once per shape
    # auto: the warm-up forward, each layer in the original order until its pick landed
    warmup_forward_ms: float = float("nan")
    choices_landed_ms: float = 0.0  # auto: how long after the warm-up forward the last pick landed (0: during it)
    candidates: dict[str, int] = field(default_factory=dict)  # the orders the timed forward ran: layers each


@dataclass(frozen=True)
class KernelTiming:
    """The backend alone on the replayed mask, one layer's call: original order, reordered (both stages) and the
    order chooser's pick (``chosen`` names it)."""

    original_ms: float
    original_ms_iqr: float
    reordered_ms: float
    reordered_ms_iqr: float
    chosen: str
    chosen_ms: float
    chosen_ms_iqr: float

    @property
    def speedup(self) -> float:
        return self.original_ms / self.reordered_ms

    def speedup_of(self, variant: str) -> float | None:
        """The kernel speedup over the original of the order ``variant`` runs (``adaptive``: reordered, where its
        policy lets it; None for the original order and dense)."""
        by_variant = {"always": self.speedup, "adaptive": self.speedup, "auto": self.original_ms / self.chosen_ms}
        return by_variant.get(variant)


def amdahl_bound(kernel: KernelTiming, layers: int, original_forward_ms: float,
                 speedup: float) -> tuple[float, float]:
    """(the kernel's share a of the original-order forward, the forward speedup 1 / (1 - a + a / s) a kernel
    ``speedup`` s gives when nothing else changes)."""
    share = layers * kernel.original_ms / original_forward_ms
    return share, 1.0 / (1.0 - share + share / speedup)


def random_transformer(config: str, device: str, layers: int | None = None) -> torch.nn.Module:
    """A Wan transformer of ``config`` (its first ``layers`` blocks when given), built on ``device`` with diffusers'
    own random initialisation, in bf16."""
    import torch
    from diffusers import WanTransformer3DModel

    with torch.device(device):
        model = WanTransformer3DModel(**{**CONFIGS[config], **({"num_layers": layers} if layers else {})})
    return model.to(torch.bfloat16).eval()


@dataclass(frozen=True)
class KernelMask:
    """What the installed attention runs in every layer: ``method`` with ``params`` (``latent`` its video, where it
    reads one); ``reuse_plans`` whether a static mask's plan is kept across calls (off for a replayed file, which stands
    in for a method built and planned on every call)."""

    method: str
    params: dict[str, Any]
    latent: tuple[int, int, int] | None
    reuse_plans: bool


def calibrated_mask(config: str, frames: int, resolution: str, method: str, path: Path, device: str) -> float:
    """Build ``method``'s mask on the calibrated synthetic workload of the model and video shape (all heads, the
    model's mid-depth layer, mid-denoising) the way a sweep cell on that workload builds it
    (``inputs.build``), save it at ``path``, and return its density."""
    import torch

    from wavealign import inputs, workloads
    from wavealign.masks import npz

    wl = workloads.preset(MODELS[config], frames=frames, resolution=resolution)
    spec = InputSpec(workload=f"{MODELS[config]}-{resolution}", method=method, seq_len_tokens=wl.seq_len,
                     num_heads=wl.heads, head_dim=wl.head_dim, model=MODELS[config], resolution=resolution,
                     frames=frames, heads=list(range(wl.heads)), layer=wl.layers // 2, step=25,
                     generator=workloads.DEFAULT_GENERATOR)
    mask, _ = inputs.build(inputs.InputRequest(spec, 128, torch.device(device), with_qkv=False))
    npz.save(path, mask.cpu())
    return float(mask.float().mean())


class LiveEstimator:
    """``method`` run on every self-attention call's live Q/K, its mask discarded: the cost a live pipeline pays for
    its masks, inside the timed forward, while the kernel runs the replayed one. Tuned methods keep their per-layer
    configs in one store across forwards and variants. A token-ordered method (``vsa``) also pays its order, the
    gathers of Q/K/V and one scatter of Q's size, standing in for the output's way back to the original order."""

    def __init__(self, method: str, model: str, block_size: int, latent: tuple[int, int, int] | None) -> None:
        from wavealign import masks

        self.method, self.model, self.block_size, self.latent = method, model, block_size, latent
        self.store = {"tuned_config": masks.TunedConfigs(method)} if masks.get(method).tuned else {}
        self.calls_ms: list[float] = []

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer: int) -> None:
        from wavealign import masks
        from wavealign.instruments.timing import synced_clock

        start = synced_clock(q.device)
        identity = masks.identity_params(self.method, model=self.model, layer=layer, heads=list(range(q.shape[1])),
                                         latent=self.latent)
        built = masks.get(self.method).build_ordered(q, k, v, self.block_size, **identity, **self.store)
        if built.order is not None:
            built.order.scatter(built.q)
        self.calls_ms.append((synced_clock(q.device) - start) * 1e3)


@contextlib.contextmanager
def installed_variant(model: torch.nn.Module, variant: str, kernel_mask: KernelMask, backend: str, block_size: int,
                      estimator: LiveEstimator | None) -> Iterator[Any]:
    """The model with ``variant``'s self-attention installed (the stock processors for ``dense``), running
    ``kernel_mask`` in every layer, each layer's call preceded by ``estimator`` when given; the stock processors back
    on leaving."""
    from wavealign.integrations import diffusers as wa

    if variant == "dense":
        yield None
        return
    cuda = next(model.parameters()).is_cuda
    installed = wa.apply(model, method=kernel_mask.method, backend=backend, reorder=variant, block_size=block_size,
                         latent=kernel_mask.latent, reuse_static_plans=kernel_mask.reuse_plans,
                         **kernel_mask.params, **({} if cuda else {"hardware": "h200"}))
    try:
        if estimator is not None:
            def call(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer: int) -> torch.Tensor:
                estimator(q, k, v, layer)
                return installed.attention(q, k, v, layer=layer)

            make = wa.processor_class()
            model.set_attn_processor({name: make(functools.partial(call, layer=installed.layers.index(name)))
                                      if name in installed.layers else proc
                                      for name, proc in model.attn_processors.items()})
        yield installed
    finally:
        installed.remove()


def time_forwards(model: torch.nn.Module, inputs: dict[str, torch.Tensor], variant: str, kernel_mask: KernelMask,
                  backend: str, block_size: int, forwards: int, estimator: LiveEstimator | None = None,
                  warmup: torch.nn.Module | None = None) -> StepTiming:
    """Median forward time of ``variant`` over ``forwards`` forwards, CUDA events around the whole forward and
    around every self-attention module, after one forward of ``warmup`` (a one-block copy compiles every kernel of
    these shapes; None: the first of the model's own forwards is the warm-up, as it is for ``auto``, whose choices
    are the installed model's own)."""
    import torch

    cuda = inputs["hidden_states"].is_cuda
    if variant == "auto":
        warmup = None
    choose_ms, warmup_ms, landed_ms = 0.0, float("nan"), 0.0
    spans: list[tuple[torch.cuda.Event, torch.cuda.Event]] = []
    hooks = []
    if cuda:
        for name, module in model.named_modules():
            if name.endswith(".attn1"):
                hooks.append(module.register_forward_pre_hook(lambda *_: spans.append(_event_pair())))
                hooks.append(module.register_forward_hook(lambda *_: spans[-1][1].record()))
    forward_ms, attention_ms = [], []
    try:
        with torch.inference_mode(), _dense_backend(cuda, variant):
            if warmup is not None:
                with installed_variant(warmup, variant, kernel_mask, backend, block_size, estimator):
                    warmup(**inputs, return_dict=False)
            with installed_variant(model, variant, kernel_mask, backend, block_size, estimator) as installed:
                # untimed: the model's own warm-up where no copy ran one; auto's second, which applies the picks
                untimed = (warmup is None) + (variant == "auto")
                for i in range(untimed + forwards):
                    spans.clear()
                    if estimator is not None:
                        estimator.calls_ms.clear()
                    if installed is not None:
                        choose_ms += sum(c.choose_ms for c in installed.attention.calls)
                        installed.attention.calls.clear()
                    start, end = _event_pair() if cuda else (None, None)
                    model(**inputs, return_dict=False)
                    if cuda:
                        end.record()
                        torch.cuda.synchronize()
                    if cuda and i >= untimed:
                        forward_ms.append(start.elapsed_time(end))
                        attention_ms.append(sum(a.elapsed_time(b) for a, b in spans))
                    elif cuda and i == 0:
                        warmup_ms = start.elapsed_time(end)
                    if variant == "auto" and i == 0:  # the picks still being made on the chooser's thread
                        waited = time.perf_counter()
                        installed.attention.wait_for_choices()
                        landed_ms = (time.perf_counter() - waited) * 1e3
    finally:
        for hook in hooks:
            hook.remove()
    calls = installed.attention.calls if installed is not None else []
    return StepTiming(variant=variant, forward_ms=statistics.median(forward_ms) if forward_ms else float("nan"),
                      self_attention_ms=statistics.median(attention_ms) if attention_ms else float("nan"),
                      estimator_ms=sum(estimator.calls_ms) if estimator is not None else 0.0,
                      mask_ms=sum(c.mask_ms for c in calls), reorder_ms=sum(c.reorder_ms for c in calls),
                      reordered_layers=sum(c.reordered for c in calls),
                      planned_layers=sum(not c.plan_reused for c in calls), forwards=forwards,
                      choose_ms=choose_ms + sum(c.choose_ms for c in calls), warmup_forward_ms=warmup_ms,
                      choices_landed_ms=landed_ms,
                      candidates=dict(Counter(c.candidate for c in calls)))


def time_kernel(mask: torch.Tensor, tokens: int, head_dim: int, backend: str, block_size: int,
                device: str, reps: int = 3) -> KernelTiming:
    """The backend's launch on ``mask`` (H, MB, NB) alone in the original order, WaveAlign's (both stages, the
    backend's wave on this GPU) and the order chooser's pick, on random bf16 Q/K/V of one layer's shape: CUDA events,
    L2 flushed, medians."""
    import torch

    from wavealign import hardware, kernels, launch_order
    from wavealign.instruments import timing
    from wavealign.kernels import LaunchShape

    gen = torch.Generator(device=device).manual_seed(0)
    q, k, v = (torch.randn(1, mask.shape[0], tokens, head_dim, generator=gen, device=device, dtype=torch.bfloat16)
               for _ in range(3))
    shape = LaunchShape.of(q, k, block_size, v=v)
    gpu = hardware.detect().name
    order = launch_order.plan(mask, wave_size=kernels.get(backend).wave_size(gpu), stages="both")
    chosen = launch_order.choose(mask, backend=backend, hardware=gpu, head_dim=head_dim, block_size=block_size)
    timed = []
    for planned in (None, order, chosen):
        launch = kernels.get(backend).plan(mask, planned, shape)
        timed.append(timing.time_cuda(lambda launch=launch: launch.run(q, k, v), reps=reps, warmup=1))
    return KernelTiming(timed[0].median_ms, timed[0].iqr_ms, timed[1].median_ms, timed[1].iqr_ms,
                        chosen.candidate, timed[2].median_ms, timed[2].iqr_ms)


def _event_pair() -> tuple[torch.cuda.Event, torch.cuda.Event]:
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    return start, end


def _dense_backend(cuda: bool, variant: str):
    """cuDNN's fused attention for the dense forward on a GPU (what SDPA dispatches to on Hopper at these lengths
    when allowed); no change otherwise."""
    if not (cuda and variant == "dense"):
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel(SDPBackend.CUDNN_ATTENTION)


def main(argv: list[str]) -> int:
    parser = argument_parser("bench_e2e", __doc__)
    parser.add_argument("--config", default="14b", choices=sorted(CONFIGS))
    parser.add_argument("--frames", type=int, default=81)
    parser.add_argument("--resolution", default="720p", help="a resolution of the model's workload preset")
    parser.add_argument("--method", default="xattention", help="the mask method built on the calibrated workload (a "
                                                               "static one, such as radial: run in every layer)")
    parser.add_argument("--mask", type=Path, help="replay this saved mask (wavealign.masks.npz .npz) instead")
    parser.add_argument("--estimator", default="live", choices=ESTIMATORS,
                        help="live: run --method on every layer's live Q/K inside the timed forward, its mask "
                             "discarded (the kernel replays the calibrated one); none: replay only")
    parser.add_argument("--latent", help="T,H,W of the latent video (default: the workload preset's); tokens are "
                                         "T * H/2 * W/2")
    parser.add_argument("--backend", default="fa4")
    parser.add_argument("--block-size", type=int, default=128)
    parser.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated, of {VARIANTS}")
    parser.add_argument("--forwards", type=int, default=1, help="timed forwards per variant, after a warm-up "
                                                                "forward of a one-block copy of the model")
    parser.add_argument("--layers", type=int, help="build only this many transformer blocks (a cut of the model, "
                                                   "for quick checks: the embeddings then weigh more than in the "
                                                   "whole model)")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--out", type=Path, help="write the timings as JSON here")
    args = parser.parse_args(argv)
    import torch

    from wavealign import kernels, masks, workloads
    from wavealign.masks import npz

    variants = choices_list(parser, "--variants", args.variants, VARIANTS)
    if args.forwards < 1:
        parser.error(f"--forwards must be >= 1, got {args.forwards}")
    if args.layers is not None and args.layers < 1:
        parser.error(f"--layers must be >= 1, got {args.layers}")
    runnable = [m for m in masks.available() if masks.get(m).needs_qk or masks.get(m).needs_latent]
    if args.method not in runnable:
        parser.error(f"--method {args.method!r}: expected a method that builds its mask from Q/K or a static one on "
                     f"the latent video, one of {runnable}")
    static = not masks.get(args.method).needs_qk
    if static and args.mask is not None:
        parser.error(f"--mask replays a mask in place of a method built from Q/K; --method {args.method} is static "
                     "(its own mask runs in every layer): drop --mask")
    if args.config not in MODELS and (args.latent is None or (args.mask is None and not static)):
        needed = "--latent T,H,W" if static else "--mask FILE and --latent T,H,W"
        parser.error(f"--config {args.config} has no workload preset: pass {needed}")
    if args.latent:
        try:
            latent = tuple(int(x) for x in args.latent.split(","))
        except ValueError:
            latent = ()
        if len(latent) != 3 or min(latent) < 1 or latent[1] % 2 or latent[2] % 2:
            parser.error(f"--latent must be T,H,W with positive T and even H, W, got {args.latent!r}")
    else:
        wl = workloads.preset(MODELS[args.config], frames=args.frames, resolution=args.resolution)
        latent = (wl.latent_frames, 2 * wl.grid_height, 2 * wl.grid_width)
    check_at_least(parser, "--block-size", args.block_size, 1)
    check_device(parser, "--device", args.device)
    if args.backend not in kernels.names():
        parser.error(f"--backend {args.backend!r}: expected a backend that computes attention, one of "
                     f"{kernels.names()}")
    cuda = args.device.startswith("cuda")
    token_latent = (latent[0], latent[1] // 2, latent[2] // 2)  # the patch (1, 2, 2) of every config
    tokens = token_latent[0] * token_latent[1] * token_latent[2]
    blocks = -(-tokens // args.block_size)
    with tempfile.TemporaryDirectory() as tmp:
        if static:
            mask = None
        else:
            mask_path, density = args.mask, None
            if mask_path is None:
                mask_path = Path(tmp) / "mask.npz"
                density = calibrated_mask(args.config, args.frames, args.resolution, args.method, mask_path,
                                          args.device)
            mask = npz.load(mask_path)
            density = float(mask.float().mean()) if density is None else density
            if mask.shape[-2:] != (blocks, blocks):
                parser.error(f"--mask {mask_path} is {tuple(mask.shape)}; the latent {latent} has {tokens} tokens = "
                             f"{blocks} blocks of --block-size {args.block_size}, so (H, {blocks}, {blocks}) is "
                             "expected")
        model = random_transformer(args.config, args.device, args.layers)
        one_block = random_transformer(args.config, args.device, 1)
        if static:  # the same mask in every layer and every call: the kernel alone is timed on it
            mask = masks.get(args.method).for_shape(model.config.num_attention_heads, blocks, blocks, args.device,
                                                    block_size=args.block_size, latent=token_latent).cpu()
            density = float(mask.float().mean())
            kernel_mask = KernelMask(args.method, {}, token_latent, reuse_plans=True)
            described = f"{args.method}, static: planned on the first call of the shape, reused in every layer"
        else:
            kernel_mask = KernelMask("file", {"path": str(mask_path)}, token_latent, reuse_plans=False)
            described = str(args.mask) if args.mask else f"calibrated {args.method}, replayed in every layer"
        gen = torch.Generator(device=args.device).manual_seed(0)
        inputs = {
            "hidden_states": torch.randn(1, LATENT_CHANNELS, *latent, generator=gen, device=args.device,
                                         dtype=torch.bfloat16),
            "timestep": torch.tensor([500], device=args.device),
            "encoder_hidden_states": torch.randn(1, TEXT_TOKENS, model.config.text_dim, generator=gen,
                                                 device=args.device, dtype=torch.bfloat16),
        }
        estimator = LiveEstimator(args.method, MODELS.get(args.config, args.config), args.block_size, token_latent) \
            if args.estimator == "live" and not static else None
        print(f"{args.config} transformer ({model.config.num_layers} blocks), {tokens} tokens, "
              f"mask density {density:.3f} ({described}), estimator "
              f"{'live ' + args.method + ' (mask discarded)' if estimator else 'none'}, backend {args.backend}",
              flush=True)
        tuning_ms = None
        if estimator is not None and estimator.store:  # a pipeline's first step tunes every layer's heads
            sparse = next(v for v in variants if v != "dense")
            tuning_ms = time_forwards(model, inputs, sparse, kernel_mask, args.backend, args.block_size, 1,
                                      estimator, warmup=one_block).forward_ms
            print(f"  tuning forward ({sparse}, {args.method}'s configs tuned in every layer) {tuning_ms:9.1f} ms",
                  flush=True)
        rows: list[StepTiming] = []
        for variant in variants:  # each line as it is measured
            rows.append(r := time_forwards(model, inputs, variant, kernel_mask, args.backend, args.block_size,
                                           args.forwards, None if variant == "dense" else estimator,
                                           warmup=one_block))
            original = next((o.forward_ms for o in rows if o.variant == "never"), None)
            speedup = "" if original is None else f"speedup over original-order sparse {original / r.forward_ms:.3f}x"
            print(f"  {r.variant:9s} forward {r.forward_ms:9.1f} ms  self-attention {r.self_attention_ms:9.1f} ms  "
                  f"estimator {r.estimator_ms:7.1f} ms  mask {r.mask_ms:6.1f} ms  reorder {r.reorder_ms:6.1f} ms "
                  f"({r.reordered_layers} layers, {r.planned_layers} planned)  {speedup}", flush=True)
            if r.variant == "auto":
                print(f"  {'':9s} the chooser's picks {r.candidates}, chosen once per layer and shape on its thread "
                      f"in {r.choose_ms / 1e3:.1f} s (host) during the warm-up forward ({r.warmup_forward_ms:.1f} ms, "
                      f"each layer original until its pick landed), the last {r.choices_landed_ms / 1e3:.1f} s after "
                      "it; kept across the timed forwards", flush=True)
        kernel = time_kernel(mask.to(args.device), tokens, model.config.attention_head_dim, args.backend,
                             args.block_size, args.device) if cuda else None
    bounds = {}
    never = next((r for r in rows if r.variant == "never"), None)
    if kernel is not None and never is not None:
        print(f"  kernel alone: original {kernel.original_ms:.1f} ms, reordered {kernel.reordered_ms:.1f} ms "
              f"({kernel.speedup:.3f}x), the chooser's pick ({kernel.chosen}) {kernel.chosen_ms:.1f} ms "
              f"({kernel.speedup_of('auto'):.3f}x)")
        for r in rows:
            speedup = kernel.speedup_of(r.variant)
            if speedup is not None:
                share, bound = amdahl_bound(kernel, model.config.num_layers, never.forward_ms, speedup)
                measured = never.forward_ms / r.forward_ms
                bounds[r.variant] = {"speedup": measured, "attention_share": share, "amdahl_bound": bound,
                                     "of_bound": measured / bound}
                print(f"  {r.variant}: {measured:.3f}x measured = {measured / bound:.1%} of the bound")
    record = {"config": args.config, "layers": model.config.num_layers, "tokens": tokens, "latent": latent,
              "method": None if args.mask else args.method, "mask": described, "density": density,
              "estimator": f"{args.method}, live, mask discarded" if estimator else None,
              "tuning_forward_ms": tuning_ms, "backend": args.backend, "rows": [asdict(r) for r in rows],
              "kernel": None if kernel is None else {**asdict(kernel), "speedup": kernel.speedup,
                                                         "chosen_speedup": kernel.speedup_of("auto")},
              "bounds": bounds, "torch": torch.__version__, "host": platform.node(),
              "gpu": torch.cuda.get_device_name() if cuda else None}
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(record, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(run_study("bench_e2e", main))
