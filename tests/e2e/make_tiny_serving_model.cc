// make_tiny_serving_model DIR: the e2e fixture model for scripts (the OpenAI-client test).
#include <cstdio>

#include "e2e/tiny_serving_model.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_tiny_serving_model DIR\n");
    return 2;
  }
  cpm::Status s = cpm::WriteTinyServingModel(argv[1]);
  if (!s.ok()) {
    std::fprintf(stderr, "error: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
