"""The exact comparison orders (``random``, ``longest-first``, ``curve``): each is a permutation per head, follows its
rule, leaves every output bitwise as the original order gives it, and a sweep grid can name it."""

import itertools

import pytest
import torch

from orchestrator import config, grid
from wavealign import kernels, launch_order, masks, reorderers, variants
from wavealign.attention import AttentionStep
from wavealign.masks import synthetic
from wavealign.records import Cell, LaunchGeometry
from wavealign.reorderers.curve import block_positions, curve_order, hilbert_index

STATIC = ("random", "longest-first", "curve")
LATENT = (3, 5, 7)  # 105 tokens: in blocks of 16, seven blocks, the last one of 9 tokens
BLOCK = 16
MB = -(-LATENT[0] * LATENT[1] * LATENT[2] // BLOCK)


def plan(mask: torch.Tensor, name: str, stages: str = "spatial", seed: int = 0) -> launch_order.RowOrder:
    """``name``'s order of ``mask``, the curve given the latent its MB blocks cut."""
    params = {"latent": LATENT, "block_size": BLOCK} if name == "curve" else {}
    return launch_order.plan(mask, wave_size=3, stages=stages, seed=seed, reorderer=name, **params)


@pytest.mark.parametrize("name", STATIC)
def test_each_order_is_registered_with_a_reference_and_a_label(name):
    entry = reorderers.get(name)
    assert entry.reference and entry.label != name and entry.color


@pytest.mark.parametrize("name", STATIC)
@pytest.mark.parametrize("stages", ["spatial", "both"])
@pytest.mark.parametrize("density", [0.0, 0.4, 1.0])
def test_each_order_is_a_permutation_of_every_head_s_rows(name, stages, density):
    mask = synthetic.random_mask(3, MB, 9, density, seed=1) if 0 < density < 1 else torch.full((3, MB, 9),
                                                                                               density > 0)
    order = plan(mask, name, stages)
    assert order.reorderer == name and order.perm.shape == (3, MB)
    assert torch.equal(order.perm.sort(-1).values, torch.arange(MB).expand(3, MB))


def test_random_is_reproducible_from_its_seed_and_differs_between_seeds_and_heads():
    mask = synthetic.random_mask(2, 64, 8, 0.5, seed=0)
    first, again, other = (plan(mask, "random", seed=s).perm for s in (7, 7, 8))
    assert torch.equal(first, again)
    assert not torch.equal(first, other)
    assert not torch.equal(first[0], first[1])


@pytest.mark.parametrize("name", ["random", "curve"])
def test_a_kept_static_order_is_handed_out_as_a_copy(name):
    mask = torch.ones(2, MB, 4, dtype=torch.bool)
    first = plan(mask, name).perm.clone()
    plan(mask, name).perm.zero_()
    assert torch.equal(plan(mask, name).perm, first)


def test_random_ignores_the_mask():
    a, b = synthetic.random_mask(2, 40, 8, 0.2, seed=0), synthetic.random_mask(2, 40, 8, 0.8, seed=1)
    assert torch.equal(plan(a, "random", seed=3).perm, plan(b, "random", seed=3).perm)


def test_longest_first_sorts_the_whole_head_by_descending_nnz_keeping_ties_in_order():
    mask = synthetic.random_mask(2, 50, 6, 0.5, seed=4)  # six K/V blocks: many rows tie
    perm = plan(mask, "longest-first").perm
    nnz = torch.gather(mask.sum(-1), -1, perm)
    assert bool((nnz[:, 1:] <= nnz[:, :-1]).all())
    tie = nnz[:, 1:] == nnz[:, :-1]
    assert bool((perm[:, 1:] > perm[:, :-1])[tie].all())


@pytest.mark.parametrize("bits", [1, 2, 3])
def test_the_hilbert_index_is_a_bijection_whose_consecutive_cells_are_neighbours(bits):
    side = 1 << bits
    cells = torch.tensor(list(itertools.product(range(side), repeat=3)))
    index = hilbert_index(cells, bits)
    assert torch.equal(index.sort().values, torch.arange(side**3))
    walk = cells[index.argsort()]
    assert torch.equal((walk[1:] - walk[:-1]).abs().sum(-1), torch.ones(side**3 - 1, dtype=torch.long))
    assert walk[0].tolist() == [0, 0, 0]


def test_a_block_s_position_is_twice_the_mean_of_its_tokens_the_ragged_last_one_included():
    t, h, w = LATENT
    tokens = torch.tensor([(i // (h * w), i // w % h, i % w) for i in range(t * h * w)], dtype=torch.float64)
    expected = torch.stack([tokens[b * BLOCK:(b + 1) * BLOCK].mean(0) for b in range(MB)])
    assert torch.equal(block_positions(LATENT, BLOCK), torch.floor(2 * expected + 1e-9).long())


def test_curve_orders_blocks_by_the_hilbert_index_of_their_position_on_every_head():
    positions = block_positions(LATENT, BLOCK)
    bits = max((2 * extent - 1).bit_length() for extent in LATENT)
    keys = hilbert_index(positions, bits)
    perm = plan(torch.ones(2, MB, 4, dtype=torch.bool), "curve").perm
    assert bool((keys[perm][:, 1:] > keys[perm][:, :-1]).all())
    assert torch.equal(perm[0], perm[1])


def test_curve_refuses_a_missing_latent_naming_it():
    with pytest.raises(ValueError, match=r"reorderer 'curve' needs latent=\(T, H, W\)"):
        launch_order.plan(torch.ones(1, MB, 4, dtype=torch.bool), reorderer="curve", stages="spatial")


def test_curve_refuses_a_latent_that_cuts_another_number_of_blocks():
    with pytest.raises(ValueError, match=r"latent=\(3, 5, 7\).*makes 7 query blocks, but the mask has MB=8"):
        launch_order.plan(torch.ones(1, 8, 4, dtype=torch.bool), reorderer="curve", stages="spatial", latent=LATENT,
                     block_size=BLOCK)


@pytest.mark.parametrize("latent", [(3, 5), (3, 0, 7), (3, 5.0, 7), "357", 7])
def test_curve_refuses_a_latent_that_is_not_three_positive_integers(latent):
    with pytest.raises(ValueError, match=r"latent(\[\d\])? must be"):
        reorderers.get("curve").resolve({"latent": latent})


@pytest.mark.parametrize("name", STATIC)
@pytest.mark.parametrize("stages", ["spatial", "both"])
def test_outputs_in_every_order_equal_the_original_order_s_bitwise_on_a_ragged_length(name, stages):
    gen = torch.Generator().manual_seed(0)
    n = LATENT[0] * LATENT[1] * LATENT[2]
    mask = torch.rand(2, MB, MB, generator=gen) < 0.5
    mask[..., 0] = True  # every row keeps a block, so every output row is defined
    q, k, v = (torch.randn(1, 2, n, 16, generator=gen) for _ in range(3))
    order = plan(mask, name, stages)
    ref = kernels.get("reference")
    permuted = ref(launch_order.permute_rows(q, order, BLOCK), k, v, launch_order.permute_mask(mask, order),
                   block_size=BLOCK)
    plain = ref(q, k, v, mask, block_size=BLOCK)
    assert torch.equal(launch_order.restore_rows(permuted, order, BLOCK, seq_len=n), plain)
    assert torch.equal(ref(q, k, v, mask, order=order, block_size=BLOCK), plain)


def step(reorderer: str, latent: tuple[int, int, int] | None, token_ordered: bool = False) -> AttentionStep:
    return AttentionStep(backend="reference", variant=variants.get("spatial"),
                         geometry=LaunchGeometry(profile_hardware=None, block_size=BLOCK, wave_size=3),
                         reorderer=reorderer, latent=latent, token_ordered=token_ordered)


def test_the_step_fills_the_curve_s_latent_and_block_size():
    order = step("curve", LATENT).plan_order(torch.ones(2, MB, 4, dtype=torch.bool), "spatial")
    assert torch.equal(order.perm, curve_order(LATENT, BLOCK).expand(2, MB))


def test_a_step_without_a_latent_refuses_the_curve():
    with pytest.raises(ValueError, match="needs latent"):
        step("curve", None).plan_order(torch.ones(2, MB, 4, dtype=torch.bool), "spatial")


@pytest.mark.parametrize("stages", ["spatial", "both"])
def test_the_curve_refuses_a_mask_in_its_method_s_own_token_order(stages):
    with pytest.raises(ValueError, match="reorderer 'curve' orders query blocks by their frame-major latent position"):
        step("curve", LATENT, token_ordered=True).plan_order(torch.ones(2, MB, 4, dtype=torch.bool), stages)


def test_orders_blind_to_position_run_on_a_token_ordered_mask():
    mask = synthetic.random_mask(2, MB, 4, 0.5, seed=0)
    for name in ("random", "longest-first"):
        assert step(name, LATENT, token_ordered=True).plan_order(mask, "both").perm.shape == (2, MB)


@pytest.mark.parametrize("method", masks.available())
def test_a_cell_s_step_knows_whether_its_method_builds_in_its_own_token_order(method):
    cell = Cell.from_flat(dict(cell_id="c", group_id="g", hardware="cpu", profile_hardware="h200", backend="reference",
                               method=method, variant="spatial", stages="spatial", skip="force", workload="w",
                               seq_len_tokens=1560, num_heads=2, head_dim=128, block_size=128, wave_size=132))
    assert AttentionStep.of(cell.attention, cell.inputs).token_ordered == (masks.get(method).token_order is not None)


def test_a_reorderer_that_declares_no_latent_is_not_handed_one():
    mask = synthetic.random_mask(2, MB, 4, 0.5, seed=0)
    assert torch.equal(step("longest-first", LATENT).plan_order(mask, "spatial").perm, plan(mask, "longest-first").perm)


def test_a_grid_names_the_comparison_orders_and_their_cells_know_the_latent():
    cfg = config.load(["~sweep", "grid.hardware=[cpu]", "grid.backend=[reference]", "grid.method=[planted]",
                       "grid.workload=[wan1.3b-480p-2h]", "grid.seq_k=[2]", "grid.variant=[original,spatial,wavealign]",
                       "grid.reorderer=[random,longest-first,curve]"])
    cells = grid.expand(cfg).cells
    orders = {(c.attention.stages, c.attention.reorderer) for c in cells}
    assert orders == {("none", "identity")} | {(s, r) for s in ("spatial", "both") for r in STATIC}
    (curve, *_) = [c for c in cells if c.attention.reorderer == "curve"]
    assert AttentionStep.of(curve.attention, curve.inputs).latent == (1, 30, 52)  # one latent frame of Wan2.1 at 480p


@pytest.mark.parametrize("name", STATIC)
def test_table2_names_each_order_alone_and_with_stage2(name):
    from analysis.tables import order_label

    label = reorderers.get(name).label
    assert order_label("spatial", name) == label != name
    assert order_label("both", name) == f"{label}+S2"


@pytest.mark.gpu
@pytest.mark.parametrize("name", STATIC)
@pytest.mark.parametrize("stages", ["spatial", "both"])
def test_each_order_on_the_gpu_is_the_cpu_s_and_follows_a_new_mask(name, stages):
    # longest-first plans as a CUDA graph replay: a second mask of the same shape must give its own order
    for seed in (0, 1):
        mask = synthetic.random_mask(3, MB, 9, 0.4, seed=seed)
        on_gpu = plan(mask.cuda(), name, stages)
        assert torch.equal(on_gpu.perm.cpu(), plan(mask, name, stages).perm)


def test_a_grid_filters_curve_on_a_token_ordered_method_and_says_why():
    """VSA's rows are cubes of its own token order: no latent position to order by, so the cell is filtered (counted
    under its reason), never run to fail."""
    cfg = config.load(["grid.hardware=[cpu]", "grid.backend=[reference]", "grid.workload=[wan1.3b-480p-2h]",
                       "grid.seq_k=[4]", "grid.method=[vsa,radial]", "grid.variant=[original,spatial]",
                       "grid.reorderer=[curve,random]", "grid.measure=[timed]", "extra_grids={}"])
    config.validate(cfg)
    expanded = grid.expand(cfg)
    runs = {(c.inputs.method, c.attention.variant, c.attention.reorderer) for c in expanded.cells}
    assert ("vsa", "spatial", "curve") not in runs and ("radial", "spatial", "curve") in runs
    assert ("vsa", "spatial", "random") in runs
    assert [count for reason, count in expanded.filtered.items() if "'curve'" in reason and "vsa" in reason] == [1]


def test_a_reorderer_registered_by_a_plugin_is_named_and_coloured_by_its_entry(monkeypatch):
    """Adding a reorderer (a plugin's ``register``) gives Table II and the figures its label and colour, from its
    entry alone; one that gives neither is named by its name, in a colour fixed by that name."""
    from analysis import figures, plotting, tables

    identity = reorderers.get("identity").group
    monkeypatch.setattr(reorderers.REGISTRY, "_entries", dict(reorderers.REGISTRY._entries))
    reorderers.register("by-plugin", identity, {}, "a test's reorderer", reference="-", label="Plugin", color="navy")
    reorderers.register("bare", identity, {}, "a test's reorderer without a label", reference="-")
    assert tables.order_label("both", "by-plugin") == "Plugin+S2"
    assert figures.table2_reorderers.technique_color("Plugin+S2") == "navy"
    assert tables.order_label("spatial", "bare") == "bare"
    assert figures.table2_reorderers.technique_color("bare") == plotting.variant_color("bare")
