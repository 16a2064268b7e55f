// The vm-packer driver's parts that need no VM: the guest agent's wire format, the Packer
// manifest, the spec, QEMU's argv, the serial console's reader (logs) and pause's record and
// decisions. The driver against a real QEMU is tests/e2e/test_vm_*.sh and test_pause_vm.sh.
#include <chrono>
#include <cstdlib>
#include <fmt/format.h>
#include <fstream>
#include <gtest/gtest.h>
#include <iostream>
#include <iterator>
#include <thread>
#include <unistd.h>

#include <sandboxer/error.hpp>

#include "drivers/vm-packer/accel.hpp"
#include "drivers/vm-packer/agent/wire.hpp"
#include "drivers/vm-packer/console_log.hpp"
#include "drivers/vm-packer/manifest.hpp"
#include "drivers/vm-packer/pause_state.hpp"
#include "drivers/vm-packer/qemu_process.hpp"
#include "drivers/vm-packer/qmp.hpp"
#include "drivers/vm-packer/spec.hpp"
#include "drivers/vm-packer/vm_driver.hpp"
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

// The ledger keeps the stored form, so its bytes are the ones the driver wrote before its spec
// moved onto the field table (defaults filled in, optional fields left out, durations in their
// shortest exact unit).
TEST(VmPackerSpec, TheStoredFormKeepsItsBytes) {
  json every = {
      {"manifest", "/m/manifest.json"},
      {"image", "/m/out/tiny.qcow2"},
      {"image_sha256", "ab12"},
      {"cpus", "2"},
      {"memory", "1536m"},
      {"accel", "tcg"},
      {"kernel", "/m/vmlinuz"},
      {"initrd", "/m/initrd.img"},
      {"append", "console=ttyS0"},
      {"exec", {{"via", "ssh"}, {"user", "deploy"}, {"identity_file", "/m/key"}, {"port", 2222}}},
      {"network", "restricted"},
      {"ports", {8080, "9090"}},
      {"qemu", "qemu-kvm"},
      {"ready_timeout", "90000ms"},
      {"stop_timeout", "1500ms"}};
  EXPECT_EQ(to_json(parse_spec(every)).dump(),
            R"({"accel":"tcg","append":"console=ttyS0","cpus":2,"exec":{"agent_ports":4,)"
            R"("identity_file":"/m/key","port":2222,"user":"deploy","via":"ssh"},)"
            R"("image":"/m/out/tiny.qcow2","image_sha256":"ab12","initrd":"/m/initrd.img",)"
            R"("kernel":"/m/vmlinuz","manifest":"/m/manifest.json","memory":1536,)"
            R"("network":"restricted","ports":[8080,9090],"qemu":"qemu-kvm",)"
            R"("ready_timeout":"1m30s","snapshot_timeout":"5m","stop_timeout":"1500ms"})");
  EXPECT_EQ(to_json(parse_spec({{"image", "/m/tiny.qcow2"}})).dump(),
            R"({"accel":"auto","cpus":1,"exec":{"agent_ports":4,"port":22,"user":"root",)"
            R"("via":"agent"},"image":"/m/tiny.qcow2","image_sha256":"","memory":512,)"
            R"("network":"none","ports":[],"qemu":"qemu-system-x86_64","ready_timeout":"3m",)"
            R"("snapshot_timeout":"5m","stop_timeout":"10s"})");
}

TEST(VmPackerQemu, ArgvHasNoShellAndOnlyLoopbackForwards) {
  Spec spec;
  spec.image = "/images/tiny.qcow2";
  spec.kernel = "/k/vmlinuz";
  spec.append = "console=ttyS0 quiet";
  spec.restricted_network = true;
  spec.exec.agent_ports = 2;
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

// The lines a console reader or the driver's logs() handed over.
struct Lines : LogSink {
  std::vector<LogLine> seen;
  void line(const LogLine& line) override { seen.push_back(line); }
  std::vector<std::string> texts() const {
    std::vector<std::string> out;
    for (const auto& line : seen) {
      out.push_back(line.text);
    }
    return out;
  }
  std::vector<std::string> take() {
    auto out = texts();
    seen.clear();
    return out;
  }
};

void append(const fs::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::app) << bytes;
}

using Texts = std::vector<std::string>;

