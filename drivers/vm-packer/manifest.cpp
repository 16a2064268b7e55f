#include "drivers/vm-packer/manifest.hpp"

#include <fmt/format.h>
#include <fstream>
#include <sstream>

namespace sandboxer::drivers::vm_packer {
namespace {

using nlohmann::json;

std::string text_or_empty(const json& object, const char* key) {
  auto found = object.find(key);
  return found != object.end() && found->is_string() ? found->get<std::string>() : "";
}

} // namespace

std::filesystem::path packer_image(const json& manifest, const std::filesystem::path& directory) {
  if (!manifest.is_object() || !manifest.contains("builds") || !manifest["builds"].is_array()) {
    throw ManifestError("not a Packer manifest: no \"builds\" list");
  }
  const std::string last_run = text_or_empty(manifest, "last_run_uuid");
  const json* chosen = nullptr;
  const json* chosen_any_run = nullptr;
  for (const json& build : manifest["builds"]) {
    if (!build.is_object() || text_or_empty(build, "builder_type") != "qemu") {
      continue;
    }
    chosen_any_run = &build;
    if (last_run.empty() || text_or_empty(build, "packer_run_uuid") == last_run) {
      chosen = &build;
    }
  }
  if (!chosen) {
    chosen = chosen_any_run;
  }
  if (!chosen) {
    throw ManifestError("no build of the qemu builder in it");
  }
  const json files = chosen->value("files", json::array());
  std::string name;
  int named = 0;
  for (const json& file : files.is_array() ? files : json::array()) {
    std::string candidate = file.is_object() ? text_or_empty(file, "name") : "";
    if (candidate.empty()) {
      continue;
    }
    ++named;
    if (name.empty() || (candidate.ends_with(".qcow2") && !name.ends_with(".qcow2"))) {
      name = candidate;
    }
  }
  if (name.empty()) {
    throw ManifestError("its qemu build lists no files");
  }
  if (named > 1 && !name.ends_with(".qcow2")) {
    throw ManifestError(fmt::format("its qemu build lists {} files and none is a .qcow2", named));
  }
  std::filesystem::path path = name;
  return (path.is_relative() ? directory / path : path).lexically_normal();
}

std::filesystem::path packer_image_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw ManifestError("cannot read it");
  }
  std::stringstream text;
  text << in.rdbuf();
  json manifest = json::parse(text.str(), nullptr, false);
  if (manifest.is_discarded()) {
    throw ManifestError("not JSON");
  }
  return packer_image(manifest, path.parent_path());
}

} // namespace sandboxer::drivers::vm_packer
