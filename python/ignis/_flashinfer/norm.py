"""flashinfer.norm under the switch: ignis.norm's names (the norms)."""

from ignis.norm import *
