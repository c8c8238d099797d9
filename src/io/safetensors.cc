#include "io/safetensors.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

namespace cpm {
namespace fs = std::filesystem;
using json = nlohmann::json;

int64_t TensorInfo::NumElements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string TensorInfo::ShapeString() const {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

namespace {

size_t ElementSize(const std::string& dtype) {
  if (dtype == "F64" || dtype == "I64" || dtype == "U64") return 8;
  if (dtype == "F32" || dtype == "I32" || dtype == "U32") return 4;
  if (dtype == "F16" || dtype == "BF16" || dtype == "I16" || dtype == "U16") return 2;
  if (dtype == "I8" || dtype == "U8" || dtype == "BOOL" || dtype == "F8_E4M3" || dtype == "F8_E5M2")
    return 1;
  return 0;
}

Status ParseEntry(const std::string& path, const std::string& name, const json& e,
                  const uint8_t* data_begin, size_t data_size, TensorInfo* out) {
  auto fail = [&](const std::string& what) {
    return DataLoss(path + ": tensor '" + name + "': " + what);
  };
  if (!e.is_object() || !e.contains("dtype") || !e.contains("shape") || !e.contains("data_offsets"))
    return fail("header entry needs dtype, shape and data_offsets");
  if (!e["dtype"].is_string()) return fail("dtype is not a string");
  out->name = name;
  out->file = path;
  out->dtype_name = e["dtype"].get<std::string>();
  out->dtype_supported = ParseSafetensorsDType(out->dtype_name, &out->dtype);
  const size_t elem = ElementSize(out->dtype_name);
  if (elem == 0) return fail("unknown dtype " + out->dtype_name);
  if (!e["shape"].is_array()) return fail("shape is not an array");
  uint64_t elements = 1;  // checked: a shape whose count overflows is refused, not wrapped
  for (const json& d : e["shape"]) {
    if (!d.is_number_integer() || d.get<int64_t>() < 0) return fail("bad shape entry");
    const auto dim = static_cast<uint64_t>(d.get<int64_t>());
    if (dim != 0 && elements > (uint64_t{1} << 62) / dim) {
      return fail("shape's element count overflows");
    }
    elements *= dim;
    out->shape.push_back(d.get<int64_t>());
  }
  const json& off = e["data_offsets"];
  if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() ||
      !off[1].is_number_unsigned())
    return fail("data_offsets must be two non-negative integers");
  const uint64_t b = off[0].get<uint64_t>(), en = off[1].get<uint64_t>();
  if (b > en || en > data_size) {
    return fail("data_offsets [" + std::to_string(b) + ", " + std::to_string(en) +
                ") outside the data section of " + std::to_string(data_size) +
                " bytes (file truncated?)");
  }
  const uint64_t expected = elements * elem;
  if (en - b != expected) {
    return fail("holds " + std::to_string(en - b) + " bytes but shape " + out->ShapeString() +
                " of " + out->dtype_name + " needs " + std::to_string(expected));
  }
  out->data = data_begin + b;
  out->nbytes = static_cast<size_t>(en - b);
  return OkStatus();
}

// `__metadata__` is a map of strings (the format's HashMap<String, String>).
Status CheckMetadata(const std::string& path, const json& m) {
  if (!m.is_object()) return DataLoss(path + ": __metadata__ is not an object");
  for (auto it = m.begin(); it != m.end(); ++it) {
    if (!it.value().is_string())
      return DataLoss(path + ": __metadata__['" + it.key() + "'] is not a string");
  }
  return OkStatus();
}

// The tensors tile the data section, as the format's reader (Metadata::validate) requires: in
// offset order each starts where the previous ended, the first at 0, the last at the file's end.
// Overlapping tensors would alias each other's weights; a gap or a tail is a damaged file.
Status CheckLayout(const std::string& path, const uint8_t* data_begin, size_t data_size,
                   std::vector<TensorInfo>* infos) {
  std::sort(infos->begin(), infos->end(), [](const TensorInfo& a, const TensorInfo& b) {
    return a.data != b.data ? a.data < b.data : a.nbytes < b.nbytes;
  });
  size_t end = 0;
  for (const TensorInfo& t : *infos) {
    const size_t begin = static_cast<size_t>(t.data - data_begin);
    if (begin != end) {
      return DataLoss(path + ": tensor '" + t.name + "' starts at byte " + std::to_string(begin) +
                      " of the data section, where the previous tensor ends at " +
                      std::to_string(end) + (begin < end ? " (overlapping tensors)" : " (a gap)"));
    }
    end = begin + t.nbytes;
  }
  if (end != data_size) {
    return DataLoss(path + ": the tensors end at byte " + std::to_string(end) +
                    " of a data section of " + std::to_string(data_size) + " bytes");
  }
  return OkStatus();
}

}  // namespace

Status SafetensorsArchive::AddFile(const std::string& path) {
  CPM_ASSIGN_OR_RETURN(std::shared_ptr<MmapFile> file, MmapFile::Open(path));
  const uint8_t* p = file->data();
  const size_t size = file->size();
  if (size < 8) return DataLoss(path + ": too short for a safetensors header (" +
                                std::to_string(size) + " bytes)");
  uint64_t header_len = 0;
  std::memcpy(&header_len, p, 8);  // little-endian on x86-64
  if (header_len > size - 8) {
    return DataLoss(path + ": header length " + std::to_string(header_len) +
                    " exceeds the file size " + std::to_string(size));
  }
  json header = json::parse(p + 8, p + 8 + header_len, nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object())
    return DataLoss(path + ": header is not valid JSON");
  const uint8_t* data_begin = p + 8 + header_len;
  const size_t data_size = size - 8 - header_len;
  std::vector<TensorInfo> infos;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      CPM_RETURN_IF_ERROR(CheckMetadata(path, it.value()));
      continue;
    }
    TensorInfo info;
    CPM_RETURN_IF_ERROR(ParseEntry(path, it.key(), it.value(), data_begin, data_size, &info));
    if (tensors_.count(it.key()))
      return DataLoss(path + ": tensor '" + it.key() + "' appears in more than one file");
    infos.push_back(std::move(info));
  }
  CPM_RETURN_IF_ERROR(CheckLayout(path, data_begin, data_size, &infos));
  for (TensorInfo& info : infos) tensors_.emplace(info.name, std::move(info));
  files_.push_back(std::move(file));
  file_names_.push_back(path);
  return OkStatus();
}