TEST(VmConsoleLog, LinesOfStreamConsoleWithoutTimeOrLineEnding) {
  testing::TempDir dir;
  append(dir / "serial.log", "[    0.000000] Linux version 6.1.0\r\n\r\n10%\r20%\r\nplain\n");
  Lines lines;
  ConsoleReader console(dir / "serial.log", 0);
  EXPECT_EQ(console.read(lines), 53u);
  EXPECT_FALSE(console.holds_partial());
  // A '\r' inside a line (a redrawn progress line) is what the guest wrote: kept.
  EXPECT_EQ(lines.texts(), (Texts{"[    0.000000] Linux version 6.1.0", "", "10%\r20%", "plain"}));
  for (const auto& line : lines.seen) {
    EXPECT_EQ(line.stream, "console");
    EXPECT_FALSE(line.time.has_value());
  }
}

TEST(VmConsoleLog, ALineWithoutItsNewlineWaitsUntilWholeOrFlushed) {
  testing::TempDir dir;
  const fs::path log = dir / "serial.log";
  append(log, "boot\r\nsandboxer lo");
  Lines lines;
  ConsoleReader console(log, 0);
  console.read(lines);
  EXPECT_EQ(lines.take(), Texts{"boot"});
  EXPECT_TRUE(console.holds_partial());
  append(log, "gin: ");
  EXPECT_EQ(console.read(lines), 5u);
  EXPECT_TRUE(lines.seen.empty()); // still no newline
  console.flush(lines);            // a prompt: shown as it is
  EXPECT_EQ(lines.take(), Texts{"sandboxer login: "});
  EXPECT_FALSE(console.holds_partial());
  // Only the line ending comes after it: no empty line.
  append(log, "\r\n");
  console.read(lines);
  EXPECT_TRUE(lines.seen.empty());
  // The rest of a flushed line is a line of its own; then lines as usual.
  append(log, "half");
  console.read(lines);
  console.flush(lines);
  append(log, " and rest\r\n\r\nnext\r\n");
  console.read(lines);
  EXPECT_EQ(lines.take(), (Texts{"half", " and rest", "", "next"}));
  // Nothing held back: flush hands nothing over.
  console.flush(lines);
  EXPECT_TRUE(lines.seen.empty());
}

TEST(VmConsoleLog, BytesArrivingOneByOneMakeTheSameLines) {
  testing::TempDir dir;
  const std::string text = "one\r\ntwo\r\n\r\nthree\n";
  append(dir / "serial.log", "");
  Lines lines;
  ConsoleReader console(dir / "serial.log", 0);
  for (char byte : text) { // what QEMU's emulated UART does: a byte at a time
    append(dir / "serial.log", std::string(1, byte));
    console.read(lines);
  }
  EXPECT_EQ(lines.texts(), (Texts{"one", "two", "", "three"}));
}

TEST(VmConsoleLog, AVeryLongLineComesInPieces) {
  testing::TempDir dir;
  append(dir / "serial.log", std::string(64 * 1024 + 10, 'x'));
  Lines lines;
  ConsoleReader console(dir / "serial.log", 0);
  console.read(lines);
  ASSERT_EQ(lines.seen.size(), 1u);
  EXPECT_EQ(lines.seen[0].text.size(), 64u * 1024);
  append(dir / "serial.log", "\r\n");
  console.read(lines);
  ASSERT_EQ(lines.seen.size(), 2u);
  EXPECT_EQ(lines.seen[1].text, std::string(10, 'x'));
}

TEST(VmConsoleLog, StartOfTheLastLines) {
  testing::TempDir dir;
  const fs::path log = dir / "serial.log";
  EXPECT_EQ(start_of_last_lines(log, 3), 0u); // no file
  append(log, "");
  EXPECT_EQ(start_of_last_lines(log, 1), 0u);
  append(log, "a\nb\nc\n");
  EXPECT_EQ(start_of_last_lines(log, 1), 4u);
  EXPECT_EQ(start_of_last_lines(log, 2), 2u);
  EXPECT_EQ(start_of_last_lines(log, 3), 0u);
  EXPECT_EQ(start_of_last_lines(log, 9), 0u);
  EXPECT_EQ(start_of_last_lines(log, 0), 6u);
  append(log, "par"); // an unfinished last line counts as one
  EXPECT_EQ(start_of_last_lines(log, 1), 6u);
  EXPECT_EQ(start_of_last_lines(log, 2), 4u);
  // Across the 64 KiB chunks it reads backwards in.
  const fs::path big = dir / "big.log";
  std::string text;
  for (int i = 0; i < 20000; ++i) {
    text += fmt::format("line {:05}\r\n", i); // 12 bytes a line
  }
  append(big, text);
  EXPECT_EQ(start_of_last_lines(big, 1), 19999u * 12);
  EXPECT_EQ(start_of_last_lines(big, 15000), 5000u * 12);
  Lines lines;
  ConsoleReader console(big, start_of_last_lines(big, 2));
  console.read(lines);
  EXPECT_EQ(lines.texts(), (Texts{"line 19998", "line 19999"}));
}

