"""flashinfer.topk under the switch: ignis' ``top_k`` and ``TopKTieBreak``, and the fused top-k
transforms of sparse attention that SGLang's DSA indexers call (``top_k_page_table_transform``,
``top_k_ragged_transform``), with FlashInfer's signatures; ignis.sampling implements them (the same
objects as ``ignis.top_k_page_table_transform`` and ``ignis.top_k_ragged_transform``)."""

from ignis.sampling import TopKTieBreak, top_k, top_k_page_table_transform, top_k_ragged_transform
