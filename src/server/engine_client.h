// The part of the engine the HTTP layer uses, behind an interface so that handler tests can
// drive a scripted fake instead of a model. EngineAdapter forwards to the real Engine.
#pragma once

#include <memory>
#include <string>

#include "engine/engine.h"

namespace cpm {

// Thread-safe: HTTP threads call every method concurrently.
class EngineClient {
 public:
  virtual ~EngineClient() = default;
  virtual std::shared_ptr<RequestStream> Submit(EngineRequest request) = 0;
  // Several at once, planned in one step (Engine::SubmitAll); one by one unless overridden.
  virtual std::vector<std::shared_ptr<RequestStream>> SubmitAll(
      std::vector<EngineRequest> requests) {
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (EngineRequest& r : requests) streams.push_back(Submit(std::move(r)));
    return streams;
  }
  virtual void Cancel(const std::string& request_id) = 0;
  virtual EngineStats Stats() const = 0;
};

class EngineAdapter : public EngineClient {
 public:
  explicit EngineAdapter(Engine* engine) : engine_(engine) {}
  std::shared_ptr<RequestStream> Submit(EngineRequest request) override {
    return engine_->Submit(std::move(request));
  }
  std::vector<std::shared_ptr<RequestStream>> SubmitAll(
      std::vector<EngineRequest> requests) override {
    return engine_->SubmitAll(std::move(requests));
  }
  void Cancel(const std::string& request_id) override { engine_->Cancel(request_id); }
  EngineStats Stats() const override { return engine_->Stats(); }

 private:
  Engine* engine_;
};

}  // namespace cpm
