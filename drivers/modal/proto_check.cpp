// Checks that the driver's subset of Modal's protos (proto/modal_proto/) is wire-identical to
// the pinned files (proto/pinned/modal_proto/) for everything it keeps: each message with the
// same fields (name, number, type, label, message or enum type), each enum with the same values,
// each RPC with the same request, response and streaming. Usage: CHECK SUBSET.pb PINNED.pb, two
// FileDescriptorSets written by protoc --include_imports.

#include <fstream>
#include <google/protobuf/descriptor.h>
#include <google/protobuf/descriptor.pb.h>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>

using namespace google::protobuf;

namespace {

int g_problems = 0;

void problem(const std::string& what) {
  std::cerr << "proto subset: " << what << "\n";
  ++g_problems;
}

std::unique_ptr<DescriptorPool> load(const char* path, FileDescriptorSet& set) {
  std::ifstream in(path, std::ios::binary);
  if (!in || !set.ParseFromIstream(&in)) {
    std::cerr << "proto subset: cannot read the descriptor set " << path << "\n";
    std::exit(2);
  }
  auto pool = std::make_unique<DescriptorPool>();
  for (const auto& file : set.file()) {
    if (!pool->BuildFile(file)) {
      std::cerr << "proto subset: " << path << ": cannot build " << file.name() << "\n";
      std::exit(2);
    }
  }
  return pool;
}

std::string type_of(const FieldDescriptor& field) {
  std::string type = field.type_name();
  if (field.message_type()) {
    type += " " + field.message_type()->full_name();
  } else if (field.enum_type()) {
    type += " " + field.enum_type()->full_name();
  }
  return type + (field.is_repeated() ? " repeated" : "") +
         (field.has_presence() && !field.message_type() ? " optional" : "") +
         (field.containing_oneof() ? " in oneof " + std::string(field.containing_oneof()->name())
                                   : "");
}

void compare_enum(const EnumDescriptor& kept, const DescriptorPool& full) {
  const EnumDescriptor* pinned = full.FindEnumTypeByName(kept.full_name());
  if (!pinned) {
    problem("enum " + kept.full_name() + " is not in the pinned proto");
    return;
  }
  for (int i = 0; i < kept.value_count(); ++i) {
    const auto* value = kept.value(i);
    const auto* same = pinned->FindValueByName(value->name());
    if (!same || same->number() != value->number()) {
      problem("enum value " + value->full_name() + " differs from the pinned proto");
    }
  }
  if (kept.value_count() != pinned->value_count()) {
    problem("enum " + kept.full_name() + " does not keep all of the pinned values");
  }
}

void compare_message(const Descriptor& kept, const DescriptorPool& full) {
  const Descriptor* pinned = full.FindMessageTypeByName(kept.full_name());
  if (!pinned) {
    problem("message " + kept.full_name() + " is not in the pinned proto");
    return;
  }
  for (int i = 0; i < kept.field_count(); ++i) {
    const auto* field = kept.field(i);
    const auto* same = pinned->FindFieldByNumber(field->number());
    if (!same) {
      problem("field " + field->full_name() + " = " + std::to_string(field->number()) +
              " is not in the pinned proto");
    } else if (same->name() != field->name() || type_of(*same) != type_of(*field)) {
      problem("field " + field->full_name() + " (" + type_of(*field) + ") is " + same->full_name() +
              " (" + type_of(*same) + ") in the pinned proto");
    }
  }
  if (kept.field_count() != pinned->field_count()) {
    problem("message " + kept.full_name() + " does not keep all of the pinned fields");
  }
  for (int i = 0; i < kept.nested_type_count(); ++i) {
    compare_message(*kept.nested_type(i), full);
  }
  for (int i = 0; i < kept.enum_type_count(); ++i) {
    compare_enum(*kept.enum_type(i), full);
  }
}

void compare_service(const ServiceDescriptor& kept, const DescriptorPool& full) {
  const ServiceDescriptor* pinned = full.FindServiceByName(kept.full_name());
  if (!pinned) {
    problem("service " + kept.full_name() + " is not in the pinned proto");
    return;
  }
  for (int i = 0; i < kept.method_count(); ++i) {
    const auto* method = kept.method(i);
    const auto* same = pinned->FindMethodByName(method->name());
    if (!same || same->input_type()->full_name() != method->input_type()->full_name() ||
        same->output_type()->full_name() != method->output_type()->full_name() ||
        same->client_streaming() != method->client_streaming() ||
        same->server_streaming() != method->server_streaming()) {
      problem("rpc " + method->full_name() + " differs from the pinned proto");
    }
  }
}

} // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: " << argv[0] << " SUBSET.pb PINNED.pb\n";
    return 2;
  }
  FileDescriptorSet subset_set, pinned_set;
  auto subset = load(argv[1], subset_set);
  auto pinned = load(argv[2], pinned_set);
  int messages = 0, methods = 0;
  for (const auto& file_proto : subset_set.file()) {
    if (file_proto.name().starts_with("google/")) {
      continue;
    }
    const FileDescriptor* file = subset->FindFileByName(file_proto.name());
    for (int i = 0; i < file->message_type_count(); ++i, ++messages) {
      compare_message(*file->message_type(i), *pinned);
    }
    for (int i = 0; i < file->enum_type_count(); ++i) {
      compare_enum(*file->enum_type(i), *pinned);
    }
    for (int i = 0; i < file->service_count(); ++i) {
      compare_service(*file->service(i), *pinned);
      methods += file->service(i)->method_count();
    }
  }
  if (messages == 0 || methods == 0) {
    problem("the subset holds no message or no rpc");
  }
  std::cout << "proto subset: " << messages << " messages and " << methods << " rpcs checked, "
            << g_problems << " problems\n";
  return g_problems == 0 ? 0 : 1;
}
