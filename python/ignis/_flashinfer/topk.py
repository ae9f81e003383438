"""flashinfer.topk under the switch: ignis' ``top_k`` and ``TopKTieBreak``, plus the fused top-k
transforms of sparse attention (SGLang's DSA indexers), which ignis does not have: they select
over a per-row window (``row_starts``, ``lengths``) and map the picks through a page table or an
offset in one kernel, which ignis' fixed-width top_k cannot do without new kernels; they raise
UnsupportedError."""

from ignis import UnsupportedError
from ignis.sampling import TopKTieBreak, top_k


def _no_transform(name):
    raise UnsupportedError("flashinfer.%s: ignis has no fused top-k transform (windowed top-k mapped through a "
                           "page table or offsets); use SGLang's own DSA top-k backend" % name)


def top_k_ragged_transform(*args, **kwargs):
    """FlashInfer's top-k plus ragged offset transform; not implemented (raises)."""
    _no_transform("top_k_ragged_transform")


def top_k_page_table_transform(*args, **kwargs):
    """FlashInfer's top-k plus page-table transform; not implemented (raises)."""
    _no_transform("top_k_page_table_transform")
