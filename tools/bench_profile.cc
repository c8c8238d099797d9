#include "bench_profile.h"

#include <cstdio>

#include <fmt/format.h>

namespace cpm {
namespace {

double PerStepMs(const TestProfile& p, double seconds) { return 1e3 * seconds / p.steps; }

// "12.3" and "45.6%" of `limit`, or "-" where there is nothing to show.
std::string Rate(double rate) { return rate > 0 ? fmt::format("{:.1f}", rate) : "-"; }
std::string Share(double rate, double limit) {
  return rate > 0 && limit > 0 ? fmt::format("{:.1f}%", 100 * rate / limit) : "-";
}

}  // namespace

void PrintProfile(const TestProfile& p, const ProfileLimits& limits) {
  const double step_ms = PerStepMs(p, p.seconds);
  std::printf("\nprofile: %s at batch %lld, best run, %.2f ms per %s\n", p.test.c_str(),
              static_cast<long long>(p.batch), step_ms, p.steps > 1 ? "step" : "prompt");
  std::printf("| section                         | ms/step | share  | calls/step | weight GB/s "
              "| of read bw | GFLOP/s | of peak |\n");
  std::printf("|---------------------------------|--------:|-------:|-----------:|------------:"
              "|-----------:|--------:|--------:|\n");
  for (const ForwardProfile::Section& s : p.sections.sections()) {
    const double ms = PerStepMs(p, s.seconds);
    const double gbps = s.seconds > 0 ? s.work.weight_bytes / s.seconds / 1e9 : 0;
    const double gflops = s.seconds > 0 ? s.work.flops / s.seconds / 1e9 : 0;
    std::printf("| %-31s | %7.3f | %5.1f%% | %10.1f | %11s | %10s | %7s | %7s |\n",
                s.name.c_str(), ms, 100 * ms / step_ms, static_cast<double>(s.calls) / p.steps,
                Rate(gbps).c_str(), Share(gbps, limits.read_gbps).c_str(), Rate(gflops).c_str(),
                Share(gflops, limits.matmul_gflops).c_str());
  }
  // The step's own work outside the forward's sections: the model's checks and buffer sizing,
  // the bench's batch assembly, and clock reads.
  const double rest = step_ms - PerStepMs(p, p.sections.total_seconds());
  std::printf("| %-31s | %7.3f | %5.1f%% | %10s | %11s | %10s | %7s | %7s |\n",
              "(outside the sections)", rest, 100 * rest / step_ms, "-", "-", "-", "-", "-");
}

nlohmann::json ProfileJson(const TestProfile& p) {
  nlohmann::json out = nlohmann::json::array();
  const double step_ms = PerStepMs(p, p.seconds);
  for (const ForwardProfile::Section& s : p.sections.sections()) {
    const double ms = PerStepMs(p, s.seconds);
    const bool matmul = s.work.flops > 0 && s.seconds > 0;
    nlohmann::json e = {{"section", s.name},
                        {"ms_per_step", ms},
                        {"share", ms / step_ms},
                        {"calls_per_step", static_cast<double>(s.calls) / p.steps}};
    e["weight_gb_per_s"] =
        matmul ? nlohmann::json(s.work.weight_bytes / s.seconds / 1e9) : nlohmann::json();
    e["gflop_per_s"] = matmul ? nlohmann::json(s.work.flops / s.seconds / 1e9) : nlohmann::json();
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace cpm
