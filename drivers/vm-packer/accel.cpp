#include "drivers/vm-packer/accel.hpp"

#include <fcntl.h>
#include <fstream>
#include <sstream>
#include <unistd.h>

#include <sandboxer/error.hpp>

namespace sandboxer::drivers::vm_packer {

namespace {

bool dev_kvm_opens() {
  int fd = ::open("/dev/kvm", O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    return false;
  }
  ::close(fd);
  return true;
}

// The first `flags` line: every CPU of a machine advertises the same virtualization flags.
std::string cpu_flags() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) == 0) {
      auto colon = line.find(':');
      return colon == std::string::npos ? std::string() : line.substr(colon + 1);
    }
  }
  return {};
}

} // namespace

HostVirt probe_host_virt() {
  return {dev_kvm_opens(), cpu_flags()};
}

bool advertises_hardware_virt(std::string_view cpu_flags) {
  std::istringstream words{std::string(cpu_flags)};
  std::string word;
  while (words >> word) {
    if (word == "vmx" || word == "svm") {
      return true;
    }
  }
  return false;
}

AccelChoice choose_accel(Spec::Accel wanted, const HostVirt& host) {
  switch (wanted) {
  case Spec::Accel::kvm:
    if (!host.dev_kvm_opens) {
      throw DriverError(DriverError::Kind::invalid_spec,
                        "accel: kvm, but /dev/kvm cannot be opened here (use auto or tcg)");
    }
    return {true, "KVM, as the profile asks (accel: kvm)"};
  case Spec::Accel::tcg:
    return {false, "TCG (emulation), as the profile asks (accel: tcg)"};
  case Spec::Accel::automatic:
    break;
  }
  if (!host.dev_kvm_opens) {
    return {false, "TCG (emulation, slower): no usable /dev/kvm"};
  }
  if (!advertises_hardware_virt(host.cpu_flags)) {
    return {false, "TCG (emulation, slower): /dev/kvm opens but the CPU advertises no hardware "
                   "virtualization (no vmx or svm flag), so it is a paravirtual or nested KVM "
                   "(kvm-pvm) that runs only guest kernels prepared for it; accel: kvm uses it "
                   "anyway"};
  }
  return {true, "KVM: /dev/kvm opens and the CPU advertises hardware virtualization"};
}

} // namespace sandboxer::drivers::vm_packer
