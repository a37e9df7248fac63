"""What the vendor kernels (FA4, FlashInfer) take: block-sparse structures built from a dense block mask,
their permutation into a WaveAlign launch order, and the check that the kernel's GPU and package are here.

- FA4 (``flash_attn.cute.block_sparsity.BlockSparseTensorsTorch``): per (batch, head, query block) a count
  and a list of K/V blocks, int32 (B, H, MB) and (B, H, MB, K). Every selected block is a *full* block, so
  no mask_mod runs. Lists are ascending: FA4 walks a row's list from its end and applies the sequence-length
  mask only to the first block it processes, so a ragged last K/V block must come last.
- FlashInfer (``BatchPrefillWithPagedKVCacheWrapper``, the paged prefill its block-sparse wrappers plan
  onto): one request per (head, query block), one page per K/V block (BSR ``kv_indptr``/``kv_indices``),
  with the last page's length, so a ragged last K/V block is read only up to the sequence end.

Permuting a structure by a ``RowOrder`` moves whole rows, so it equals converting the row-permuted mask.
"""

from __future__ import annotations

import importlib.metadata
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeVar

import torch

from wavealign import blockmask
from wavealign.launch_order.row_order import RowOrder

T = TypeVar("T")


class BlockLists(NamedTuple):
    """Each query block's selected K/V blocks: ``count`` int32 (B, H, MB), ``index`` int32 (B, H, MB, K),
    ascending in the first ``count`` entries; K is the largest count (at least 1), the tail unspecified."""

    count: torch.Tensor
    index: torch.Tensor


def full_block_lists(mask: torch.Tensor) -> BlockLists:
    """FA4's full-block lists of a bool mask (H, MB, NB) or (B, H, MB, NB); a 3-D mask gets batch 1."""
    dense = blockmask.check_mask(mask)
    if dense.dim() == 3:
        dense = dense.unsqueeze(0)
    count, index = blockmask.to_kv_indices(dense)
    # FA4 reads only the first count entries of a row, so the lists are cut to the longest row
    width = max(1, int(count.max()))
    return BlockLists(count.contiguous(), index[..., :width].contiguous())


def permute_block_lists(lists: BlockLists, order: RowOrder) -> BlockLists:
    """The rows of ``lists`` in launch order: row p of head h is query block ``order.perm[..., h, p]``."""
    batch, heads, mb = lists.count.shape
    perm = order.perm.to(lists.count.device)
    if perm.dim() == 2:
        perm = perm.unsqueeze(0)
    if perm.shape[1:] != (heads, mb) or (batch != 1 and perm.shape[0] not in (1, batch)):
        raise ValueError(f"order has perm of shape {tuple(order.perm.shape)}, but the lists cover "
                         f"(B, H, MB) = {(batch, heads, mb)}")
    batch = max(batch, perm.shape[0])
    perm = perm.expand(batch, heads, mb)
    index = lists.index.expand(batch, heads, mb, lists.index.shape[-1])
    return BlockLists(torch.gather(lists.count.expand(batch, heads, mb), -1, perm),
                      torch.gather(index, -2, perm.unsqueeze(-1).expand_as(index)))


@dataclass(frozen=True)
class PagedBSR:
    """A block mask as FlashInfer's paged prefill: request ``i`` is one (head, query block) row.

    Heads (B*H of them, batch-major) are laid end to end: Q as (G * q_len) tokens, K/V as G * NB pages of
    ``block_size`` tokens, so head g's K/V block c is page ``g * NB + c``. Requests run head after head,
    each head's rows in launch order.
    """

    qo_indptr: torch.Tensor  # int32 (G*MB + 1,): token offsets of each request's queries
    kv_indptr: torch.Tensor  # int32 (G*MB + 1,): offsets of each request's pages in kv_indices
    kv_indices: torch.Tensor  # int32 (nnz,): page ids, ascending within a request
    kv_last_page_len: torch.Tensor  # int32 (G*MB,): tokens of a request's last page that exist
    num_heads: int  # G = B * H
    num_q_blocks: int  # MB
    num_kv_blocks: int  # NB
    block_size: int

    @property
    def num_requests(self) -> int:
        return self.num_heads * self.num_q_blocks


