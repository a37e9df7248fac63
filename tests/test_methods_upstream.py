"""Differential tests (issue 12): our four mask ports against the pieces of their upstream code that run on a CPU.

Each test feeds the same small input (synthetic Wan2.1-1.3B 480p heads, hand-built heads, or seeded scores and
indices) to one upstream piece and to our matching function, and compares the masks or index sets exactly.
Where a difference listed in ``docs/methods.md`` separates them (upstream's causal masks, its zero-padded keys),
the test says which one and asserts the relation that difference leaves, e.g. equality once upstream's causal
corner is opened.

Upstream checkouts are found through environment variables; a test whose variable is unset, or whose checkout
lacks the file, is skipped:

- ``WAVEALIGN_UPSTREAM_MINFERENCE``: microsoft/MInference
- ``WAVEALIGN_UPSTREAM_XATTENTION``: mit-han-lab/x-attention
- ``WAVEALIGN_UPSTREAM_FLEXPREFILL``: bytedance/FlexPrefill
- ``WAVEALIGN_UPSTREAM_SPARGEATTN``: thu-ml/SpargeAttn

Why the upstream functions are lifted out of their files instead of imported: none of the four packages imports on
a CPU-only machine. ``minference/__init__`` loads the compiled ``minference.cuda`` and ``minference_forward.py``
allocates a CUDA tensor at import; x-attention's ``Xattention.py`` imports ``block_sparse_attn`` (a CUDA
extension); FlexPrefill's op module imports Triton, einops and flash-attn through transformers; SpargeAttn's
``core.py`` imports its compiled ``_qattn``/``_fused``. So ``lift`` parses an upstream file with ``ast``,
compiles only the named function definitions and execs them in a namespace holding ``torch``, ``math`` and
CPU stand-ins for the few Triton helpers they call. A stand-in computes what its kernel computes, in fp32
(the kernels' own fp16 rounding is not modelled); each says which kernel it replaces. Where a test edits an
upstream function (a ``"cuda"`` device string, a causal mask opened), the edit and its reason are stated at
the test. Nothing upstream is copied into this repository: the tests read the user's checkout at run time.
"""

from __future__ import annotations

import ast
import math
import os
import types
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import torch
from head_patterns import clustered_blocks_head, sink_and_band_head

from wavealign import workloads
from wavealign.masks import flexprefill, minference, spargeattn, xattention

UPSTREAM_ENV = {
    "minference": ("WAVEALIGN_UPSTREAM_MINFERENCE", "microsoft/MInference"),
    "xattention": ("WAVEALIGN_UPSTREAM_XATTENTION", "mit-han-lab/x-attention"),
    "flexprefill": ("WAVEALIGN_UPSTREAM_FLEXPREFILL", "bytedance/FlexPrefill"),
    "spargeattn": ("WAVEALIGN_UPSTREAM_SPARGEATTN", "thu-ml/SpargeAttn"),
}
# heads 0 (temporal), 1 (spatial) and 8 (semantic) of the synthetic Wan2.1-1.3B layer 0: three attention shapes
HEADS = [0, 1, 8]


# ---------------------------------------------------------------------------------------------------------------
# finding and lifting upstream code


def _unset_reason(method: str) -> str:
    var, repo = UPSTREAM_ENV[method]
    return f"{var} is not set (point it at a {repo} checkout to run this differential test)"


def needs(method: str) -> pytest.MarkDecorator:
    """Skip before any input is built when ``method``'s checkout variable is unset."""
    return pytest.mark.skipif(not os.environ.get(UPSTREAM_ENV[method][0]), reason=_unset_reason(method))


def upstream_file(method: str, relpath: str) -> Path:
    """The file ``relpath`` of ``method``'s upstream checkout, or a skip naming the variable to set."""
    var, repo = UPSTREAM_ENV[method]
    root = os.environ.get(var)
    if not root:
        pytest.skip(_unset_reason(method))
    path = Path(root) / relpath
    if not path.is_file():
        pytest.skip(f"{var}={root} has no {relpath} (expected a {repo} checkout)")
    return path


