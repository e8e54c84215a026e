// A C++ program using an installed tfk: GELU, and the error as an exception.
#include <cstdio>
#include <tfk/tfk.hpp>

int main() {
  float x[3] = {-1.0f, 0.0f, 1.0f}, y[3];
  tfk::activate(TFK_ACT_GELU_ERF, 1, 3, x, y);
  try {
    tfk::set_max_isa("NOT_AN_ISA");
    return 1;
  } catch (const tfk::error& e) {
    std::printf("gelu(1) = %.6f; error as expected: %s\n", y[2], e.what());
  }
  return y[2] > 0.84f && y[2] < 0.842f ? 0 : 1;
}