StatusOr<SafetensorsArchive> SafetensorsArchive::OpenFile(const std::string& path) {
  SafetensorsArchive a;
  CPM_RETURN_IF_ERROR(a.AddFile(path));
  return a;
}

StatusOr<SafetensorsArchive> SafetensorsArchive::OpenDir(const std::string& dir) {
  const fs::path index = fs::path(dir) / "model.safetensors.index.json";
  std::error_code ec;
  if (fs::exists(index, ec)) {
    CPM_ASSIGN_OR_RETURN(std::string text, ReadTextFile(index.string()));
    json j = json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("weight_map") ||
        !j["weight_map"].is_object())
      return DataLoss(index.string() + ": expected a JSON object with a 'weight_map' object");
    std::map<std::string, std::vector<std::string>> by_file;
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
      if (!it.value().is_string())
        return DataLoss(index.string() + ": weight_map['" + it.key() + "'] is not a file name");
      by_file[it.value().get<std::string>()].push_back(it.key());
    }
    SafetensorsArchive a;
    for (const auto& [file, names] : by_file) {
      const std::string path = (fs::path(dir) / file).string();
      CPM_RETURN_IF_ERROR(a.AddFile(path));
      for (const std::string& n : names) {
        const TensorInfo* t = a.Find(n);
        if (!t || t->file != path)
          return DataLoss(index.string() + ": weight_map says '" + n + "' is in " + file +
                          ", but that file does not hold it");
      }
    }
    return a;
  }
  const fs::path single = fs::path(dir) / "model.safetensors";
  if (fs::exists(single, ec)) return OpenFile(single.string());
  std::vector<std::string> found;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.path().extension() == ".safetensors") found.push_back(e.path().string());
  }
  if (ec) return NotFound(dir + ": cannot read the model directory: " + ec.message());
  if (found.size() == 1) return OpenFile(found[0]);
  if (found.empty()) return NotFound(dir + ": no model.safetensors or model.safetensors.index.json");
  return InvalidArgument(dir + ": several .safetensors files but no model.safetensors.index.json");
}

const TensorInfo* SafetensorsArchive::Find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

size_t SafetensorsArchive::TotalBytes() const {
  size_t n = 0;
  for (const auto& [name, t] : tensors_) n += t.nbytes;
  return n;
}

const std::vector<std::string>& SafetensorsArchive::files() const { return file_names_; }

// ---- writer ----

void SafetensorsWriter::Add(const std::string& name, DType dtype, std::vector<int64_t> shape,
                            std::string bytes) {
  entries_.push_back(Entry{name, dtype, std::move(shape), std::move(bytes)});
}

Status SafetensorsWriter::WriteEntries(const std::string& path,
                                       const std::vector<const Entry*>& entries) {
  json header = json::object();
  uint64_t offset = 0;
  for (const Entry* e : entries) {
    header[e->name] = {{"dtype", ToSafetensorsString(e->dtype)},
                       {"shape", e->shape},
                       {"data_offsets", {offset, offset + e->bytes.size()}}};
    offset += e->bytes.size();
  }
  header["__metadata__"] = {{"format", "pt"}};
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');  // align the data section to 8 bytes
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return InvalidArgument(path + ": cannot create");
  uint64_t len = h.size();
  out.write(reinterpret_cast<const char*>(&len), 8);
  out.write(h.data(), static_cast<std::streamsize>(h.size()));
  for (const Entry* e : entries) out.write(e->bytes.data(), static_cast<std::streamsize>(e->bytes.size()));
  out.close();
  if (!out) return DataLoss(path + ": write error");
  return OkStatus();
}

Status SafetensorsWriter::Write(const std::string& path) const {
  std::vector<const Entry*> all;
  for (const Entry& e : entries_) all.push_back(&e);
  return WriteEntries(path, all);
}

Status SafetensorsWriter::WriteSharded(const std::string& dir, int num_shards) const {
  json weight_map = json::object();
  uint64_t total = 0;
  for (int s = 0; s < num_shards; ++s) {
    char name[64];
    std::snprintf(name, sizeof(name), "model-%05d-of-%05d.safetensors", s + 1, num_shards);
    std::vector<const Entry*> part;
    for (size_t i = s; i < entries_.size(); i += num_shards) {
      part.push_back(&entries_[i]);
      weight_map[entries_[i].name] = name;
      total += entries_[i].bytes.size();
    }
    CPM_RETURN_IF_ERROR(WriteEntries((fs::path(dir) / name).string(), part));
  }
  json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
  return WriteTextFile((fs::path(dir) / "model.safetensors.index.json").string(), index.dump(2));
}

}  // namespace cpm
