// Which content format a chat template takes, as vLLM detects it from the template's syntax
// tree (its `_detect_content_format`): "openai" when the template loops over a message's content
// (`for part in message['content']`, through any variable assigned from `messages` or one of its
// loops, filters, tests and slices included, or over a variable named `content`), so messages
// reach it with content as a list of {"type": ...} parts; "string" otherwise, the text parts
// joined into one string.
#pragma once

#include "chat/ast.h"

namespace cpm::jinja {

enum class ContentFormat { kString, kOpenAi };

ContentFormat DetectContentFormat(const Body& template_body);

}  // namespace cpm::jinja
