"""flashinfer.sampling under the switch: ignis.sampling's names (the samplers, renorms and masks, softmax and top_k)."""

from ignis.sampling import *
