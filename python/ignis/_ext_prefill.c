/* Python bindings of prefill attention (include/ignis/prefill.h), included by _ext.c after its
 * argument helpers. IGNIS_PREFILL_METHODS lists the method-table entries. */
#define IGNIS_PREFILL_METHODS
