// Splits a streamed text/event-stream body into its events as bytes arrive, for the
// `cpmserve bench serve` client and for /v1/responses (which re-frames the chat stream): an
// event ends at a blank line ("\n\n" or "\r\n\r\n"); its `data:` lines are joined with "\n";
// comment lines (":" first) and other fields are dropped, and so are events without data.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace cpm::benchserve {

class SseReader {
 public:
  // Appends `bytes` and returns the data of every event completed by them, in order.
  std::vector<std::string> Feed(std::string_view bytes);

  // At the end of the body: an event the server did not end with a blank line.
  std::vector<std::string> Finish();

  // Bytes received after the last complete event.
  const std::string& pending() const { return buffer_; }

 private:
  std::string buffer_;
};

}  // namespace cpm::benchserve
