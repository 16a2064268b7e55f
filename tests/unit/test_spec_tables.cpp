#include <cstdlib>
#include <fstream>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/registry.hpp"
#include "core/schemas/schemas.hpp"

// A driver's spec is written once, in its field table (include/sandboxer/spec_table.hpp): the
// schema each built-in driver publishes (schemas/drivers/NAME.schema.json, embedded, what
// `sandboxer schema drivers/NAME` prints) must be exactly the one its table makes. With
// SANDBOXER_TEST_ACCEPT=1 and SANDBOXER_SOURCE_DIR set, the files are rewritten from the tables.
namespace sandboxer {
namespace {

using json = nlohmann::json;

TEST(SpecTables, EachShippedDriverSchemaIsTheOneItsTableMakes) {
  int compared = 0;
  for (const auto& driver : builtin_drivers()) {
    if (!driver.factory) {
      continue;
    }
    const std::string name(driver.factory->name());
    const std::string file = "drivers/" + name;
    const json made = driver.factory->schema();
    if (!made.is_object()) {
      ADD_FAILURE() << name << " has no spec table";
      continue;
    }
    const char* accept = std::getenv("SANDBOXER_TEST_ACCEPT");
    const char* source = std::getenv("SANDBOXER_SOURCE_DIR");
    if (accept && std::string(accept) == "1" && source) {
      std::ofstream(std::string(source) + "/schemas/" + file + ".schema.json")
          << made.dump(2) << "\n";
      continue;
    }
    bool found = false;
    for (const auto& embedded : schemas::embedded()) {
      if (embedded.name == file) {
        found = true;
        EXPECT_EQ(json::parse(embedded.text), made)
            << "schemas/" << file << ".schema.json differs from " << name
            << "'s spec table; the table's:\n"
            << made.dump(2);
      }
    }
    EXPECT_TRUE(found) << "no schemas/" << file << ".schema.json";
    ++compared;
  }
  EXPECT_GE(compared, 1);
}

} // namespace
} // namespace sandboxer