def _indptr(lengths: torch.Tensor) -> torch.Tensor:
    total = int(lengths.sum()) if lengths.numel() else 0
    if total >= 2**31:
        raise ValueError(f"FlashInfer's int32 indptr cannot hold {total} entries")
    return torch.cat([lengths.new_zeros(1), lengths.cumsum(0)]).to(torch.int32)


def _check_blocks(num_blocks: int, seq_len: int, block_size: int, name: str) -> None:
    if int(block_size) < 1:
        raise ValueError(f"block_size must be >= 1, got {block_size}")
    if seq_len < 1 or -(-seq_len // block_size) != num_blocks:
        raise ValueError(f"{name}={seq_len} with block_size={block_size} gives {-(-seq_len // block_size)} "
                         f"blocks, but the mask has {num_blocks}")


def paged_bsr(mask: torch.Tensor, block_size: int, q_len: int, kv_len: int) -> PagedBSR:
    """FlashInfer's paged-prefill form of a bool mask (H, MB, NB) or (B, H, MB, NB), in the original order.

    ``q_len``/``kv_len`` are the token counts; a ragged last query block is a shorter request, a ragged
    last K/V block a shorter last page (it is the last page of every row that selects it).
    """
    dense = blockmask.check_mask(mask)
    mb, nb = dense.shape[-2:]
    _check_blocks(mb, q_len, block_size, "q_len")
    _check_blocks(nb, kv_len, block_size, "kv_len")
    rows = dense.reshape(-1, mb, nb)
    heads = rows.shape[0]
    kv_indptr = _indptr(blockmask.row_nnz(rows).flatten())
    # flat positions come out row-major, i.e. by (head, query block, kv block): rows ascending
    flat = torch.nonzero(rows.reshape(-1)).flatten()
    kv_indices = ((flat // (mb * nb)) * nb + flat % nb).to(torch.int32)
    last_kv_len = kv_len - (nb - 1) * block_size
    kv_last_page_len = torch.where(rows[..., -1], last_kv_len, block_size).flatten().to(torch.int32)
    q_lens = (q_len - torch.arange(mb, device=dense.device) * block_size).clamp(max=block_size)
    return PagedBSR(qo_indptr=_indptr(q_lens.repeat(heads)), kv_indptr=kv_indptr, kv_indices=kv_indices,
                    kv_last_page_len=kv_last_page_len, num_heads=heads, num_q_blocks=mb, num_kv_blocks=nb,
                    block_size=int(block_size))


def permute_paged_bsr(bsr: PagedBSR, order: RowOrder) -> PagedBSR:
    """Requests in launch order: head g's slot p runs its query block ``order.perm[..., h, p]``.

    Each request keeps its own query length: build the structure for whole blocks (``q_len`` = MB x block_size)
    and gather Q with ``launch_order.permute_rows`` (whole blocks, a ragged one zero-padded where it lands), as the
    flashinfer backend does.
    """
    heads, mb = bsr.num_heads, bsr.num_q_blocks
    perm = order.perm.to(bsr.kv_indptr.device).reshape(-1, order.perm.shape[-1])
    if perm.shape[1] != mb or heads % perm.shape[0]:
        raise ValueError(f"order has perm of shape {tuple(order.perm.shape)}, but the structure has "
                         f"{heads} heads of MB={mb} query blocks")
    perm = perm.repeat(heads // perm.shape[0], 1)  # an (H, MB) order serves every batch element
    source = (torch.arange(heads, device=perm.device).unsqueeze(1) * mb + perm).flatten()
    counts = (bsr.kv_indptr[1:] - bsr.kv_indptr[:-1]).long()[source]
    kv_indptr = _indptr(counts)
    # entry j of new request i is entry j of old request source[i]
    shift = torch.repeat_interleave(bsr.kv_indptr[:-1].long()[source] - kv_indptr[:-1].long(), counts)
    positions = shift + torch.arange(int(kv_indptr[-1]), device=perm.device)
    q_lens = (bsr.qo_indptr[1:] - bsr.qo_indptr[:-1]).long()[source]
    return PagedBSR(qo_indptr=_indptr(q_lens), kv_indptr=kv_indptr, kv_indices=bsr.kv_indices[positions],
                    kv_last_page_len=bsr.kv_last_page_len[source], num_heads=heads, num_q_blocks=mb,
                    num_kv_blocks=bsr.num_kv_blocks, block_size=bsr.block_size)


def split_heads(bsr: PagedBSR) -> list[PagedBSR]:
    """One structure per head, each indexing that head's own Q tokens and K/V pages from zero."""
    mb, nb = bsr.num_q_blocks, bsr.num_kv_blocks
    kv_bounds = bsr.kv_indptr[::mb].tolist()
    qo_bounds = bsr.qo_indptr[::mb].tolist()
    parts = []
    for g in range(bsr.num_heads):
        rows = slice(g * mb, (g + 1) * mb + 1)
        parts.append(PagedBSR(
            qo_indptr=bsr.qo_indptr[rows] - qo_bounds[g], kv_indptr=bsr.kv_indptr[rows] - kv_bounds[g],
            kv_indices=bsr.kv_indices[kv_bounds[g]:kv_bounds[g + 1]] - g * nb,
            kv_last_page_len=bsr.kv_last_page_len[g * mb:(g + 1) * mb], num_heads=1, num_q_blocks=mb,
            num_kv_blocks=nb, block_size=bsr.block_size))
    return parts


class LastBuilt:
    """Keeps what was built for the last inputs, so timed repetitions of one launch reuse it (plan once,
    run many). Tensors match by identity and in-place version, so an edited mask is rebuilt."""

    def __init__(self) -> None:
        self._refs: tuple[Any, ...] = ()
        self._versions: tuple[int | None, ...] = ()
        self._params: tuple[Any, ...] | None = None
        self._value: Any = None

    def get(self, tensors: tuple[torch.Tensor | None, ...], params: tuple[Any, ...], build: Callable[[], T]) -> T:
        """The value built for these ``tensors`` and ``params``, calling ``build`` only when they changed."""
        versions = tuple(None if t is None else t._version for t in tensors)
        same = (self._params == params and len(self._refs) == len(tensors) and self._versions == versions
                and all((ref is None and t is None) or (ref is not None and ref() is t)
                        for ref, t in zip(self._refs, tensors, strict=True)))
        if not same:
            # forget the old value first: it frees memory, and a failing build leaves nothing stale behind
            self._value, self._params = None, None
            self._value = build()
            self._refs = tuple(None if t is None else weakref.ref(t) for t in tensors)
            self._versions, self._params = versions, params
        return self._value


@dataclass(frozen=True)
class KernelRequirement:
    """What a vendor kernel needs: a CUDA GPU of compute capability >= ``min_capability`` and the package
    ``distribution==version`` (installed by wavealign's optional extra ``extra``)."""

    backend: str
    distribution: str
    version: str
    min_capability: tuple[int, int]
    extra: str

    def problem(self, capability: tuple[int, int] | None, installed: str | None, device_name: str = "") -> str | None:
        """Why the kernel cannot run given these facts (None: it can)."""
        if capability is None:
            return "no CUDA GPU is visible (torch.cuda.is_available() is False)"
        if tuple(capability) < self.min_capability:
            gpu = f"the GPU {device_name}" if device_name else "the GPU"
            need = ".".join(map(str, self.min_capability))
            return (f"{gpu} has compute capability {capability[0]}.{capability[1]}, but {self.distribution} "
                    f"needs {need} or newer")
        if installed is None:
            return (f"the package {self.distribution}=={self.version} is not installed "
                    f"(pip install 'wavealign[{self.extra}]')")
        if installed != self.version:
            return (f"{self.distribution} {installed} is installed, but this backend is written against "
                    f"{self.distribution}=={self.version}, whose API changes between releases")
        return None

    def problem_here(self) -> str | None:
        """``problem`` for this machine's first GPU and installed package."""
        if not torch.cuda.is_available():
            return self.problem(None, None)
        try:
            installed = importlib.metadata.version(self.distribution)
        except importlib.metadata.PackageNotFoundError:
            installed = None
        return self.problem(torch.cuda.get_device_capability(), installed, torch.cuda.get_device_name())

    def is_met(self) -> bool:
        return self.problem_here() is None

    def check(self) -> None:
        """Raise a RuntimeError naming what is missing, if anything."""
        problem = self.problem_here()
        if problem is not None:
            raise RuntimeError(f"backend {self.backend!r} cannot run here: {problem}")
