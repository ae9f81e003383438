/* A C program that uses an installed ignis through find_package(ignis) or pkg-config, as an engine
 * would: RMSNorm of one row on the CPU backend, checked against the closed form. */
#include <math.h>
#include <stdio.h>

#include <ignis/ignis.h>

int main(void) {
  float x[4] = {1.0f, -2.0f, 3.0f, -4.0f}, w[4] = {1.0f, 1.0f, 1.0f, 1.0f}, y[4] = {0};
  int64_t shape[2] = {1, 4}, wshape[1] = {4};
  ignis_device cpu = {IGNIS_DEVICE_CPU, 0};
  ignis_tensor tx, tw, ty;
  ignis_tensor_init(&tx, x, IGNIS_F32, 2, shape, cpu);
  ignis_tensor_init(&tw, w, IGNIS_F32, 1, wshape, cpu);
  ignis_tensor_init(&ty, y, IGNIS_F32, 2, shape, cpu);
  ignis_status s = ignis_rmsnorm(&tx, &tw, 0.0, &ty, NULL);
  if (s != IGNIS_OK) {
    fprintf(stderr, "%s: %s\n", ignis_status_string(s), ignis_last_error());
    return 1;
  }
  float rms = sqrtf((1 + 4 + 9 + 16) / 4.0f);
  for (int i = 0; i < 4; ++i)
    if (fabsf(y[i] - x[i] / rms) > 1e-6f)
      return 1;
  printf("consumer: ignis %s ok\n", ignis_version_string());
  return ignis_version() == IGNIS_VERSION_NUMBER ? 0 : 1;
}
