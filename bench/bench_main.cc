// tfk_bench: Google Benchmark main with tfk's context in the JSON output.
#include <cstring>
#include <string>

#include "bench_util.h"

int main(int argc, char** argv) {
  std::string compiled, supported;
  for (const std::string& isa : tfk::compiled_isas()) compiled += (compiled.empty() ? "" : ",") + isa;
  for (const std::string& isa : tfk::supported_isas()) supported += (supported.empty() ? "" : ",") + isa;
  benchmark::AddCustomContext("tfk_version", tfk_version());
  benchmark::AddCustomContext("tfk_compiled_isas", compiled);
  benchmark::AddCustomContext("tfk_supported_isas", supported);
  benchmark::AddCustomContext("tfk_best_isa", tfk::active_isa());
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
