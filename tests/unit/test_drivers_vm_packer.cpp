// The vm-packer driver's parts that need no VM: the guest agent's wire format, the Packer
// manifest, the spec and QEMU's argv. The driver against a real QEMU is tests/e2e/test_vm_*.sh.
#include <fstream>
#include <gtest/gtest.h>

#include <sandboxer/error.hpp>

#include "drivers/vm-packer/accel.hpp"
#include "drivers/vm-packer/agent/wire.hpp"
#include "drivers/vm-packer/manifest.hpp"
#include "drivers/vm-packer/qemu_process.hpp"
#include "drivers/vm-packer/spec.hpp"
#include "support/temp_dir.hpp"

namespace sandboxer::drivers::vm_packer {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;
using namespace vm_agent;

TEST(VmAgentWire, FramesSurviveAnySplit) {
  StartRequest start;
  start.argv = {"sh", "-c", "echo 'a b'"};
  start.env = {{"K", "v=1"}, {"EMPTY", ""}};
  start.workdir = "/tmp";
  start.tty = true;
  start.rows = 33;
  start.cols = 111;
  std::string stream =
      encode(Frame{FrameType::start, 7, encode_start(start)}) +
      encode(Frame{FrameType::stdout_data, 7, std::string("\0bin\xff", 5)}) +
      encode(Frame{FrameType::exit, 7, encode_exit({ExitReport::Kind::signaled, 9, ""})});
  FrameReader reader;
  std::vector<Frame> frames;
  for (char byte : stream) { // one byte at a time: the worst split a socket can give
    reader.feed(std::string_view(&byte, 1));
    while (auto frame = reader.next()) {
      frames.push_back(*frame);
    }
  }
  ASSERT_EQ(frames.size(), 3u);
  StartRequest back = decode_start(frames[0].payload);
  EXPECT_EQ(frames[0].channel, 7u);
  EXPECT_EQ(back.argv, start.argv);
  EXPECT_EQ(back.env, start.env);
  EXPECT_EQ(back.workdir, "/tmp");
  EXPECT_TRUE(back.tty);
  EXPECT_FALSE(back.attach_stdin);
  EXPECT_EQ(back.rows, 33);
  EXPECT_EQ(back.cols, 111);
  EXPECT_EQ(frames[1].payload, std::string("\0bin\xff", 5));
  ExitReport exit = decode_exit(frames[2].payload);
  EXPECT_EQ(exit.kind, ExitReport::Kind::signaled);
  EXPECT_EQ(exit.value, 9);
}

TEST(VmAgentWire, BadInputIsAWireError) {
  FrameReader too_long;
  too_long.feed(std::string("\x7f\xff\xff\xff", 4));
  EXPECT_THROW(too_long.next(), WireError);
  FrameReader unknown;
  unknown.feed(std::string("\0\0\0\x05Z\0\0\0\0", 9));
  EXPECT_THROW(unknown.next(), WireError);
  EXPECT_THROW(decode_start(""), WireError);
  EXPECT_THROW(decode_start(encode_start(StartRequest{})), WireError); // no command
  std::string start = encode_start(StartRequest{.argv = {"true"}});
  EXPECT_THROW(decode_start(start + "x"), WireError);
  EXPECT_THROW(decode_start(start.substr(0, start.size() - 1)), WireError);
  EXPECT_THROW(decode_exit(std::string("\x09\0\0\0\0\0\0\0\0", 9)), WireError);
  // Out-of-range statuses: 256 would come back as success, a signal near 2^31 overflows 128+N.
  EXPECT_THROW(decode_exit(encode_exit({ExitReport::Kind::exited, 256, ""})), WireError);
  EXPECT_THROW(decode_exit(encode_exit({ExitReport::Kind::exited, -1, ""})), WireError);
  EXPECT_THROW(decode_exit(encode_exit({ExitReport::Kind::signaled, 0x7ffffff0, ""})), WireError);
  EXPECT_THROW(decode_exit(encode_exit({ExitReport::Kind::signaled, 0, ""})), WireError);
  EXPECT_EQ(decode_exit(encode_exit({ExitReport::Kind::exited, 255, ""})).value, 255);
  EXPECT_EQ(decode_exit(encode_exit({ExitReport::Kind::signaled, 64, ""})).value, 64);
  EXPECT_THROW(decode_size("\x01"), WireError);
}

TEST(VmAgentWire, SkipToFindsTheAnswerAfterStaleBytes) {
  const std::string answer = encode(Frame{FrameType::hello_ack, 0, "12345678"});
  FrameReader reader;
  reader.feed("stale bytes of an earlier session" + answer.substr(0, 5));
  EXPECT_FALSE(reader.skip_to(answer));
  reader.feed(answer.substr(5) + "next");
  EXPECT_TRUE(reader.skip_to(answer));
  auto frame = reader.next();
  ASSERT_TRUE(frame);
  EXPECT_EQ(frame->type, FrameType::hello_ack);
  EXPECT_EQ(frame->payload, "12345678");
}

TEST(PackerManifest, TheLastQemuBuildOfTheLastRun) {
  json manifest = {{"last_run_uuid", "run-2"},
                   {"builds",
                    {{{"builder_type", "qemu"},
                      {"packer_run_uuid", "run-1"},
                      {"files", {{{"name", "old.qcow2"}}}}},
                     {{"builder_type", "docker"},
                      {"packer_run_uuid", "run-2"},
                      {"files", {{{"name", "x.tar"}}}}},
                     {{"builder_type", "qemu"},
                      {"packer_run_uuid", "run-2"},
                      {"files", {{{"name", "out/disk.qcow2"}}, {{"name", "out/notes.txt"}}}}},
                     {{"builder_type", "qemu"},
                      {"packer_run_uuid", "run-1"},
                      {"files", {{{"name", "old2.qcow2"}}}}}}}};
  EXPECT_EQ(packer_image(manifest, "/images"), fs::path("/images/out/disk.qcow2"));
  manifest["builds"][2]["files"][0]["name"] = "/abs/disk.qcow2";
  EXPECT_EQ(packer_image(manifest, "/images"), fs::path("/abs/disk.qcow2"));
}

TEST(PackerManifest, SaysWhatIsMissing) {
  auto error_of = [](const json& manifest) {
    try {
      packer_image(manifest, "/m");
    } catch (const ManifestError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(error_of(json::object()), "not a Packer manifest: no \"builds\" list");
  EXPECT_EQ(error_of({{"builds", {{{"builder_type", "docker"}}}}}),
            "no build of the qemu builder in it");
  EXPECT_EQ(error_of({{"builds", {{{"builder_type", "qemu"}, {"files", json::array()}}}}}),
            "its qemu build lists no files");
  EXPECT_EQ(error_of({{"builds",
                       {{{"builder_type", "qemu"},
                         {"files", {{{"name", "a.raw"}}, {{"name", "b.txt"}}}}}}}}),
            "its qemu build lists 2 files and none is a .qcow2");
  testing::TempDir dir;
  std::ofstream(dir / "bad.json") << "{ not json";
  EXPECT_THROW(packer_image_file(dir / "bad.json"), ManifestError);
  EXPECT_THROW(packer_image_file(dir / "missing.json"), ManifestError);
}

std::string error_of(const json& section, const fs::path& directory) {
  SpecOrigin origin{[&](const std::string&) { return directory; }};
  try {
    parse_profile_section(section, origin);
  } catch (const SpecError& e) {
    return e.pointer() + ": " + e.what();
  }
  return "accepted";
}

TEST(VmPackerSpec, FromAProfileWithAManifest) {
  testing::TempDir dir;
  fs::create_directories(dir / "output");
  std::ofstream(dir / "output/tiny.qcow2") << "not really an image";
  std::ofstream(dir / "manifest.json")
      << json({{"builds",
                {{{"builder_type", "qemu"}, {"files", {{{"name", "output/tiny.qcow2"}}}}}}}})
             .dump();
  std::ofstream(dir / "vmlinuz") << "kernel";
  ::setenv("XDG_CACHE_HOME", (dir / "cache").c_str(), 1);
  SpecOrigin origin{[&](const std::string&) { return dir.path(); }};
  Spec spec = parse_profile_section(
      {{"manifest", "manifest.json"}, {"kernel", "vmlinuz"}, {"memory", "256m"}, {"accel", "tcg"}},
      origin);
  ::unsetenv("XDG_CACHE_HOME");
  EXPECT_EQ(spec.image, dir / "output/tiny.qcow2");
  // sha256("not really an image"), from sha256sum.
  EXPECT_EQ(spec.image_sha256.size(), 64u);
  EXPECT_EQ(spec.memory_mb, 256);
  EXPECT_EQ(spec.accel, Spec::Accel::tcg);
  EXPECT_FALSE(spec.restricted_network); // no network unless asked
  json stored = to_json(spec);
  EXPECT_EQ(to_json(parse_spec(stored)), stored);
  EXPECT_EQ(stored["image_sha256"], spec.image_sha256);
}

TEST(VmPackerSpec, ErrorsNameTheKey) {
  testing::TempDir dir;
  std::ofstream(dir / "disk.qcow2") << "x";
  std::ofstream(dir / "m.json") << "{}";
  EXPECT_EQ(error_of(json::object(), dir.path()),
            ": give either manifest (a Packer manifest) or image (a qcow2 file)");
  EXPECT_EQ(error_of({{"image", "nope.qcow2"}}, dir.path()),
            "/image: no such file: " + (dir / "nope.qcow2").string());
  EXPECT_EQ(error_of({{"manifest", "m.json"}}, dir.path()),
            "/manifest: " + (dir / "m.json").string() +
                ": not a Packer manifest: no \"builds\" list");
  EXPECT_EQ(error_of({{"image", "disk.qcow2"}, {"accel", "hvf"}}, dir.path()),
            "/accel: expected one of auto, kvm, tcg, not hvf");
  EXPECT_EQ(error_of({{"image", "disk.qcow2"}, {"ports", {8080}}}, dir.path()),
            "/ports: forwarded ports need network: restricted (the VM has no network otherwise)");
  EXPECT_EQ(error_of({{"image", "disk.qcow2"}, {"append", "quiet"}}, dir.path()),
            "/append: initrd and append need kernel (direct kernel boot)");
  EXPECT_EQ(error_of({{"image", "disk.qcow2"}, {"memroy", "1g"}}, dir.path()).substr(0, 8),
            "/memroy:");
}

TEST(VmPackerQemu, ArgvHasNoShellAndOnlyLoopbackForwards) {
  Spec spec;
  spec.image = "/images/tiny.qcow2";
  spec.kernel = "/k/vmlinuz";
  spec.append = "console=ttyS0 quiet";
  spec.restricted_network = true;
  spec.agent_ports = 2;
  Launch launch;
  launch.name = "sbx-abc";
  launch.forwards = {{22, 40022}, {8080, 40080}};
  launch.loadvm = "snp-1";
  auto argv = qemu_argv(spec, launch);
  auto has = [&](const std::string& a, const std::string& b) {
    for (std::size_t i = 0; i + 1 < argv.size(); ++i) {
      if (argv[i] == a && argv[i + 1] == b) {
        return true;
      }
    }
    return false;
  };
  EXPECT_EQ(argv[0], "qemu-system-x86_64");
  EXPECT_TRUE(has("-name", "sbx-abc"));
  EXPECT_TRUE(has("-accel", "tcg"));
  EXPECT_TRUE(has("-append", "console=ttyS0 quiet")); // one argument, spaces and all
  EXPECT_TRUE(has("-netdev", "user,id=net0,restrict=on,hostfwd=tcp:127.0.0.1:40022-:22,"
                             "hostfwd=tcp:127.0.0.1:40080-:8080"));
  EXPECT_TRUE(has("-loadvm", "snp-1"));
  EXPECT_TRUE(
      has("-device", "virtserialport,bus=serial0.0,chardev=agent1,name=org.sandboxer.agent.1"));
  EXPECT_FALSE(
      has("-device", "virtserialport,bus=serial0.0,chardev=agent2,name=org.sandboxer.agent.2"));
  spec.restricted_network = false;
  for (const auto& arg : qemu_argv(spec, launch)) {
    EXPECT_EQ(arg.find("netdev"), std::string::npos) << "network: none has no NIC";
  }
}

} // namespace
} // namespace sandboxer::drivers::vm_packer

namespace sandboxer::drivers::vm_packer {
namespace {

// The flags of a machine whose /dev/kvm is kvm-pvm: it opens, but no vmx or svm (issue 33).
constexpr const char* k_pvm_flags = " fpu vme de pse tsc msr pae mce cx8 apic sep hypervisor "
                                    "lahf_lm abm 3dnowprefetch";

TEST(VmAccel, AutoPassesOverKvmThatAdvertisesNoHardwareVirtualization) {
  AccelChoice choice = choose_accel(Spec::Accel::automatic, {true, k_pvm_flags});
  EXPECT_FALSE(choice.kvm);
  EXPECT_NE(choice.reason.find("TCG"), std::string::npos) << choice.reason;
  EXPECT_NE(choice.reason.find("no vmx or svm"), std::string::npos) << choice.reason;
}

TEST(VmAccel, AutoTakesKvmWithVmxOrSvm) {
  EXPECT_TRUE(choose_accel(Spec::Accel::automatic, {true, " fpu vmx sse"}).kvm);
  EXPECT_TRUE(choose_accel(Spec::Accel::automatic, {true, " fpu sse svm"}).kvm);
  // A word that only contains the letters is not the flag.
  EXPECT_FALSE(choose_accel(Spec::Accel::automatic, {true, " vmx_ept svmlock"}).kvm);
}

TEST(VmAccel, AutoWithoutDevKvmIsTcgAndSaysSo) {
  AccelChoice choice = choose_accel(Spec::Accel::automatic, {false, " vmx"});
  EXPECT_FALSE(choice.kvm);
  EXPECT_NE(choice.reason.find("no usable /dev/kvm"), std::string::npos) << choice.reason;
}

TEST(VmAccel, WrittenChoiceIsKeptOrRefusedWhenKvmCannotOpen) {
  EXPECT_TRUE(choose_accel(Spec::Accel::kvm, {true, k_pvm_flags}).kvm);
  EXPECT_FALSE(choose_accel(Spec::Accel::tcg, {true, " vmx"}).kvm);
  try {
    choose_accel(Spec::Accel::kvm, {false, " vmx"});
    FAIL() << "accel: kvm without /dev/kvm was accepted";
  } catch (const DriverError& e) {
    EXPECT_EQ(e.kind(), DriverError::Kind::invalid_spec);
    EXPECT_NE(std::string(e.what()).find("/dev/kvm"), std::string::npos);
  }
}

} // namespace
} // namespace sandboxer::drivers::vm_packer
