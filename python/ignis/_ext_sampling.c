/* Python bindings of the sampling ops (include/ignis/sampling.h), included by _ext.c after its
 * argument helpers. IGNIS_SAMPLING_METHODS lists the method-table entries. */
#define IGNIS_SAMPLING_METHODS