def _find_function(body: list[ast.stmt], dotted: str, path: Path) -> ast.FunctionDef:
    """The definition ``dotted`` ("outer.inner" for a nested one) in ``body``, or a skip if the file lacks it."""
    node: ast.FunctionDef | None = None
    for part in dotted.split("."):
        node = next((n for n in body if isinstance(n, ast.FunctionDef) and n.name == part), None)
        if node is None:
            pytest.skip(f"{path} defines no function {dotted!r} (upstream moved it?)")
        body = node.body
    assert node is not None
    return node


def lift(path: Path, names: Sequence[str], namespace: dict[str, Any],
         rewrite: ast.NodeTransformer | None = None) -> dict[str, Any]:
    """Exec the upstream functions ``names`` of ``path`` in ``namespace`` (their globals) and return it.

    A nested function is lifted to the top level: the variables it closed over must then be globals in
    ``namespace``. ``rewrite`` may edit the lifted definitions first; decorators are dropped.
    """
    tree = ast.parse(path.read_text(), filename=str(path))
    defs = [_find_function(tree.body, name, path) for name in names]
    for fn in defs:
        fn.decorator_list = []
    module = ast.Module(body=list(defs), type_ignores=[])
    if rewrite is not None:
        module = rewrite.visit(module)
    exec(compile(ast.fix_missing_locations(module), str(path), "exec"), namespace)
    return namespace


class _CudaStringsToCpu(ast.NodeTransformer):
    """Turn the string constant "cuda" into "cpu": upstream moves tensors with ``.to("cuda")``."""

    def visit_Constant(self, node: ast.Constant) -> ast.Constant:
        return ast.copy_location(ast.Constant("cpu"), node) if node.value == "cuda" else node


class _DropTril(ast.NodeTransformer):
    """Replace ``torch.tril(x)`` by ``x``: opens a causal mask built as a lower triangle."""

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        func = node.func
        if (isinstance(func, ast.Attribute) and func.attr == "tril" and isinstance(func.value, ast.Name)
                and func.value.id == "torch"):
            return node.args[0]
        return node


def _quiet(*_args: Any, **_kwargs: Any) -> None:
    """Stands in for ``print`` so upstream's progress lines stay out of the test log."""


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


# the one Triton helper some lifted torch code calls that is plain integer arithmetic
TRITON_CDIV = types.SimpleNamespace(cdiv=_cdiv)


def any_per_block(token_mask: torch.Tensor, block_size: int) -> torch.Tensor:
    """(N, N) token mask -> (NB, NB): a block is on if any of its tokens is."""
    n = token_mask.shape[-1]
    nb = _cdiv(n, block_size)
    padded = torch.nn.functional.pad(token_mask, (0, nb * block_size - n, 0, nb * block_size - n))
    return padded.view(nb, block_size, nb, block_size).any(3).any(1)


def mask_from_flat_indices(flat: torch.Tensor, nb: int) -> torch.Tensor:
    mask = torch.zeros(nb * nb, dtype=torch.bool)
    mask[flat.long()] = True
    return mask.view(nb, nb)


# ---------------------------------------------------------------------------------------------------------------
# inputs


@pytest.fixture(scope="module")
def wan_9f() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Heads ``HEADS`` of Wan2.1-1.3B, 9 frames at 480p (3 latent frames, 4,680 tokens), fp32, (1, 3, N, 128)."""
    return workloads.synthetic(workloads.preset("wan2.1-1.3b", 9, "480p"), heads=HEADS, seed=0)


@pytest.fixture(scope="module")
def wan_5f() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Heads ``HEADS`` of Wan2.1-1.3B, 5 frames at 480p (2 latent frames, 3,120 tokens), fp32, (1, 3, N, 128)."""
    return workloads.synthetic(workloads.preset("wan2.1-1.3b", 5, "480p"), heads=HEADS, seed=0)


# ---------------------------------------------------------------------------------------------------------------
# XAttention: xattn/src/Xattention.py (xattn_estimate, torch path) and xattn/src/utils.py (find_blocks_chunked)


