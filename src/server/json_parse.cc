// ordered_json from text through nlohmann's SAX parser, with a hash index per large object.
#include "server/json_parse.h"

#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace cpm::protocol {
namespace {

using Json = nlohmann::ordered_json;
// ordered_map is a vector of (key, value) pairs; appending through the vector skips its own
// linear search for the key, which Builder::key has already done.
using Members = Json::object_t::Container;

// Below this many keys an object is searched linearly; at it, it gets an index.
constexpr size_t kIndexFrom = 16;

// nlohmann's SAX interface, building the value as its DOM parser does. A value's slot stays
// put while it is open: its parent gains no member or element until it is complete.
class Builder {
 public:
  explicit Builder(Json* root) : root_(root) {}
  bool too_deep() const { return too_deep_; }

  bool null() { return Put(nullptr) != nullptr; }
  bool boolean(bool v) { return Put(v) != nullptr; }
  bool number_integer(Json::number_integer_t v) { return Put(v) != nullptr; }
  bool number_unsigned(Json::number_unsigned_t v) { return Put(v) != nullptr; }
  bool number_float(Json::number_float_t v, const Json::string_t&) { return Put(v) != nullptr; }
  bool string(Json::string_t& v) { return Put(std::move(v)) != nullptr; }
  bool binary(Json::binary_t& v) { return Put(Json::binary(std::move(v))) != nullptr; }
  bool start_object(std::size_t) { return Open(Json::object()); }
  bool start_array(std::size_t) { return Open(Json::array()); }
  bool end_object() { return Close(); }
  bool end_array() { return Close(); }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) {
    return false;
  }

  // The member `k` of the open object: its existing slot (a repeated key's value is replaced
  // where it stands) or a new one at the end.
  bool key(Json::string_t& k) {
    Frame& f = stack_.back();
    Members& members = f.value->get_ref<Json::object_t&>();
    if (f.index.empty() && members.size() >= kIndexFrom) {
      for (size_t i = 0; i < members.size(); ++i) f.index.emplace(members[i].first, i);
    }
    size_t at = members.size();
    if (!f.index.empty()) {
      if (auto it = f.index.find(k); it != f.index.end()) at = it->second;
    } else {
      for (size_t i = 0; i < members.size() && at == members.size(); ++i) {
        if (members[i].first == k) at = i;
      }
    }
    if (at == members.size()) {
      if (!f.index.empty()) f.index.emplace(k, at);
      members.emplace_back(std::move(k), nullptr);
    }
    slot_ = &members[at].second;
    return true;
  }

 private:
  struct Frame {
    Json* value;
    std::unordered_map<std::string, size_t> index;  // objects of kIndexFrom keys or more
  };

  // Stores `v` where the next value goes: the root, the open array's end or the slot of the
  // open object's last key.
  template <typename V>
  Json* Put(V&& v) {
    if (stack_.empty()) {
      *root_ = Json(std::forward<V>(v));
      return root_;
    }
    Json* top = stack_.back().value;
    if (top->is_array()) {
      top->get_ref<Json::array_t&>().emplace_back(std::forward<V>(v));
      return &top->get_ref<Json::array_t&>().back();
    }
    *slot_ = Json(std::forward<V>(v));
    return slot_;
  }

  bool Open(Json v) {
    if (stack_.size() >= static_cast<size_t>(kMaxJsonDepth)) {
      too_deep_ = true;
      return false;
    }
    stack_.push_back({Put(std::move(v)), {}});
    return true;
  }

  bool Close() {
    stack_.pop_back();
    return true;
  }

  Json* root_;
  Json* slot_ = nullptr;
  bool too_deep_ = false;
  std::vector<Frame> stack_;
};

}  // namespace

Json ParseOrderedJson(std::string_view text, std::string* error) {
  Json root;
  Builder builder(&root);
  if (Json::sax_parse(text.begin(), text.end(), &builder)) return root;
  if (error != nullptr) {
    *error = builder.too_deep()
                 ? "nests arrays and objects deeper than " + std::to_string(kMaxJsonDepth) +
                       " levels"
                 : "is not valid JSON";
  }
  return Json(Json::value_t::discarded);
}

}  // namespace cpm::protocol
