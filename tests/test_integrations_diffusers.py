"""WaveAlign in a real (tiny, random-weight) diffusers Wan transformer, on the CPU with the reference kernel."""

import re

import pytest
import torch

diffusers = pytest.importorskip("diffusers")

from wavealign.integrations import diffusers as wa  # noqa: E402
from wavealign.integrations.attention import BlockSparseAttention  # noqa: E402


def tiny_wan(head_dim: int = 16) -> torch.nn.Module:
    torch.manual_seed(0)
    return diffusers.WanTransformer3DModel(
        patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=head_dim, in_channels=4, out_channels=4,
        text_dim=32, freq_dim=32, ffn_dim=64, num_layers=2, rope_max_seq_len=64).eval()


def forward(model, frames: int = 3, size: int = 16) -> torch.Tensor:
    gen = torch.Generator().manual_seed(1)
    latents = torch.randn(1, 4, frames, size, size, generator=gen)
    text = torch.randn(1, 8, 32, generator=gen)
    with torch.no_grad():
        return model(hidden_states=latents, timestep=torch.tensor([500]), encoder_hidden_states=text,
                     return_dict=False)[0]


CPU = {"backend": "reference", "hardware": "h100", "block_size": 16}


def test_a_dense_mask_matches_the_stock_processor():
    model = tiny_wan()
    stock = forward(model)
    with wa.apply(model, method="dense", reorder="never", **CPU) as installed:
        ours = forward(model)
    assert torch.allclose(ours, stock, atol=1e-5, rtol=1e-4)
    assert len(installed.attention.calls) == 2  # one per self-attention layer; cross-attention stayed stock


def test_a_sparse_method_mask_gives_bitwise_the_same_output_with_and_without_the_reorder():
    model = tiny_wan()
    stock = forward(model)
    with wa.apply(model, method="xattention", reorder="never", threshold=0.5, stride=4, **CPU) as plain:
        original_order = forward(model)
    with wa.apply(model, method="xattention", reorder="always", threshold=0.5, stride=4, **CPU) as aligned:
        reordered = forward(model)
    assert torch.equal(original_order, reordered)
    assert all(c.reordered for c in aligned.attention.calls) and not any(c.reordered for c in plain.attention.calls)
    assert all(0 < c.density < 1 for c in aligned.attention.calls)  # really sparse: not a dense mask in disguise
    assert not torch.allclose(reordered, stock, atol=1e-3)  # and it is what the model computed


@pytest.mark.parametrize("method", ["spargeattn", "minference"])
def test_a_tuned_method_tunes_each_layer_s_heads_on_the_first_forward_only(method):
    """Each self-attention layer tunes its heads once (keyed by layer); the next forward reuses the configs, pays
    the prediction alone, and computes what the first forward computed."""
    model = tiny_wan()
    with wa.apply(model, method=method, reorder="never", **CPU) as installed:
        first = forward(model)
        second = forward(model)
    calls = installed.attention.calls
    assert [c.layer for c in calls] == [0, 1, 0, 1]
    assert [c.tuned_heads for c in calls] == [2, 2, 0, 0]
    assert len(installed.attention.tuned_configs) == 4  # 2 layers x 2 heads
    assert torch.equal(first, second)


def test_remove_restores_the_original_processors_and_output():
    model = tiny_wan()
    before = dict(model.attn_processors)
    stock = forward(model)
    installed = wa.apply(model, method="xattention", reorder="always", threshold=0.5, stride=4, **CPU)
    processors = model.attn_processors
    assert sorted(n for n, p in processors.items() if p is not before[n]) == installed.layers == [
        "blocks.0.attn1.processor", "blocks.1.attn1.processor"]
    installed.remove()
    assert all(model.attn_processors[n] is p for n, p in before.items())
    assert torch.equal(forward(model), stock)


def test_a_token_count_that_is_not_a_multiple_of_the_block_size_runs():
    model = tiny_wan()
    stock = forward(model, frames=3, size=14)  # 3 x 7 x 7 = 147 tokens, blocks of 16
    with wa.apply(model, method="dense", reorder="always", **CPU) as installed:
        ours = forward(model, frames=3, size=14)
    assert installed.attention.calls[0].tokens == 147
    assert torch.allclose(ours, stock, atol=1e-5, rtol=1e-4)


