// Parser: tokens -> statement tree, with jinja2's grammar and operator precedence.
#pragma once

#include <string>

#include "base/status.h"
#include "chat/ast.h"

namespace cpm::jinja {

// Parses a whole template. Errors are kInvalidArgument "chat template line L, column C: ...",
// including for tags this interpreter does not support (include, extends, block, ...).
StatusOr<Body> ParseTemplate(const std::string& source);

}  // namespace cpm::jinja
