"""Stage 1 of WaveAlign (paper Alg. 1) on a CUDA mask: the host side of ``stage1.cu``, which NVRTC compiles at first
use (``wavealign.nvrtc``, after ``mask_bytes.cu``).

The mask is bit-packed once, row-major and transposed (40 heads x 2841^2 bits = 40 MB a copy, each row padded with
zero words to a multiple of 16). All of Alg. 1's products then run in one persistent launch: the 2-column block is
turned into three balanced base-256 digits of a 22-bit fixed-point value per column, so an int8 MMA gives the exact
integer product; the packed words keep each MMA lane's columns 8 bits apart, so a lane masks its 0/1 bytes of the
MMA's registers straight out of a word.
Centering (lines 4-5) and the orthonormalisation (line 6, as Cholesky-QR: Y depends on Z only through span(Z), so
Z = X R never needs forming) are folded in; grid-wide barriers separate the products, so Stage 1 is four launches
(two to pack, the products, the last product after orth) and the host waits for nothing.
"""

from __future__ import annotations

import functools
from pathlib import Path

import torch

from wavealign import nvrtc
from wavealign.reorderers.wavealign import subspace

PROGRAM = nvrtc.Program((nvrtc.MASK_BYTES, Path(__file__).with_name("stage1.cu")),
                        ("stage1_products", "pack_rows", "transpose_bits"))
# threads per block of the product kernel (its WARPS * 32); one block per SM, so the whole grid can be resident at once,
# as its grid-wide barriers need (a block left waiting 20 s traps instead of hanging: stage1.cu)
PRODUCT_THREADS = 512
# the pack kernels: 8 warps per block, one warp per task (32 words of a row, 256 x 128 bits)
WARP_KERNEL_THREADS = 256


def padded_words(bits: int) -> int:
    """32-bit words of a packed row of ``bits`` bits, rounded up to a multiple of 16: a quad of the product kernel's
    lanes reads a row 16 words (four 16-byte loads) at a time."""
    return -(-bits // 512) * 16


def pack(mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Int32 words of a (G, MB, NB) bool CUDA mask, (G, MB, padded_words(NB)), and of its transpose, (G, NB,
    padded_words(MB)), zero past the last column, and the column sums c = M^T 1 (G, NB) float32: the rows from one
    read of the mask, the transpose and the sums from the rows."""
    g, mb, nb = mask.shape
    packed = torch.zeros(g, mb, padded_words(nb), dtype=torch.int32, device=mask.device)
    packed_t = torch.zeros(g, nb, padded_words(mb), dtype=torch.int32, device=mask.device)
    col_sums = torch.zeros(g, nb, dtype=torch.float32, device=mask.device)
    words, warps = -(-nb // 32), WARP_KERNEL_THREADS // 32
    spans = -(-words // 32)
    PROGRAM.launch("pack_rows", mask.device, -(-g * mb * spans // warps), WARP_KERNEL_THREADS,
            mask.contiguous().view(torch.uint8), packed, g * mb, nb, words, packed.shape[-1], spans)
    PROGRAM.launch("transpose_bits", mask.device, -(-g * -(-mb // 256) * -(-nb // 128) // warps), WARP_KERNEL_THREADS,
            packed, packed_t, col_sums, g, mb, nb, packed.shape[-1], packed_t.shape[-1])
    return packed, packed_t, col_sums


def _eigh2(s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Eigenvalues (descending) and eigenvectors (as columns) of symmetric (G, 2, 2) matrices, in closed form."""
    a, b, d = s[:, 0, 0], s[:, 0, 1], s[:, 1, 1]
    mean, half = (a + d) / 2, torch.sqrt(((a - d) / 2) ** 2 + b * b)
    theta = 0.5 * torch.atan2(2 * b, a - d)
    cos, sin = torch.cos(theta), torch.sin(theta)
    vecs = torch.stack((torch.stack((cos, -sin), -1), torch.stack((sin, cos), -1)), -2)
    return torch.stack((mean + half, mean - half), -1), vecs


@functools.cache
def _start(mb: int, seed: int, device: torch.device) -> torch.Tensor:
    """The CPU path's orthonormal start block for one head, (MB, 2), kept on ``device``: copying it from the host
    on every plan would make the host wait for the GPU's queue to drain. Never evicted: a captured plan
    (``wavealign.launch_order.plan_graphs``) reads it by address (8 bytes per row per (MB, seed, device))."""
    return subspace.start_block(1, mb, seed, device)[0].t().contiguous()


def centered_top2(mask: torch.Tensor, iters: int, seed: int, rayleigh_ritz: bool):
    """``stage1.centered_top2`` on a CUDA mask through the packed int8 products (same start, same iterations)."""
    g, mb, nb = mask.shape
    packed, packed_t, col_sums = pack(mask)
    z = _start(mb, seed, mask.device).expand(g, mb, 2).contiguous()
    y = torch.empty(g, nb, 2, dtype=torch.float32, device=mask.device)
    _products(packed, packed_t, col_sums, z, y, 2 * iters)  # y = centred M^T z R^-1, z = centred M y, iters times
    x = subspace.orth2(z.transpose(1, 2)).transpose(1, 2).contiguous()
    _products(packed, packed_t, col_sums, x, y, 1)  # x is orthonormal, so R = I up to rounding: y = C^T x
    evals, evecs = _eigh2(torch.bmm(y.transpose(1, 2), y).double())
    if rayleigh_ritz:
        x = torch.bmm(x.double(), evecs).float()
    return x, evals.clamp_min(0).sqrt().float()


def _products(packed: torch.Tensor, packed_t: torch.Tensor, col_sums: torch.Tensor, z: torch.Tensor,
              y: torch.Tensor, count: int) -> None:
    """One launch of ``count`` products of Alg. 1, alternating y = centred M^T z R^-1 and z = centred M y (starting
    with the first), in place on ``z`` (G, MB, 2) and ``y`` (G, NB, 2)."""
    if count == 0:
        return
    g, mb, words = packed.shape
    nb, words_t = packed_t.shape[1:]
    device = packed.device
    # each product's B fragments get their own slice: no address is rewritten within the launch (see stage1.cu)
    frags = torch.empty(count, g, 32 * max(words, words_t), 2, dtype=torch.int32, device=device)
    stats = torch.empty(g, 8, dtype=torch.float32, device=device)
    counter = torch.zeros(1, dtype=torch.int32, device=device)
    blocks = torch.cuda.get_device_properties(device).multi_processor_count
    PROGRAM.launch("stage1_products", device, blocks, PRODUCT_THREADS, packed, packed_t, col_sums, z, y, frags, stats,
            counter, g, mb, nb, words, words_t, count)