def test_the_adaptive_mode_records_the_skip_policy_s_verdict_and_follows_it():
    """At 192 tokens the profile's rule (sequences under 150K tokens) skips: no call reorders, each says why."""
    model = tiny_wan()
    with wa.apply(model, method="xattention", reorder="adaptive", threshold=0.5, stride=4, **CPU) as installed:
        forward(model)
    calls = installed.attention.calls
    assert calls and not any(c.reordered for c in calls)
    assert all(c.reason.startswith("skip: sequence 192 tokens < 150000") for c in calls), {c.reason for c in calls}


def test_auto_runs_the_original_order_while_each_layer_s_pick_is_made_unless_told_to_wait_for_it():
    """``reorder="auto"``: the first forward's layers run the original order while the chooser's thread picks, the
    next forward their picks; with ``background_choice=False`` the first forward waits for the picks and runs them.
    Every forward gives the same output."""
    outputs, calls = {}, {}
    for background in (True, False):
        model = tiny_wan()
        with wa.apply(model, method="xattention", reorder="auto", threshold=0.5, stride=4,
                      background_choice=background, **CPU) as installed:
            first = forward(model)
            installed.attention.wait_for_choices()
            outputs[background] = (first, forward(model))
        calls[background] = installed.attention.calls
    waited, pending = calls[False], calls[True]
    assert all("on its thread" in c.reason for c in pending[:2]) and sum(c.choose_ms > 0 for c in pending) == 2
    assert all(c.choose_ms > 0 for c in waited[:2]) and not any("on its thread" in c.reason for c in waited)
    assert [c.candidate for c in pending[2:]] == [c.candidate for c in waited[2:]]
    assert all(torch.equal(out, outputs[False][0]) for pair in outputs.values() for out in pair)


@pytest.mark.parametrize(("kwargs", "needle"), [
    ({"method": "xattenton"}, "unknown mask method 'xattenton'"),
    ({"method": "xattention", "treshold": 0.9}, "treshold"),
    ({"backend": "cudnn"}, "unknown backend 'cudnn'"),
    ({"backend": "sim"}, "unknown backend 'sim'"),
    ({"reorder": "sometimes"}, "reorder must be one of ['original', 'spatial', 'temporal', 'wavealign', 'adaptive', "
                               "'auto', 'always', 'never']"),
    ({"hardware": "v100"}, "v100"),
    ({"reorderer": "metis"}, "unknown reorderer 'metis'"),
])
def test_bad_arguments_are_errors_naming_them_before_any_forward(kwargs, needle):
    model = tiny_wan()
    before = dict(model.attn_processors)
    args = {**CPU, **kwargs}
    with pytest.raises(ValueError) as err:
        wa.apply(model, **args)
    assert needle in str(err.value)
    assert all(model.attn_processors[n] is p for n, p in before.items())  # nothing installed