TEST(VmConsoleLog, StartedInsideALineItsEndingIsNoLine) {
  testing::TempDir dir;
  const fs::path log = dir / "serial.log";
  append(log, "done\nprompt> ");
  Lines lines;
  ConsoleReader console(log, start_of_last_lines(log, 0)); // --tail 0: only what comes
  console.read(lines);
  console.flush(lines);
  EXPECT_TRUE(lines.seen.empty());
  append(log, "\r\nnew\r\n");
  console.read(lines);
  EXPECT_EQ(lines.texts(), Texts{"new"});
}

TEST(VmConsoleLog, AMissingLogIsNotFound) {
  testing::TempDir dir;
  try {
    ConsoleReader console(dir / "serial.log", 0);
    FAIL() << "a missing serial log was read";
  } catch (const DriverError& e) {
    EXPECT_EQ(e.kind(), DriverError::Kind::not_found);
    EXPECT_NE(std::string(e.what()).find("serial.log"), std::string::npos) << e.what();
  }
}

// logs() of the driver on a VM directory whose QEMU is not running (it stopped, or never ran
// here): the whole log, its tail, and a follow that ends at once with the unfinished last line.
TEST(VmPackerLogs, ReadsTheSerialLogOfTheVmDirectory) {
  const auto& factory = vm_packer_factory();
  EXPECT_TRUE(factory.capabilities().logs);
  testing::TempDir dir;
  std::ofstream(dir / "disk.qcow2") << "x";
  json spec = {{"image", (dir / "disk.qcow2").string()}, {"image_sha256", std::string(64, '0')}};
  struct : Progress {
    void update(std::string_view) override {}
  } progress;
  DriverContext context;
  context.data_dir = dir / "data";
  context.progress = &progress;
  auto driver = factory.open(factory.parse_spec(spec), context);
  SandboxHandle vm{.sandbox_id = "sbx-logs", .backend_id = "sbx-logs"};
  fs::create_directories(dir / "data/vms/sbx-logs");
  append(dir / "data/vms/sbx-logs/serial.log", "Linux\r\nsandboxer-init: agent starting\r\n$ ");

  Lines lines;
  driver->logs(vm, {}, lines);
  EXPECT_EQ(lines.take(), (Texts{"Linux", "sandboxer-init: agent starting", "$ "}));
  driver->logs(vm, {.tail = 2}, lines);
  EXPECT_EQ(lines.take(), (Texts{"sandboxer-init: agent starting", "$ "}));
  // Lines without a time are all kept by `since`.
  driver->logs(vm, {.since = TimePoint::max()}, lines);
  EXPECT_EQ(lines.take().size(), 3u);
  driver->logs(vm, {.follow = true, .tail = 1}, lines); // no QEMU runs: nothing to wait for
  EXPECT_EQ(lines.take(), Texts{"$ "});

  try {
    driver->logs({.sandbox_id = "sbx-gone", .backend_id = "sbx-gone"}, {}, lines);
    FAIL() << "logs of a VM without a directory answered";
  } catch (const DriverError& e) {
    EXPECT_EQ(e.kind(), DriverError::Kind::not_found);
  }
}

} // namespace
} // namespace sandboxer::drivers::vm_packer

