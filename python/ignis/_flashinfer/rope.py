"""flashinfer.rope under the switch: ignis.rope's names (the rotary embeddings)."""

from ignis.rope import *