def _xattention() -> dict[str, Any]:
    ns: dict[str, Any] = {"torch": torch, "math": math, "F": torch.nn.functional}
    lift(upstream_file("xattention", "xattn/src/utils.py"), ["find_blocks_chunked"], ns)
    # the torch path moves its results with .to("cuda"); on a CPU they stay where they are
    return lift(upstream_file("xattention", "xattn/src/Xattention.py"), ["xattn_estimate"], ns,
                rewrite=_CudaStringsToCpu())


def _estimate(ns: dict[str, Any], q: torch.Tensor, k: torch.Tensor, chunk_size: int) -> tuple[torch.Tensor, ...]:
    """Upstream's non-causal torch estimate as the video call runs it (no sink, no recent), (B, H, MB, NB)."""
    return ns["xattn_estimate"](q, k, block_size=128, stride=xattention.PARAMS["stride"],
                                threshold=xattention.PARAMS["threshold"], chunk_size=chunk_size,
                                select_mode="inverse", use_triton=False, causal=False)


@needs("xattention")
@pytest.mark.parametrize("threshold", [0.5, 0.9, 0.95])
def test_xattention_non_causal_selection_equals_find_blocks_chunked(threshold):
    """docs/methods.md, XAttention "Selection rule" and "First kv block": upstream's non-causal branch keeps
    blocks in descending mass while the mass before them is below threshold x the row total, then turns kv
    block 0 on without counting it; ours with its defaults (keep_first_block, no diagonal) must match."""
    ns = _xattention()
    generator = torch.Generator().manual_seed(12)
    scores = torch.rand(1, 3, 12, 20, generator=generator, dtype=torch.float64) ** 4  # skewed rows, as attention
    upstream = ns["find_blocks_chunked"](scores, 0, threshold, None, decoding=False, mode="prefill", causal=False)
    for h in range(3):
        assert torch.equal(xattention.select_blocks(scores[0, h], threshold), upstream[0, h])


@needs("xattention")
def test_xattention_block_scores_equal_the_upstream_torch_estimate(wan_9f):
    ns = _xattention()
    # 4,608 tokens (36 blocks) in chunks of 1,152: no padding anywhere, so the estimates can agree exactly
    q, k = (t[:, :, :4608] for t in wan_9f[:2])
    upstream_sums, _ = _estimate(ns, q, k, chunk_size=1152)
    for h in range(len(HEADS)):
        ours = xattention.block_scores(q[0, h], k[0, h], 128, xattention.PARAMS["stride"])
        torch.testing.assert_close(ours, upstream_sums[0, h].float(), rtol=1e-5, atol=1e-5)


@needs("xattention")
def test_xattention_mask_equals_the_upstream_torch_estimate_when_nothing_is_padded(wan_9f):
    ns = _xattention()
    q, k, v = (t[:, :, :4608] for t in wan_9f)
    _, upstream = _estimate(ns, q, k, chunk_size=1152)
    ours = xattention.build(q, k, v, 128, **xattention.PARAMS)
    assert torch.equal(ours, upstream)


@needs("xattention")
def test_xattention_upstream_mask_is_ours_with_its_zero_padded_keys_admitted(wan_9f):
    """docs/methods.md, XAttention "Padded keys": upstream pads K with zeros to its chunk size and never masks
    them in the non-causal path, so each zero key takes softmax mass and counts in the row total. Running our
    scoring on Q/K zero-padded the same way must then give upstream's mask exactly."""
    ns = _xattention()
    q, k = (t[:, :, :4608] for t in wan_9f[:2])
    # Xattention_prefill's chunk for 4,608 keys: the next power of two, 8,192 (Xattention.py:322-331), so
    # 3,584 zero keys join the softmax
    chunk, mb = 8192, 36
    _, upstream = _estimate(ns, q, k, chunk_size=chunk)
    pad = (0, 0, 0, chunk - q.shape[2])
    q_pad, k_pad = torch.nn.functional.pad(q, pad), torch.nn.functional.pad(k, pad)
    for h in range(len(HEADS)):
        scores = xattention.block_scores(q_pad[0, h], k_pad[0, h], 128, xattention.PARAMS["stride"])
        emulated = xattention.select_blocks(scores, xattention.PARAMS["threshold"])
        # rows of real query blocks only: padded query rows are zeroed upstream but uniform in our emulation
        assert torch.equal(emulated[:mb, :mb], upstream[0, h, :mb, :mb])