// Pause and resume (docs/drivers/vm-packer.md): the record a paused VM keeps, the decisions a
// repeat takes, QEMU's argv for a resume, and the driver on a paused VM's directory (no QEMU).
namespace sandboxer::drivers::vm_packer {
namespace {

PausedVm checkpoint_record() {
  PausedVm paused;
  paused.pause_id = "pse-abc";
  paused.memory = true;
  paused.tag = pause_tag("pse-abc");
  paused.kvm = false;
  paused.cpus = 1;
  paused.memory_mb = 256;
  paused.bytes = 99639778;
  paused.forwards = {{22, 40022}};
  paused.exposed = {{"udp", "127.0.0.1", 40053, 53}};
  return paused;
}

TEST(VmPackerPause, TheRecordReadsBackAndRefusesWhatItCannotResume) {
  const PausedVm paused = checkpoint_record();
  EXPECT_EQ(paused.tag, "sandboxer-pause-pse-abc");
  json file = to_json(paused);
  EXPECT_EQ(file["accel"], "tcg");
  EXPECT_EQ(file["tag"], "sandboxer-pause-pse-abc");
  EXPECT_EQ(file["ports"], json({{"22", "127.0.0.1:40022"}}));
  EXPECT_EQ(paused_vm_of(file), paused);
  EXPECT_EQ(paused_vm_of(json::parse(file.dump())), paused) << "through its text";

  PausedVm cold = paused;
  cold.memory = false;
  cold.tag.clear();
  cold.bytes.reset();
  EXPECT_TRUE(to_json(cold)["tag"].is_null());
  EXPECT_EQ(paused_vm_of(to_json(cold)), cold);

  auto without = [&](const std::string& key) {
    json copy = file;
    copy.erase(key);
    return copy;
  };
  EXPECT_EQ(paused_vm_of(json()), std::nullopt);
  EXPECT_EQ(paused_vm_of(json::array()), std::nullopt);
  EXPECT_EQ(paused_vm_of(without("pause_id")), std::nullopt);
  EXPECT_EQ(paused_vm_of(without("accel")), std::nullopt) << "the accelerator is never guessed";
  EXPECT_EQ(paused_vm_of(without("tag")), std::nullopt) << "a checkpoint without its name";
  EXPECT_EQ(paused_vm_of(without("memory_mb")), std::nullopt);
  json other_accel = file;
  other_accel["accel"] = "hvf";
  EXPECT_EQ(paused_vm_of(other_accel), std::nullopt);
  json foreign_tag = file;
  foreign_tag["tag"] = "snp-1"; // a user's snapshot is never deleted as a pause's
  EXPECT_EQ(paused_vm_of(foreign_tag), std::nullopt);
  json no_bytes = file;
  no_bytes["bytes"] = nullptr;
  EXPECT_EQ(paused_vm_of(no_bytes)->bytes, std::nullopt);

  EXPECT_TRUE(is_pause_tag("sandboxer-pause-pse-1"));
  EXPECT_FALSE(is_pause_tag("sandboxer-pause-"));
  EXPECT_FALSE(is_pause_tag("snp-0123"));
}

TEST(VmPackerPause, StatusDetailSaysWhatIsHeld) {
  PausedVm paused = checkpoint_record();
  EXPECT_EQ(paused_detail(paused), "checkpoint 95 MiB on disk (TCG): resume loads it");
  paused.bytes.reset();
  EXPECT_EQ(paused_detail(paused),
            "checkpoint sandboxer-pause-pse-abc on disk (TCG): resume loads it");
  paused.memory = false;
  EXPECT_EQ(paused_detail(paused), "stopped for a pause: its disk is kept, resume boots it again");
}

TEST(VmPackerPause, ARepeatFinishesWhereTheLastOneStopped) {
  EXPECT_EQ(qemu_seen_of("running"), QemuSeen::running);
  EXPECT_EQ(qemu_seen_of("paused"), QemuSeen::stopped);
  EXPECT_EQ(qemu_seen_of("inmigrate"), QemuSeen::other);

  // Paused already: answered from pause.json, no QEMU touched.
  EXPECT_EQ(pause_step(true, QemuSeen::none, false), PauseStep::already_paused);
  // QEMU there: running (a first pause), stopped (one interrupted before or during its save), or
  // running with pause.json (a resume that had started QEMU): saved and quit.
  EXPECT_EQ(pause_step(false, QemuSeen::running, false), PauseStep::save);
  EXPECT_EQ(pause_step(false, QemuSeen::stopped, true), PauseStep::save);
  EXPECT_EQ(pause_step(true, QemuSeen::running, false), PauseStep::save);
  // QEMU gone, no record: it quit after the save (the tag is there), or without one.
  EXPECT_EQ(pause_step(false, QemuSeen::none, true), PauseStep::record_checkpoint);
  EXPECT_EQ(pause_step(false, QemuSeen::none, false), PauseStep::record_stop);

  EXPECT_EQ(resume_step(true, QemuSeen::none), ResumeStep::launch);
  EXPECT_EQ(resume_step(false, QemuSeen::none), ResumeStep::launch);
  EXPECT_EQ(resume_step(false, QemuSeen::running), ResumeStep::running);
  EXPECT_EQ(resume_step(true, QemuSeen::running), ResumeStep::finish);
  EXPECT_EQ(resume_step(false, QemuSeen::stopped), ResumeStep::cont);
  EXPECT_EQ(resume_step(true, QemuSeen::stopped), ResumeStep::cont);
  EXPECT_EQ(resume_step(true, QemuSeen::other), ResumeStep::refuse);
}

TEST(VmPackerPause, ResumeLoadsTheCheckpointUnderTheRecordedAccelerator) {
  Spec spec;
  spec.image = "/images/tiny.qcow2";
  spec.accel = Spec::Accel::kvm; // what the profile asks now does not matter: the record does
  spec.restricted_network = true;
  PausedVm paused = checkpoint_record();
  Launch launch = launch_of(paused, "sbx-p");
  auto argv = qemu_argv(spec, launch);
  auto has = [&](const std::string& a, const std::string& b) {
    for (std::size_t i = 0; i + 1 < argv.size(); ++i) {
      if (argv[i] == a && argv[i + 1] == b) {
        return true;
      }
    }
    return false;
  };
  EXPECT_TRUE(has("-accel", "tcg"));
  EXPECT_TRUE(has("-cpu", "max"));
  EXPECT_TRUE(has("-loadvm", "sandboxer-pause-pse-abc"));
  EXPECT_TRUE(has("-netdev", "user,id=net0,restrict=on,hostfwd=tcp:127.0.0.1:40022-:22,"
                             "hostfwd=udp:127.0.0.1:40053-:53"));
  EXPECT_NE(launch.accel_reason.find("TCG"), std::string::npos) << launch.accel_reason;

  paused.kvm = true;
  argv = qemu_argv(spec, launch_of(paused, "sbx-p"));
  EXPECT_TRUE(has("-accel", "kvm"));
  EXPECT_TRUE(has("-cpu", "host"));

  paused.memory = false; // a pause without memory boots the disk
  argv = qemu_argv(spec, launch_of(paused, "sbx-p"));
  EXPECT_EQ(std::find(argv.begin(), argv.end(), "-loadvm"), argv.end());
}

TEST(VmPackerPause, PortsFromTheBindingsSameHostPortsWhereFree) {
  std::vector<PortBinding> bindings = {
      {.port = 8080, .protocol = "tcp", .host = "127.0.0.1", .host_port = 41080},
      {.port = 8080, .protocol = "udp", .host = "0.0.0.0", .host_port = 41081},
      {.port = 9000, .protocol = "tcp", .host = "127.0.0.1", .host_port = 41090},
      {.port = 7000, .protocol = "tcp", .host = "127.0.0.1", .host_port = std::nullopt}};
  // 9000/tcp is a forward of vm.ports (in info.ports), not one of the profile's ports:.
  auto exposed = exposed_of_bindings(bindings, {9000});
  ASSERT_EQ(exposed.size(), 2u);
  EXPECT_EQ(exposed[0], (Exposed{"tcp", "127.0.0.1", 41080, 8080}));
  EXPECT_EQ(exposed[1], (Exposed{"udp", "0.0.0.0", 41081, 8080}));

  EXPECT_EQ(forwards_of_info({{"22", "127.0.0.1:40022"}, {"x", "1"}, {"80", "nohost"}}),
            (std::map<int, int>{{22, 40022}}));
  EXPECT_EQ(forwards_info({{22, 40022}}), json({{"22", "127.0.0.1:40022"}}));

  Launch launch;
  launch.forwards = {{22, 40022}, {9000, 41090}};
  launch.exposed = exposed;
  std::vector<std::string> asked;
  auto taken = [&](const std::string& protocol, const std::string& address, int port) {
    asked.push_back(fmt::format("{}/{}:{}", protocol, address, port));
    return port == 41090 || port == 41081;
  };
  int next = 50000;
  auto pick = [&](const std::string&, const std::string&) { return next++; };
  EXPECT_TRUE(repick_taken_ports(launch, taken, pick));
  EXPECT_EQ(launch.forwards, (std::map<int, int>{{22, 40022}, {9000, 50000}}));
  EXPECT_EQ(launch.exposed[0].host_port, 41080);
  EXPECT_EQ(launch.exposed[1].host_port, 50001);
  EXPECT_EQ(asked, (std::vector<std::string>{"tcp/127.0.0.1:40022", "tcp/127.0.0.1:41090",
                                             "tcp/127.0.0.1:41080", "udp/0.0.0.0:41081"}));
  EXPECT_FALSE(repick_taken_ports(
      launch, [](const std::string&, const std::string&, int) { return false; }, pick));
}

// The driver on a paused VM's directory: pause.json and no QEMU. Nothing here starts a process.
class VmPackerPausedDir : public ::testing::Test {
protected:
  void SetUp() override {
    std::ofstream(m_dir / "disk.qcow2") << "x";
    json spec = {{"image", (m_dir / "disk.qcow2").string()},
                 {"image_sha256", std::string(64, '0')},
                 {"memory", 256}};
    m_context.data_dir = m_dir / "data";
    m_context.progress = &m_progress;
    m_driver = m_factory.open(m_factory.parse_spec(spec), m_context);
    fs::create_directories(vm_dir());
    std::ofstream(vm_dir() / "labels.json")
        << json({{"sandbox", "sbx-p"}, {"labels", {{"sandboxer.id", "sbx-p"}}}}).dump();
    std::ofstream(vm_dir() / "pause.json") << to_json(checkpoint_record()).dump();
  }
  fs::path vm_dir() const { return m_dir / "data/vms/sbx-p"; }

