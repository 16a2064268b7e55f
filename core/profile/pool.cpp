// A profile's warm pool (docs/pools.md): `pool: {size: N, max_age: D}`.
#include <fmt/format.h>

#include "core/profile/document_reader.hpp"

namespace sandboxer::profile_internal {
namespace {

// Beyond this a pool is a fleet, not a cache: fill would start that many creates in one reap.
constexpr long k_max_pool_size = 100;

class PoolReader : public DocumentReader {
public:
  using DocumentReader::DocumentReader;

  std::optional<PoolPolicy> policy() const {
    const json* pool = find("pool");
    if (pool == nullptr || pool->is_null()) {
      return std::nullopt;
    }
    if (!pool->is_object()) {
      fail_at("/pool", "pool: expected a map such as {size: 2, max_age: 1h}");
    }
    check_keys(*pool, {"size", "max_age", "probe"}, "/pool", "pool");
    if (!pool->contains("size") || (*pool)["size"].is_null()) {
      fail_at("/pool", "pool: missing size (how many ready sandboxes to keep)");
    }
    const json& size = (*pool)["size"];
    if (!size.is_number_integer() || size.get<long>() < 1 || size.get<long>() > k_max_pool_size) {
      fail_at("/pool/size", fmt::format("pool.size: expected a whole number from 1 to {} (how "
                                        "many ready sandboxes to keep)",
                                        k_max_pool_size));
    }
    PoolPolicy policy;
    policy.size = size.get<int>();
    if (pool->contains("max_age") && !(*pool)["max_age"].is_null()) {
      policy.max_age = duration_at("/pool/max_age", "pool.max_age");
      if (policy.max_age < Seconds(60)) {
        fail_at("/pool/max_age", "pool.max_age: at least 1m (a member must outlive a reap "
                                 "interval to be of use)");
      }
    }
    if (pool->contains("probe") && !(*pool)["probe"].is_null()) {
      const json& probe = (*pool)["probe"];
      if (probe == "exec") {
        policy.probe = PoolPolicy::Probe::exec;
      } else if (probe == "status") {
        policy.probe = PoolPolicy::Probe::status;
      } else {
        fail_at("/pool/probe", "pool.probe: expected exec (the status and a no-op exec, the "
                               "default) or status (the driver's status alone)");
      }
    }
    return policy;
  }
};

} // namespace

std::optional<PoolPolicy> pool_policy_of(const fs::path& file, Document& doc) {
  return PoolReader(file, doc).policy();
}

} // namespace sandboxer::profile_internal
