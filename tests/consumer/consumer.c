/* A C program using an installed tfk: softmax of one row. */
#include <math.h>
#include <stdio.h>
#include <tfk/tfk.h>

int main(void) {
  const float x[4] = {1.0f, 2.0f, 3.0f, 4.0f};
  float y[4];
  if (tfk_softmax(1, 4, x, 4, y, 4, 1.0f, TFK_MASK_NONE, 0) != TFK_SUCCESS) {
    fprintf(stderr, "%s\n", tfk_last_error());
    return 1;
  }
  const float sum = y[0] + y[1] + y[2] + y[3];
  printf("tfk %s on %s: softmax sum %.6f\n", tfk_version(), tfk_active_isa(), sum);
  return fabsf(sum - 1.0f) < 1e-5f && y[3] > y[2] ? 0 : 1;
}
