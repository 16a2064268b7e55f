#pragma once

#include <string>
#include <string_view>

#include "drivers/vm-packer/spec.hpp"

namespace sandboxer::drivers::vm_packer {

// The accelerator a VM runs under, and the sentence that says why (shown while it boots, kept in
// the sandbox's info, and repeated by a boot that times out).
struct AccelChoice {
  bool kvm = false;
  std::string reason;
};

// What this host offers a VM: whether /dev/kvm opens for read and write, and the CPU's flags
// (the `flags` line of /proc/cpuinfo).
struct HostVirt {
  bool dev_kvm_opens = false;
  std::string cpu_flags;
};

HostVirt probe_host_virt();

// `auto` takes KVM only when the CPU advertises hardware virtualization (vmx or svm) as well as
// /dev/kvm opening: a paravirtual or nested KVM without them (kvm-pvm) opens fine but runs only
// guest kernels prepared for it, and a stock kernel hangs there without a line on its console.
// `kvm` asked for where /dev/kvm does not open is a DriverError (invalid_spec).
AccelChoice choose_accel(Spec::Accel wanted, const HostVirt& host);

// Whether the flags name vmx (Intel VT-x) or svm (AMD-V), as whole words.
bool advertises_hardware_virt(std::string_view cpu_flags);

} // namespace sandboxer::drivers::vm_packer