  const DriverFactory& m_factory = vm_packer_factory();
  testing::TempDir m_dir;
  struct : Progress {
    void update(std::string_view) override {}
  } m_progress;
  DriverContext m_context;
  std::unique_ptr<Driver> m_driver;
  SandboxHandle m_vm{.sandbox_id = "sbx-p", .backend_id = "sbx-p"};
};

TEST_F(VmPackerPausedDir, IsPausedForStatusAndList) {
  EXPECT_TRUE(m_factory.capabilities().pause);
  EXPECT_FALSE(m_factory.capabilities().pause_emulated);
  BackendStatus status = m_driver->status(m_vm);
  EXPECT_EQ(status.state, BackendStatus::State::paused);
  EXPECT_EQ(status.detail, "checkpoint 95 MiB on disk (TCG): resume loads it");
  auto found = m_driver->list_remote({{"sandboxer.id", "sbx-p"}});
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].state, "paused");

  std::ofstream(vm_dir() / "pause.json") << "{not json";
  status = m_driver->status(m_vm);
  EXPECT_EQ(status.state, BackendStatus::State::unknown);
  EXPECT_NE(status.detail.find("pause.json"), std::string::npos) << status.detail;
}

TEST_F(VmPackerPausedDir, APauseOfAPausedVmAnswersItsRecord) {
  // A new pause id: the VM is paused already, the first pause stands.
  PauseResult result = m_driver->pause(m_vm, {.pause_id = "pse-other"});
  EXPECT_TRUE(result.memory_kept);
  EXPECT_EQ(result.how, "checkpoint");
  EXPECT_EQ(result.held_bytes, 99639778u);
  EXPECT_TRUE(result.info["pid"].is_null()) << result.info;
  EXPECT_EQ(result.info["pause"]["tag"], "sandboxer-pause-pse-abc");
  EXPECT_EQ(result.info["pause"]["accel"], "tcg");
  EXPECT_EQ(paused_vm_of(json::parse(std::ifstream(vm_dir() / "pause.json"))), checkpoint_record())
      << "unchanged";
}

TEST_F(VmPackerPausedDir, GoneWhilePausedIsNotFoundAndDestroyRemovesIt) {
  SandboxHandle gone{.sandbox_id = "sbx-gone", .backend_id = "sbx-gone"};
  for (auto verb : {"pause", "resume"}) {
    try {
      if (std::string(verb) == "pause") {
        m_driver->pause(gone, {.pause_id = "pse-1"});
      } else {
        m_driver->resume(gone, {.pause_id = "pse-1"});
      }
      ADD_FAILURE() << verb << " of a vanished VM answered";
    } catch (const DriverError& e) {
      EXPECT_EQ(e.kind(), DriverError::Kind::not_found) << verb;
      EXPECT_NE(std::string(e.what()).find("sbx-gone"), std::string::npos) << e.what();
    }
  }
  m_driver->destroy(m_vm); // no QEMU to stop
  EXPECT_FALSE(fs::exists(vm_dir()));
  EXPECT_EQ(m_driver->status(m_vm).state, BackendStatus::State::missing);
}

} // namespace
} // namespace sandboxer::drivers::vm_packer