def test_a_gpu_backend_is_refused_on_a_machine_that_cannot_run_it_before_any_forward(monkeypatch):
    """``hardware=`` names the GPU to plan for; without one here the first forward would fail, so apply does."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    model = tiny_wan()
    before = dict(model.attn_processors)
    with pytest.raises(ValueError, match="backend 'flex' cannot run in this process"):
        wa.apply(model, method="dense", backend="flex", reorder="never", hardware="h100")
    assert all(model.attn_processors[n] is p for n, p in before.items())


def test_applying_twice_is_refused_and_after_remove_it_applies_again():
    model = tiny_wan()
    with wa.apply(model, method="dense", reorder="never", **CPU), pytest.raises(ValueError, match="already has WaveA"):
        wa.apply(model, method="dense", reorder="never", **CPU)
    wa.apply(model, method="dense", reorder="never", **CPU).remove()


def test_not_a_diffusers_model_is_refused():
    with pytest.raises(ValueError, match="must be a diffusers model"):
        wa.apply(torch.nn.Linear(2, 2), **CPU)


def test_the_engine_needs_a_wave_or_a_gpu_to_take_it_from(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match="pass hardware="):
        BlockSparseAttention(method="dense", backend="reference", reorder="never")
    assert BlockSparseAttention(method="dense", backend="reference", reorder="never", wave_size=8).wave_size == 8


@pytest.mark.parametrize(("kwargs", "needle"), [
    ({"backend": "fa4", "hardware": "a40", "wave_size": 84}, "backend fa4 does not run on a40 (supports ['b200', "),
    ({"method_params": 0.9}, "method_params must be a dict of method 'xattention''s parameters, got 0.9"),
    ({"backend": "sdpa", "wave_size": 8}, "backend sdpa computes dense attention only; method xattention is sparse"),
])
def test_the_attention_module_refuses_what_no_call_could_run(kwargs, needle):
    with pytest.raises(ValueError, match=re.escape(needle)):
        BlockSparseAttention(**{"reorder": "never", **kwargs})


def test_the_attention_module_refuses_sequence_major_tensors_before_any_work():
    """(B, N, H, D) tensors passed as (B, H, N, D) would run as thousands of heads of a few tokens each."""
    attend = BlockSparseAttention(method="dense", backend="reference", reorder="never", wave_size=8)
    q = torch.randn(1, 2048, 2, 8)
    with pytest.raises(ValueError, match=re.escape("dim 1 is 2048, more heads than any model has")):
        attend(q, q, q)
    assert attend.calls == []
    out = attend(q.transpose(1, 2), q.transpose(1, 2), q.transpose(1, 2))  # the same tensors, head-major
    assert out.shape == (1, 2, 2048, 8) and len(attend.calls) == 1


def denoise(model, steps: int = 3, guidance: bool = True) -> None:
    """A denoising loop as Wan's pipeline runs it: per step, the conditional and (under guidance) the unconditional
    forward at one timestep."""
    gen = torch.Generator().manual_seed(2)
    latents = torch.randn(1, 4, 3, 16, 16, generator=gen)
    cond, uncond = torch.randn(1, 8, 32, generator=gen), torch.randn(1, 8, 32, generator=gen)
    with torch.no_grad():
        for t in torch.linspace(999, 1, steps).round():
            for text in (cond, uncond) if guidance else (cond,):
                noise = model(hidden_states=latents, timestep=t.reshape(1), encoder_hidden_states=text,
                              return_dict=False)[0]
            latents = latents - 0.1 * noise


def test_capture_writes_the_chosen_layers_and_steps_and_leaves_the_model_as_it_was(tmp_path):
    from wavealign.workloads.captured import load_captured

    model = tiny_wan()
    before = dict(model.attn_processors)
    stock = forward(model)
    with wa.capture(model, tmp_path, layers=[1], steps=[0, 2], model="tiny-wan") as recorder:
        denoise(model, steps=3)
    assert recorder.step == 2  # three timesteps, two forwards each: three steps
    assert [p.name for p in recorder.files] == ["tiny-wan-layer01-step000.safetensors",
                                                "tiny-wan-layer01-step002.safetensors"]
    captured = load_captured(recorder.files[1])
    assert (captured.layer, captured.step, captured.grid, captured.model) == (1, 2, (3, 8, 8), "tiny-wan")
    assert captured.q.shape == (1, 2, 3 * 8 * 8, 16)
    assert all(model.attn_processors[n] is p for n, p in before.items())
    assert torch.equal(forward(model), stock)


def test_captured_q_k_v_are_what_the_model_attends_with(tmp_path, monkeypatch):
    from wavealign.workloads.captured import load_captured

    model = tiny_wan()
    with wa.capture(model, tmp_path, layers=[0], steps=[0]) as recorder:
        denoise(model, steps=1, guidance=False)
    captured = load_captured(recorder.files[0])
    seen = []
    attend = BlockSparseAttention.__call__
    monkeypatch.setattr(BlockSparseAttention, "__call__", lambda self, q, k, v, layer: seen.append((q, k, v)) or attend(
        self, q, k, v, layer=layer))
    with wa.apply(model, method="dense", reorder="never", **CPU):
        denoise(model, steps=1, guidance=False)
    for got, want in zip(seen[0], (captured.q, captured.k, captured.v), strict=True):  # layer 0's call
        assert torch.equal(got, want)


@pytest.mark.parametrize(("kwargs", "needle"), [
    ({"layers": [2], "steps": [0]}, "layers must be a non-empty list of block indices in [0, 2)"),
    ({"layers": [], "steps": [0]}, "layers must be"),
    ({"layers": [0], "steps": [-1]}, "steps must be"),
    ({"layers": [0], "steps": [0], "model": ""}, "model must name"),
])
def test_bad_capture_arguments_name_themselves(tmp_path, kwargs, needle):
    with pytest.raises(ValueError) as err:
        wa.capture(tiny_wan(), tmp_path, **kwargs)
    assert needle in str(err.value)


def test_a_captured_file_is_a_sweep_workload_whose_cells_run_on_its_q_k_v(tmp_path):
    from orchestrator import config, grid
    from wavealign import pipeline

    model = tiny_wan()
    with wa.capture(model, tmp_path / "qkv", layers=[1], steps=[1], model="tiny-wan") as recorder:
        denoise(model, steps=2)
    (tmp_path / "conf" / "workload").mkdir(parents=True)
    (tmp_path / "conf" / "workload" / "mine.yaml").write_text(
        f"name: mine\ncaptured: {recorder.files[0]}\nheads: [0, 1]\n")
    cfg = config.load(["~sweep", "grid.hardware=[cpu]", "grid.backend=[reference]", "grid.method=[xattention]",
                       "grid.workload=[mine]", "grid.seq_k=[1]", "grid.variant=[original,wavealign]",
                       "+grid.method_params.xattention.threshold=0.5", "+grid.method_params.xattention.stride=4",
                       "grid.block_size=16", "grid.reps=1", "grid.warmup=0", f"conf_dirs=[{tmp_path / 'conf'}]"])
    cells = grid.expand(cfg).cells
    assert [(c.inputs.captured, c.inputs.model, c.inputs.layer, c.inputs.step, c.inputs.seq_len_tokens,
             c.inputs.num_heads, c.inputs.head_dim) for c in cells] == [
        (str(recorder.files[0]), "tiny-wan", 1, 1, 192, 2, 16)] * 2
    results = pipeline.run_group(cells)
    assert [r.status for r in results] == ["done", "done"], [r.error for r in results]
    assert 0 < results[0].density < 1 and results[1].reorder_applied


def test_a_captured_workload_is_checked_before_anything_runs(tmp_path):
    from orchestrator import config

    (tmp_path / "workload").mkdir()
    (tmp_path / "workload" / "gone.yaml").write_text(f"name: gone\ncaptured: {tmp_path / 'nothing.safetensors'}\n")
    with pytest.raises(config.ConfigError, match=r"captured=.*must be an existing safetensors file"):
        config.load(["~sweep", "grid.workload=[gone]", f"conf_dirs=[{tmp_path}]"])


@pytest.mark.parametrize(("argv", "needle"), [
    (["--layers", "a", "--steps", "0"], "--layers must be comma-separated integers"),
    (["--layers", "0", "--steps", "-1"], "--steps must be"),
    (["--layers", "0", "--steps", "60"], "--steps [60] must be below --num-steps 50"),
])
def test_the_capture_command_refuses_bad_arguments_before_loading_a_pipeline(argv, needle, capsys):
    from jobs import capture

    with pytest.raises(ValueError) as refused:
        capture.main(["--pipeline", "nowhere", "--out", "x", *argv])
    assert needle in str(refused.value)


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["triton", "flex"])
def test_on_the_gpu_in_bf16_the_reorder_is_bitwise_free_and_a_dense_mask_matches_stock(backend):
    model = tiny_wan(head_dim=64).to("cuda", torch.bfloat16)  # the triton kernel takes head dims 64 and 128

    def run() -> torch.Tensor:
        gen = torch.Generator().manual_seed(1)
        latents = torch.randn(1, 4, 4, 32, 32, generator=gen).to("cuda", torch.bfloat16)  # 4 x 16 x 16 = 1024 tokens
        text = torch.randn(1, 8, 32, generator=gen).to("cuda", torch.bfloat16)
        with torch.no_grad():
            return model(hidden_states=latents, timestep=torch.tensor([500], device="cuda"),
                         encoder_hidden_states=text, return_dict=False)[0]

    stock = run()
    gpu = {"backend": backend, "block_size": 128}  # flex tiles 128 rows at head dim 64
    with wa.apply(model, method="dense", reorder="never", **gpu):
        dense = run()
    assert torch.allclose(dense.float(), stock.float(), atol=3e-2, rtol=3e-2)
    with wa.apply(model, method="xattention", reorder="never", threshold=0.5, stride=8, **gpu):
        plain = run()
    with wa.apply(model, method="xattention", reorder="always", threshold=0.5, stride=8, **gpu) as aligned:
        reordered = run()
    assert torch.equal(plain, reordered) and all(c.reordered for c in aligned.attention.calls)


def sample(model, steps: int = 3, device: str = "cpu", dtype: torch.dtype = torch.float32,
           size: int = 12) -> torch.Tensor:
    """Wan's sampling loop, as its diffusers pipeline runs it: UniPC on flow sigmas (Wan's scheduler), classifier-free
    guidance (a conditional and an unconditional forward per step, scale 5), ``steps`` steps; the final latents."""
    from diffusers import UniPCMultistepScheduler

    scheduler = UniPCMultistepScheduler(prediction_type="flow_prediction", use_flow_sigmas=True, flow_shift=3.0,
                                        num_train_timesteps=1000)
    scheduler.set_timesteps(steps, device=device)
    gen = torch.Generator().manual_seed(3)
    latents = torch.randn(1, 4, 3, size, size, generator=gen).to(device, dtype)
    cond, uncond = (torch.randn(1, 8, 32, generator=gen).to(device, dtype) for _ in range(2))
    with torch.no_grad():
        for t in scheduler.timesteps:
            timestep = t.reshape(1).to(device)
            noise_cond, noise_uncond = (model(hidden_states=latents, timestep=timestep, encoder_hidden_states=text,
                                              return_dict=False)[0] for text in (cond, uncond))
            latents = scheduler.step(noise_uncond + 5.0 * (noise_cond - noise_uncond), t, latents,
                                     return_dict=False)[0]
    return latents


@pytest.mark.parametrize("method", ["xattention", "spargeattn"])
def test_a_whole_sampling_run_gives_bitwise_the_same_latents_with_and_without_the_reorder(method):
    """The paper's Table III argument, step after step: the reorder changes no block that is computed, so every
    step's noise prediction, and so the scheduler's latents after the last step, are the same bits."""
    # sparse masks on a random-weight model: XAttention at a low threshold, SpargeAttn tuned to a looser error bound
    # (the tuned configs are kept from the first step's calls)
    params = {"threshold": 0.5, "stride": 4} if method == "xattention" else {"l1_bound": 0.2}
    model = tiny_wan()
    stock = sample(model)
    with wa.apply(model, method=method, reorder="never", **CPU, **params) as plain:
        original_order = sample(model)
    with wa.apply(model, method=method, reorder="always", **CPU, **params) as aligned:
        reordered = sample(model)
    assert torch.equal(original_order, reordered)
    assert len(aligned.attention.calls) == 3 * 2 * 2  # 3 steps x (cond, uncond) x 2 self-attention layers
    assert all(c.reordered for c in aligned.attention.calls) and not any(c.reordered for c in plain.attention.calls)
    assert all(0 < c.density < 1 for c in aligned.attention.calls)
    assert not torch.allclose(reordered, stock, atol=1e-3)  # the sparse run computed something else than dense


@pytest.mark.gpu
def test_on_the_gpu_a_sampling_run_in_bf16_gives_bitwise_the_same_latents_with_and_without_the_reorder():
    model = tiny_wan(head_dim=64).to("cuda", torch.bfloat16)
    gpu = {"backend": "triton", "block_size": 128, "threshold": 0.5, "stride": 8}
    with wa.apply(model, method="xattention", reorder="never", **gpu):
        original_order = sample(model, device="cuda", dtype=torch.bfloat16, size=32)
    with wa.apply(model, method="xattention", reorder="always", **gpu) as aligned:
        reordered = sample(model, device="cuda", dtype=torch.bfloat16, size=32)
    assert torch.equal(original_order, reordered) and all(c.reordered for c in aligned.attention.calls)
