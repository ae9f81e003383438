"""flashinfer.cascade under the switch: ignis.cascade's names (the attention-state merges and cascade wrappers)."""

from ignis.cascade import *