# ---------------------------------------------------------------------------------------------------------------
# MInference: minference/modules/minference_forward.py (search_pattern; the vertical/slash index choice nested in
# minference_prefill_kernel), minference/ops/pit_sparse_flash_attention.py (torch_build_index, make_causal_mask,
# make_block_mask), minference/ops/block_sparse_flash_attention.py (_build_block_index)

FORWARD = "minference/modules/minference_forward.py"


def _vertical_slash_indices(q: torch.Tensor, k: torch.Tensor, vertical_size: int, slash_size: int,
                            last_q_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Upstream's run-time vertical and slash index choice for one head q, k (1, 1, N, D): the key columns and
    the diagonal offsets i - j its kernel gets. The kernel call is replaced by one returning its index inputs."""
    path = upstream_file("minference", FORWARD)
    ns: dict[str, Any] = {"torch": torch, "math": math, "LAST_Q_MASK": last_q_mask,
                          "vertical_slash_sparse_attention": lambda _q, _k, _v, vertical, slash: (vertical, slash),
                          # the closure variables of minference_prefill_kernel
                          "q_len": q.shape[2], "head_dim": q.shape[3]}
    lift(path, ["sum_all_diagonal_matrix", "minference_prefill_kernel.vertical_and_slash_kernel"], ns)
    vertical, slash = ns["vertical_and_slash_kernel"](q, k, None, vertical_size, slash_size)
    return vertical.flatten(), slash.flatten()


@needs("minference")
@pytest.mark.parametrize(("vertical_size", "slash_size"), [(100, 800), (500, 700), (1000, 2000)])
def test_minference_vertical_slash_choice_equals_upstream_with_its_causal_corner_opened(wan_5f, vertical_size,
                                                                                         slash_size):
    """docs/methods.md, MInference "Mask inside the estimate" and "Slashes": upstream masks the last 64 x 64
    corner causally and scores only diagonals i - j >= 0. With the corner opened (all True, our bidirectional
    estimate) its column scores are ours, and its diagonal scores are ours for every distance >= 64; the
    distances below 64, where ours also folds in the keys ahead, are among the 100 both force. So its chosen
    columns plus its chosen diagonals mirrored must be our mask at block size 1, i.e. our index sets."""
    q, k, _ = wan_5f
    n = q.shape[2]
    opened = torch.ones(1, 1, 64, 64, dtype=torch.bool)
    token = torch.arange(n)
    p = minference.PARAMS
    for h in range(len(HEADS)):
        columns, offsets = _vertical_slash_indices(q[:, h:h + 1], k[:, h:h + 1], vertical_size, slash_size, opened)
        assert (offsets >= 0).all()
        on_diagonal = torch.zeros(2 * n - 1, dtype=torch.bool)
        on_diagonal[n - 1 + offsets] = True
        on_diagonal[n - 1 - offsets] = True
        from_upstream = on_diagonal[token[:, None] - token[None, :] + n - 1]
        from_upstream[:, columns] = True
        ours = minference.vertical_slash(q[0, h], k[0, h], 1, vertical_size, slash_size, p["last_q"], p["n_init"],
                                         p["n_local"])
        assert torch.equal(ours, from_upstream), f"head {h}"


@needs("minference")
@pytest.mark.parametrize("count", [8, 32])
def test_minference_upstream_index_builder_computes_our_blocks_on_and_below_the_diagonal(count):
    """Upstream's torch index builder (torch_build_index, the reference its CUDA builders are tested against)
    turns verticals and slashes into the key columns each 64-row block computes, causally. On and below the
    block diagonal every token pair is causal, so the 64-blocks it touches must be exactly the blocks our
    conversion (``_column_mask`` of the columns, ``_diagonal_mask`` of the mirrored distances) turns on there.
    Indices are drawn as upstream's own test draws them: ``count`` random columns and ``count`` random slash
    offsets plus the main diagonal."""
    path = upstream_file("minference", "minference/ops/pit_sparse_flash_attention.py")
    ns = lift(path, ["torch_build_index", "make_causal_mask", "make_block_mask"],
              {"torch": torch, "triton": TRITON_CDIV})
    n, bs = 3120, 64
    generator = torch.Generator().manual_seed(count)
    # the layout upstream's kernel wants: verticals ascending, slash offsets descending
    columns = torch.randperm(n, generator=generator)[:count].sort().values.to(torch.int32)
    offsets = torch.cat([torch.randperm(n - 1, generator=generator)[:count] + 1, torch.zeros(1, dtype=torch.long)])
    offsets = offsets.sort(descending=True).values.to(torch.int32)
    seqlens = torch.tensor([n], dtype=torch.int32)
    col_count, col_index = ns["torch_build_index"](seqlens, columns.view(1, 1, -1), offsets.view(1, 1, -1), bs)
    computed = ns["make_block_mask"](col_count, col_index, seqlens, ns["make_causal_mask"](seqlens, "cpu", n), "cpu",
                                     bs)[0, 0]
    ours = minference._column_mask(columns.long(), n, bs) | minference._diagonal_mask(
        minference._mirrored(offsets.long(), n), n, bs)
    assert torch.equal(any_per_block(computed, bs), ours.tril())


@needs("minference")
def test_minference_block_sparse_picks_upstreams_blocks_where_causality_leaves_the_row_free(wan_9f):
    """docs/methods.md, MInference "Block-sparse": upstream's _build_block_index takes the top-k 64-blocks of
    mean-pooled q . k among the causal ones (kv block <= query block). In every row whose bidirectional top-k
    (ours, at block size 64) already lies at or left of the diagonal the causal restriction changes nothing,
    so the two sets must be equal there; the last row is always such a row."""
    path = upstream_file("minference", "minference/ops/block_sparse_flash_attention.py")
    ns = lift(path, ["_build_block_index"], {"torch": torch})
    q, k, _ = (t[:, :, :4608] for t in wan_9f)  # _build_block_index needs whole 64-blocks (its wrapper pads)
    bs = 64
    nb = q.shape[2] // bs
    top_k = nb // 8  # the search's block-sparse candidate keeps 1/8 of the kv blocks
    upstream = ns["_build_block_index"](q, k, top_k, bs, bs)
    for h in range(len(HEADS)):
        ours = minference.block_sparse(q[0, h], k[0, h], bs, top_k)
        free_rows = [m for m in range(nb) if not ours[m, m + 1:].any()]
        assert nb - 1 in free_rows
        for m in free_rows:
            assert set(upstream[0, h, m].tolist()) == set(ours[m].nonzero().flatten().tolist()), f"head {h} row {m}"


class _AlsoReturnAllInfo(ast.NodeTransformer):
    """Make search_pattern return ``(its result, all_info)``: all_info lists every candidate it scored, which
    upstream only keeps locally."""

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.FunctionDef:
        if node.name == "search_pattern":
            last = node.body[-1]
            assert isinstance(last, ast.Return) and last.value is not None
            node.body[-1] = ast.Return(ast.Tuple([last.value, ast.Name("all_info", ast.Load())], ast.Load()))
        return node


def _as_our_candidate(kind: str, first: int, second: int) -> dict[str, Any]:
    """An upstream candidate (kind, vertical_size, slash_size) as one of our ``minference.CANDIDATES`` configs."""
    if kind == "stream_llm":
        return {"pattern": "a_shape", "a_shape_init": first, "a_shape_local": second}
    if kind == "vertical_and_slash":
        return {"pattern": "vertical_slash", "vertical_size": first, "slash_size": second}
    if kind == "block_sparse":
        # upstream keeps block_num // first of each row's blocks; our "top_k": None is NB // 8
        return {"pattern": "block_sparse", "top_k": None} if first == 8 else {"pattern": "block_sparse",
                                                                               "keep_one_in": first}
    raise AssertionError(f"unknown upstream candidate kind {kind!r}")


SEARCH_TOKENS = 4096  # search_pattern needs N > 3,500 (its largest vertical size) and scores rows 2,500..N


@pytest.fixture(scope="module")
def search_results(wan_9f) -> list[tuple[tuple, list]]:
    """Upstream search_pattern, (its result, all_info), on three heads of ``SEARCH_TOKENS`` tokens built so
    that each kind of candidate wins once: a sink-and-band head, a clustered-blocks head and synthetic head 0,
    where vertical-slash (3500, 100) wins."""
    path = upstream_file("minference", FORWARD)
    n = SEARCH_TOKENS
    heads = [sink_and_band_head(n), clustered_blocks_head(n), (wan_9f[0][:, :1, :n], wan_9f[1][:, :1, :n])]
    # upstream builds this causal additive mask on CUDA on its first call, and reuses it for every later head
    search_mask = torch.zeros(n, n).masked_fill_(torch.ones(n, n, dtype=torch.bool).triu(1),
                                                 torch.finfo(torch.float32).min)[None, None]
    ns = lift(path, ["search_pattern", "sum_all_diagonal_matrix"],
              {"torch": torch, "math": math, "print": _quiet, "SEARCH_MASK": search_mask},
              rewrite=_AlsoReturnAllInfo())
    return [ns["search_pattern"](q, k, h) for h, (q, k) in enumerate(heads)]


def _first_best(all_info: list) -> list:
    """The candidate upstream's search keeps: the first of the highest scores (it replaces only on ">")."""
    return max(all_info, key=lambda row: row[3])


@needs("minference")
def test_minference_search_scores_the_candidates_we_search(search_results):
    for _, all_info in search_results:
        assert [_as_our_candidate(*row[:3]) for row in all_info] == [scored for scored, _ in minference.CANDIDATES]


@needs("minference")
def test_minference_search_winner_runs_as_our_remap_says(search_results):
    """Whatever candidate wins upstream's search, the pattern it then runs as (A-shape as vertical-slash of the
    same sizes, block-sparse as vertical-slash (1000, 6096)) must be the one our CANDIDATES pairs it with."""
    winners = [_first_best(all_info)[0] for _, all_info in search_results]
    assert winners == ["stream_llm", "block_sparse", "vertical_and_slash"]  # the heads exercise all three remaps
    runs_as = {tuple(sorted(scored.items())): run for scored, run in minference.CANDIDATES}
    for (kind, vertical_size, slash_size, _score), all_info in search_results:
        winner = _as_our_candidate(*_first_best(all_info)[:3])
        assert kind == "vertical_and_slash"
        assert runs_as[tuple(sorted(winner.items()))] == _as_our_candidate(kind, vertical_size, slash_size)


# ---------------------------------------------------------------------------------------------------------------
# FlexPrefill: flex_prefill/ops/flex_prefill_attention.py (get_active_blocks and its torch helpers)


def _block_mean_bnhd(x: torch.Tensor, kernel_size: int, pool_type: str = "avg") -> torch.Tensor:
    """Stands in for the Triton triton_bnhd_pool ("avg"): mean of each block's real tokens, (B, NB, H, D)."""
    assert pool_type == "avg"
    b, n, h, d = x.shape
    nb = _cdiv(n, kernel_size)
    sums = torch.nn.functional.pad(x, (0, 0, 0, 0, 0, nb * kernel_size - n)).view(b, nb, kernel_size, h, d).sum(2)
    counts = torch.full((nb,), float(kernel_size))
    counts[-1] = n - (nb - 1) * kernel_size
    return sums / counts.view(1, nb, 1, 1)


def _merge_group_heads(x: torch.Tensor, pattern: str) -> torch.Tensor:
    """Stands in for the one einops call the lifted code makes."""
    assert pattern == "b h g i j -> b (h g) i j"
    return x.flatten(1, 2)


def _flexprefill(open_causal: bool) -> dict[str, Any]:
    path = upstream_file("flexprefill", "flex_prefill/ops/flex_prefill_attention.py")
    ns: dict[str, Any] = {"torch": torch, "math": math, "triton_bnhd_pool": _block_mean_bnhd,
                          "rearrange": _merge_group_heads, "causal_mask": None}
    names = ["get_active_blocks", "torch_bhn_sumpool", "score_cover_topk", "score_cover_idx", "sum_all_diagonal_matrix",
             "transform_veritcal_slash_idx", "square_root_js_divergence"]
    if not open_causal:
        return lift(path, names, ns)
    # the module-level cache of the last block's causal mask, pre-set to all True (our bidirectional estimate)
    ns["causal_mask"] = torch.ones(1, 1, 1, 128, 128, dtype=torch.bool)
    # the query-aware block scores are masked by torch.tril(ones): dropping tril opens them too
    return lift(path, names, ns, rewrite=_DropTril())


@needs("flexprefill")
def test_flexprefill_js_distance_equals_upstream_square_root_js_divergence():
    ns = _flexprefill(open_causal=False)
    generator = torch.Generator().manual_seed(12)
    logits = torch.randn(6, 2, 37, generator=generator, dtype=torch.float64) * 3
    for p, q in torch.softmax(logits, -1):
        upstream = float(ns["square_root_js_divergence"](p, q))
        assert float(flexprefill.js_distance(p, q)) == pytest.approx(upstream, rel=1e-9, abs=1e-12)


def _flexprefill_masks(wan_9f, gamma: float, tau: float) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(upstream with both causal masks opened, ours) block masks of each head, at min_budget 1,024 tokens."""
    ns = _flexprefill(open_causal=True)
    q, k, v = (t[:, :, :4608] for t in wan_9f)  # whole blocks: no ragged-block rescale or slash shift upstream
    bs, min_budget = 128, 1024
    nb = q.shape[2] // bs
    upstream = ns["get_active_blocks"](q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), bs, gamma,
                                       math.ceil(min_budget / bs), nb, tau)
    return [(mask_from_flat_indices(upstream[0][h], nb),
             flexprefill.head_mask(q[0, h], k[0, h], bs, gamma, tau, min_budget, None)) for h in range(len(HEADS))]


@needs("flexprefill")
@pytest.mark.parametrize(("gamma", "tau"), [(0.6, 0.0), (0.6, 0.1), (0.6, 1.0), (0.9, 1.0)])
def test_flexprefill_blocks_equal_upstream_on_and_below_the_diagonal_with_its_causal_masks_opened(wan_9f, gamma,
                                                                                                  tau):
    """docs/methods.md, FlexPrefill: upstream masks the last block's own keys causally and its query-aware block
    scores with a lower triangle, and draws each chosen slash only below the diagonal; ours has no causal mask
    and mirrors slashes. With both upstream masks opened its blocks must be ours on and below the diagonal, and
    a subset of ours above it (there upstream keeps only query-aware blocks). tau 0 forces vertical-slash, 1
    forces query-aware (the sqrt-JS distance is at most sqrt(ln 2)), 0.1 is upstream's own decision.

    Here both slash budgets are min_budget: at gamma 0.6 both coverage budgets of these heads are below 1,024
    tokens, and query-aware heads drop to it. The next test covers budgets that differ."""
    for h, (upstream, ours) in enumerate(_flexprefill_masks(wan_9f, gamma, tau)):
        assert torch.equal(upstream.tril(), ours.tril()), f"head {h}"
        assert not (upstream & ~ours).any(), f"head {h}"


@needs("flexprefill")
def test_flexprefill_upstream_slash_budget_with_the_corner_opened_only_adds_whole_diagonals(wan_9f):
    """docs/methods.md, FlexPrefill "Vertical and slash scores": upstream sums slashes over i - j >= 0 only, so
    with its causal corner opened the mass of the keys ahead of each last-block query drops out of its slash
    scores, where ours folds it onto distances below 128. Our slash scores then dominate upstream's, so our
    coverage budget is never larger (at gamma 0.9 it is smaller for every head here), while the block scores
    that rank the slashes are the same. So below the diagonal ours is a subset of upstream's, and each block
    only upstream keeps lies on a block diagonal upstream keeps whole: an extra slash."""
    differs = 0
    for h, (upstream, ours) in enumerate(_flexprefill_masks(wan_9f, gamma=0.9, tau=0.0)):
        assert not (ours.tril() & ~upstream).any(), f"head {h}"
        extra = (upstream & ~ours).tril(-1)
        differs += int(extra.any())
        for distance in range(1, extra.shape[0]):
            if extra.diagonal(-distance).any():
                assert upstream.diagonal(-distance).all(), f"head {h}, distance {distance}"
    assert differs == len(HEADS)


# ---------------------------------------------------------------------------------------------------------------
# SpargeAttn: spas_sage_attn/utils.py (get_block_map_meansim_fuse_quant, the block map its CUDA kernels consume)


def _pool_and_similarity(x: torch.Tensor, x_mean: torch.Tensor | None, block_size: int,
                         simthreshd1: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, None, None]:
    """Stands in for the Triton get_pool_sim_triton_simmean_fuse_quant: x minus x_mean (when given), mean-pooled
    per block of real tokens, and whether the block's mean pairwise cosine (self-pairs included) exceeds the
    head's simthreshd1. The kernel rounds the unit vectors to fp16 before its Gram sum; this stays in fp32, as
    ours does. The int8 copy it also returns is not used by the block map."""
    x = x.float() - (0 if x_mean is None else x_mean.float())
    b, h, n, d = x.shape
    nb = _cdiv(n, block_size)
    pad = nb * block_size - n
    counts = torch.full((nb,), float(block_size))
    counts[-1] = block_size - pad
    unit = x / x.norm(dim=-1, keepdim=True)
    pooled = torch.nn.functional.pad(x, (0, 0, 0, pad)).view(b, h, nb, block_size, d).sum(3) / counts[:, None]
    unit_sums = torch.nn.functional.pad(unit, (0, 0, 0, pad)).view(b, h, nb, block_size, d).sum(3)
    similarity = unit_sums.pow(2).sum(-1) / counts.pow(2)
    return pooled, similarity > simthreshd1.view(1, h, 1), None, None


def _fill_top_blocks(final_map: torch.Tensor, num_to_select: torch.Tensor,
                     sorted_indices: torch.Tensor) -> torch.Tensor:
    """Stands in for the Triton fill_block_map_triton: per row, the first num_to_select sorted blocks (at least
    one) are turned on."""
    count = num_to_select.clamp(min=1).unsqueeze(-1)
    take = torch.arange(final_map.shape[-1]) < count
    return final_map | torch.zeros_like(final_map).scatter_(-1, sorted_indices, take)


# thresholds that split these heads' blocks into self-similar and not (block cosines: q 0.12-0.67, smoothed k
# 0.04-0.25), and -1 where every block is self-similar and only the cdf selection acts
@needs("spargeattn")
@pytest.mark.parametrize(("simthreshd1", "cdfthreshd"), [(-1.0, 0.5), (-1.0, 0.9), (0.05, 0.9), (0.15, 0.98),
                                                         (0.2, 0.7)])
@pytest.mark.parametrize("attention_sink", [False, True])
def test_spargeattn_mask_equals_upstream_block_map_on_a_square_grid(wan_9f, simthreshd1, cdfthreshd,
                                                                    attention_sink):
    """Upstream's block map at 128 x 128 (its kernels use 64 x 128 on H100/H200, 128 x 64 elsewhere:
    docs/methods.md, SpargeAttn "Block sizes"), with K smoothed by its mean key as core.py does, against ours."""
    path = upstream_file("spargeattn", "spas_sage_attn/utils.py")
    ns = lift(path, ["get_block_map_meansim_fuse_quant", "hyperparameter_check"],
              {"torch": torch, "get_pool_sim_triton_simmean_fuse_quant": _pool_and_similarity,
               "fill_block_map_triton": _fill_top_blocks})
    q, k, v = wan_9f
    upstream = ns["get_block_map_meansim_fuse_quant"](q, k, k.mean(dim=-2, keepdim=True), is_causal=False,
                                                      BLKQ=128, BLKK=128, simthreshd1=simthreshd1,
                                                      cdfthreshd=cdfthreshd, attention_sink=attention_sink)[0]
    ours = spargeattn.build(q, k, v, 128, **{**spargeattn.PARAMS, "autotune": False, "simthreshd1": simthreshd1,
                                             "cdfthreshd": cdfthreshd, "attention_sink": attention_sink})
    assert not upstream.all()  # the case exercises the selection, not only the dense fill of dissimilar blocks
    assert torch.equal(ours, upstream)
