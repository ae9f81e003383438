/* The table of environment variables (core/env.h) and its public view (include/ignis/core.h). */
#include <stdlib.h>

#include "core/env.h"
#include "ignis/core.h"

static const ignis_env_var table[IGNIS_ENV_COUNT] = {
#define IGNIS_ENV_ENTRY(id, name, values, unset, meaning) {name, values, unset, meaning},
    IGNIS_ENV_VARS(IGNIS_ENV_ENTRY)
#undef IGNIS_ENV_ENTRY
};

const char *ignis_env(ignis_env_id id) {
  return getenv(table[id].name);
}

int ignis_env_var_count(void) {
  return IGNIS_ENV_COUNT;
}

const ignis_env_var *ignis_env_var_at(int index) {
  return index >= 0 && index < IGNIS_ENV_COUNT ? &table[index] : NULL;
}
