// The text/event-stream splitter of the `cpmserve bench serve` client.
#include "benchserve/sse_reader.h"

#include <utility>

namespace cpm::benchserve {

std::vector<std::string> SseReader::Feed(std::string_view bytes) {
  buffer_.append(bytes);
  std::vector<std::string> events;
  for (;;) {
    size_t end = std::string::npos, sep = 0;
    const size_t lf = buffer_.find("\n\n"), crlf = buffer_.find("\r\n\r\n");
    if (lf != std::string::npos && (crlf == std::string::npos || lf < crlf)) {
      end = lf, sep = 2;
    } else if (crlf != std::string::npos) {
      end = crlf, sep = 4;
    }
    if (end == std::string::npos) break;
    std::string data;
    bool has_data = false;
    size_t pos = 0;
    const std::string_view block(buffer_.data(), end);
    while (pos <= block.size()) {
      size_t eol = block.find('\n', pos);
      if (eol == std::string_view::npos) eol = block.size();
      std::string_view line = block.substr(pos, eol - pos);
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      if (line.substr(0, 5) == "data:") {
        line.remove_prefix(5);
        if (!line.empty() && line.front() == ' ') line.remove_prefix(1);
        if (has_data) data += '\n';
        data.append(line);
        has_data = true;
      }
      pos = eol + 1;
    }
    if (has_data) events.push_back(std::move(data));
    buffer_.erase(0, end + sep);
  }
  return events;
}

std::vector<std::string> SseReader::Finish() {
  if (buffer_.find_first_not_of("\r\n") == std::string::npos) return {};
  return Feed("\n\n");
}

}  // namespace cpm::benchserve
