#include <gtest/gtest.h>

#include <sandboxer/duration.hpp>

#include "core/sha256.hpp"

namespace sandboxer {
namespace {

constexpr std::uint64_t k_kib = 1024;
constexpr std::uint64_t k_mib = 1024 * k_kib;
constexpr std::uint64_t k_gib = 1024 * k_mib;
constexpr std::uint64_t k_tib = 1024 * k_gib;

TEST(DurationParse, AcceptsEachUnit) {
  EXPECT_EQ(parse_duration("90s"), Seconds(90));
  EXPECT_EQ(parse_duration("15m"), Seconds(900));
  EXPECT_EQ(parse_duration("2h"), Seconds(7200));
  EXPECT_EQ(parse_duration("1d"), Seconds(86400));
  EXPECT_EQ(parse_duration("2w"), Seconds(14 * 86400));
  EXPECT_EQ(parse_duration("0s"), Seconds(0));
  EXPECT_EQ(parse_duration("0m"), Seconds(0));
}

TEST(DurationParse, AcceptsCombinationsLargestFirst) {
  EXPECT_EQ(parse_duration("1h30m"), Seconds(5400));
  EXPECT_EQ(parse_duration("1d2h"), Seconds(93600));
  EXPECT_EQ(parse_duration("1d2h3m4s"), Seconds(93784));
  EXPECT_EQ(parse_duration("1w1d"), Seconds(8 * 86400));
  EXPECT_EQ(parse_duration("90m"), Seconds(5400)); // a unit need not be "full"
  EXPECT_EQ(parse_duration("1h0m"), Seconds(3600));
}

TEST(DurationParse, RejectsMalformedText) {
  for (const char* text : {"", "90", "-5m", "+5m", " 5m", "5m ", "5 m", "1m1h", "1h1h", "5x", "m",
                           "1.5h", "h1", "1h30", "500ms", "1H", "1h-30m", "ssss", "1s1s"}) {
    EXPECT_EQ(parse_duration(text), std::nullopt) << '"' << text << '"';
  }
}

TEST(DurationParse, RejectsOverflow) {
  EXPECT_EQ(parse_duration("99999999999999999999s"), std::nullopt);
  EXPECT_EQ(parse_duration("9223372036854775807w"), std::nullopt);
  EXPECT_EQ(parse_duration("1m9223372036854775807s"), std::nullopt);
}

// Issue 13: --ttl 9223372036854775807s wrote an unreadable expires_at, --ttl 2914000d wrapped to
// year 0005. Nothing past 100 years is a duration, so no deadline can leave the years 0000-9999.
TEST(DurationParse, BoundedToOneHundredYears) {
  EXPECT_EQ(parse_duration("36500d"), k_max_duration);
  EXPECT_EQ(parse_duration("36500d1s"), std::nullopt);
  EXPECT_EQ(parse_duration("5214w"), Seconds(5214LL * 7 * 86400));
  for (const char* text :
       {"9223372036854775807s", "2914000d", "99999999999999999999s", "5215w1d"}) {
    EXPECT_EQ(parse_duration(text), std::nullopt) << text;
    EXPECT_EQ(parse_duration_ms(text), std::nullopt) << text;
    EXPECT_EQ(duration_problem(text), "(longer than 100 years: at most 36500d)") << text;
  }
  EXPECT_EQ(duration_problem("3x"), "(use 90s, 15m, 2h, 1d, 1h30m)");
  EXPECT_EQ(parse_duration_ms("3153600000000ms"), k_max_duration);
  EXPECT_EQ(parse_duration_ms("3153600000001ms"), std::nullopt);
  // Used to be std::stol on up to 12 digits: now no digit count can overflow.
  EXPECT_EQ(parse_duration_ms("99999999999999999999999ms"), std::nullopt);
}

TEST(DurationParseMs, AcceptsMillisecondsAndEveryDuration) {
  using std::chrono::milliseconds;
  EXPECT_EQ(parse_duration_ms("500ms"), milliseconds(500));
  EXPECT_EQ(parse_duration_ms("0ms"), milliseconds(0));
  EXPECT_EQ(parse_duration_ms("2s"), milliseconds(2000));
  EXPECT_EQ(parse_duration_ms("1h30m"), milliseconds(5400000));
}

TEST(DurationParseMs, RejectsMalformedText) {
  for (const char* text : {"", "ms", "-5ms", "1.5ms", "5 ms", "1s500ms", "9234567890123ms", "90"}) {
    EXPECT_EQ(parse_duration_ms(text), std::nullopt) << '"' << text << '"';
  }
}

TEST(DurationFormat, UsesLargestUnitsFirst) {
  EXPECT_EQ(format_duration(Seconds(5400)), "1h30m");
  EXPECT_EQ(format_duration(Seconds(0)), "0s");
  EXPECT_EQ(format_duration(Seconds(90)), "1m30s");
  EXPECT_EQ(format_duration(Seconds(3600)), "1h");
  EXPECT_EQ(format_duration(Seconds(86400)), "1d");
  EXPECT_EQ(format_duration(Seconds(14 * 86400)), "14d"); // days read better than weeks
  EXPECT_EQ(format_duration(Seconds(93784)), "1d2h3m4s");
  EXPECT_EQ(format_duration(Seconds(86401)), "1d1s");
}

TEST(DurationFormat, NegativeValuesStayReadable) {
  EXPECT_EQ(format_duration(Seconds(-90)), "-1m30s");
}

TEST(DurationFormat, RoundTripsThroughParse) {
  for (std::int64_t value : {0LL, 1LL, 59LL, 60LL, 61LL, 3599LL, 3600LL, 5400LL, 86399LL, 86400LL,
                             93784LL, 31536000LL, 3153600000LL}) {
    std::string text = format_duration(Seconds(value));
    EXPECT_EQ(parse_duration(text), Seconds(value)) << text;
  }
}

TEST(DurationSizeParse, AcceptsSuffixesInPowersOf1024) {
  EXPECT_EQ(parse_size("100"), 100u);
  EXPECT_EQ(parse_size("0"), 0u);
  EXPECT_EQ(parse_size("1024k"), 1024 * k_kib);
  EXPECT_EQ(parse_size("512m"), 512 * k_mib);
  EXPECT_EQ(parse_size("2g"), 2 * k_gib);
  EXPECT_EQ(parse_size("1t"), k_tib);
  EXPECT_EQ(parse_size("100b"), 100u);
}

TEST(DurationSizeParse, AcceptsByteSuffixesAndAnyCase) {
  EXPECT_EQ(parse_size("512mb"), 512 * k_mib);
  EXPECT_EQ(parse_size("2GiB"), 2 * k_gib);
  EXPECT_EQ(parse_size("2G"), 2 * k_gib);
  EXPECT_EQ(parse_size("4KiB"), 4 * k_kib);
  EXPECT_EQ(parse_size("4kB"), 4 * k_kib);
}

TEST(DurationSizeParse, AcceptsFractionsExactly) {
  EXPECT_EQ(parse_size("1.5g"), 3 * k_gib / 2);
  EXPECT_EQ(parse_size("0.5k"), 512u);
  EXPECT_EQ(parse_size("1.1k"), 1126u); // 1126.4: the fraction of a byte is dropped
  EXPECT_EQ(parse_size("1.000000001t"), k_tib + 1099u);
}

TEST(DurationSizeParse, RejectsMalformedText) {
  for (const char* text : {"", "m", "k", "1.5", "-1m", "+1m", "1x", "1gb2", "1.g", ".5g", "1 g",
                           " 1g", "1g ", "1kk", "1ib", "1mib2", "1.0000000001g", "1e3"}) {
    EXPECT_EQ(parse_size(text), std::nullopt) << '"' << text << '"';
  }
}

TEST(DurationSizeParse, RejectsOverflow) {
  EXPECT_EQ(parse_size("16777215t"), 16777215 * k_tib);
  EXPECT_EQ(parse_size("16777216t"), std::nullopt);
  EXPECT_EQ(parse_size("18446744073709551616"), std::nullopt);
  EXPECT_EQ(parse_size("18446744073709551615"), 18446744073709551615ULL);
}

TEST(Sha256, KnownVectors) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha256_hex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

// The padding changes shape at 56 bytes (the length no longer fits in the last block) and at 64.
TEST(Sha256, BlockBoundaries) {
  EXPECT_EQ(sha256_hex(std::string(55, 'a')),
            "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318");
  EXPECT_EQ(sha256_hex(std::string(56, 'a')),
            "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a");
  EXPECT_EQ(sha256_hex(std::string(63, 'a')),
            "7d3e74a05d7db15bce4ad9ec0658ea98e3f06eeecf16b4c6fff2da457ddc2f34");
  EXPECT_EQ(sha256_hex(std::string(64, 'a')),
            "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb");
}

TEST(Sha256, HandlesEmbeddedNulBytes) {
  std::string with_nul("a\0b", 3);
  EXPECT_NE(sha256_hex(with_nul), sha256_hex("ab"));
  EXPECT_EQ(sha256_hex(with_nul).size(), 64u);
}

} // namespace
} // namespace sandboxer
