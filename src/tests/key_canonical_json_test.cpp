// SPDX-License-Identifier: MIT
// Canonical JSON and number canonicalisation: the bytes the idempotency key hashes.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "base/canonical_json.hpp"
#include "base/error.hpp"
#include "base/sha256.hpp"
#include "key/work_key.hpp"

namespace idem {
namespace {

TEST(KeyCanonicalJson, SortsKeysAndHasNoWhitespace) {
  JsonValue object = JsonValue::object();
  object.set("zeta", JsonValue::integer(1));
  object.set("alpha", JsonValue::string("a b"));
  object.set("Mid", JsonValue::array({JsonValue::boolean(true), JsonValue::null()}));
  EXPECT_EQ(object.dump(), R"({"Mid":[true,null],"alpha":"a b","zeta":1})");
}

TEST(KeyCanonicalJson, InsertionOrderDoesNotMatter) {
  JsonValue a = JsonValue::object();
  a.set("x", JsonValue::integer(1));
  a.set("y", JsonValue::integer(2));
  JsonValue b = JsonValue::object();
  b.set("y", JsonValue::integer(2));
  b.set("x", JsonValue::integer(1));
  EXPECT_EQ(a.dump(), b.dump());
}

TEST(KeyCanonicalJson, EscapesStrings) {
  EXPECT_EQ(JsonValue::string("a\"b\\c\n\t\x01").dump(), R"("a\"b\\c\n\t\u0001")");
  EXPECT_EQ(JsonValue::string("d\xc3\xa9j\xc3\xa0").dump(), "\"d\xc3\xa9j\xc3\xa0\"");
  // Escapes at either end, side by side, and every short form; runs between them kept whole.
  EXPECT_EQ(JsonValue::string("").dump(), R"("")");
  EXPECT_EQ(JsonValue::string("\"\\").dump(), R"("\"\\")");
  EXPECT_EQ(JsonValue::string("\r\b\fx\x1f\x7f").dump(), "\"\\r\\b\\fx\\u001f\x7f\"");
  EXPECT_EQ(JsonValue::string(std::string("a\0b", 3)).dump(), R"("a\u0000b")");
  EXPECT_EQ(JsonValue::object({{"k\n", JsonValue::string("v")}}).dump(), R"({"k\n":"v"})");
}

TEST(KeyCanonicalJson, DoublesAreShortestRoundTrip) {
  EXPECT_EQ(format_double(0.1), "0.1");
  EXPECT_EQ(format_double(0.1 + 0.2), "0.30000000000000004");
  EXPECT_EQ(format_double(1.0), "1");
  EXPECT_EQ(format_double(-0.0), "-0");
  EXPECT_EQ(format_double(333958.47237981978), "333958.4723798198");
  EXPECT_EQ(format_double(1e21), "1e+21");
  EXPECT_EQ(format_double(5e-324), "5e-324");
  EXPECT_EQ(format_double(std::numeric_limits<double>::max()), "1.7976931348623157e+308");
  for (const double value : {0.1, 1.0 / 3.0, 6378137.0, 298.257223563, -13.358235976496507}) {
    EXPECT_EQ(std::stod(format_double(value)), value);
  }
}

TEST(KeyCanonicalJson, NonFiniteNumbersAreRefused) {
  EXPECT_THROW(format_double(std::nan("")), Error);
  EXPECT_THROW(JsonValue::number(std::numeric_limits<double>::infinity()), Error);
}

TEST(KeyCanonicalJson, NumberTextInAnySpellingCanonicalises) {
  std::string out;
  ASSERT_TRUE(canonical_number_text("3.3395847237981978e+05", out));
  EXPECT_EQ(out, "333958.4723798198");
  ASSERT_TRUE(canonical_number_text("333958.472379819781", out));
  EXPECT_EQ(out, "333958.4723798198");
  ASSERT_TRUE(canonical_number_text(" 0.100000000000000006 ", out));
  EXPECT_EQ(out, "0.1");
  ASSERT_TRUE(canonical_number_text("+1.50", out));
  EXPECT_EQ(out, "1.5");
  ASSERT_TRUE(canonical_number_text("007", out));
  EXPECT_EQ(out, "7");
  ASSERT_TRUE(canonical_number_text("-0", out));
  EXPECT_EQ(out, "0");  // an integer zero has no sign
  ASSERT_TRUE(canonical_number_text("NaN", out));
  EXPECT_EQ(out, "nan");
  EXPECT_FALSE(canonical_number_text("NO_DATA", out));
  EXPECT_FALSE(canonical_number_text("1.tif", out));
  EXPECT_FALSE(canonical_number_text("", out));
}

TEST(KeyCanonicalJson, WideIntegersStayExact) {
  std::string a;
  std::string b;
  ASSERT_TRUE(canonical_number_text("18446744073709551615", a));
  ASSERT_TRUE(canonical_number_text("18446744073709551614", b));
  EXPECT_EQ(a, "18446744073709551615");
  EXPECT_NE(a, b);  // through a double they would collapse
}

TEST(KeyCanonicalJson, NumberListsCanonicalise) {
  EXPECT_EQ(canonical_scalar_text("  5.0000000000000000e+05,  1.0e+01, 0"),
            "5e+05,10,0");  // to_chars picks the shorter form
  EXPECT_EQ(canonical_scalar_text("Bilinear"), "Bilinear");
  EXPECT_EQ(canonical_scalar_text("1,abc"), "1,abc");
  EXPECT_EQ(canonical_scalar_text(" POLYGON ((0 0,1 1)) "), "POLYGON ((0 0,1 1))");
}

TEST(KeyCanonicalJson, KeyIsSha256OfPrefixedJson) {
  const std::string json = R"({"a":1})";
  const std::string expected = sha256_hex("tiles:v" + std::to_string(k_algo_version) + ":" + json);
  EXPECT_EQ(compute_key("tiles", json), expected);
  EXPECT_NE(compute_key("tiles", json), compute_key("other", json));
  EXPECT_EQ(compute_key("tiles", json).size(), 64u);
}

TEST(KeyCanonicalJson, Sha256KnownVectors) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(KeyCanonicalJson, ParsedCanonicalTextDumpsUnchanged) {
  JsonValue work = JsonValue::object();
  work.set("b", JsonValue::array({JsonValue::number(0.1), JsonValue::integer(-7),
                                  JsonValue::boolean(true), JsonValue::null()}));
  work.set("a", JsonValue::string("caf\xc3\xa9 \"quoted\"\n\x01"));
  work.set("c", JsonValue::object({{"z", JsonValue::number(1e300)}}));
  const std::string text = work.dump();
  const std::optional<JsonValue> parsed = JsonValue::parse(text);
  ASSERT_TRUE(parsed.has_value());
  EXPECT_EQ(parsed->dump(), text);
  EXPECT_EQ(parsed->find("a")->text(), "caf\xc3\xa9 \"quoted\"\n\x01");
  EXPECT_EQ(parsed->find("b")->items().at(0).text(), "0.1");
  EXPECT_EQ(parsed->find("b")->items().at(3).type(), JsonValue::Type::k_null);
}

TEST(KeyCanonicalJson, ParseReadsAnyJsonAndRefusesWhatIsNot) {
  const std::optional<JsonValue> spaced = JsonValue::parse(
      " { \"b\" : [ 1 , 2.50 ] , \"a\" : "
      "\"\\u00e9\\ud83d\\ude00\" } ");
  ASSERT_TRUE(spaced.has_value());
  EXPECT_EQ(spaced->dump(), "{\"a\":\"\xc3\xa9\xf0\x9f\x98\x80\",\"b\":[1,2.50]}");
  for (const char* bad : {"", "{", "[1,]", "{\"a\" 1}", "\"open", "tru", "{} x", "[1] [2]"}) {
    EXPECT_FALSE(JsonValue::parse(bad).has_value()) << bad;
  }
}

}  // namespace
}  // namespace idem
