"""flashinfer.quantization under the switch: ignis.quantization's names (packbits and segment_packbits)."""

from ignis.quantization import *
