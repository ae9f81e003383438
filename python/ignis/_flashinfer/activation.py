"""flashinfer.activation under the switch: ignis.activation's names (the gated activations)."""

from ignis.activation import *
