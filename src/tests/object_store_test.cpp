// SPDX-License-Identifier: MIT
// The stores' preconditions (base/object_store.hpp) and the Azure request signing
// (base/azure_blob.hpp): which header fences which store, and the shared-key parts Azure's
// "Authorize with Shared Key" reference defines.
#include "base/object_store.hpp"

#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "base/azure_blob.hpp"
#include "base/error.hpp"
#include "base/gcs_upload.hpp"
#include "cpl_conv.h"
#include "cpl_vsi.h"

namespace idem {
namespace {

// Sets GDAL configuration options for one test and clears them after.
class ConfigGuard {
 public:
  explicit ConfigGuard(std::initializer_list<std::pair<const char*, const char*>> options) {
    for (const auto& [name, value] : options) {
      CPLSetConfigOption(name, value);
      m_names.emplace_back(name);
    }
  }
  ~ConfigGuard() {
    for (const std::string& name : m_names) {
      CPLSetConfigOption(name.c_str(), nullptr);
    }
  }
  ConfigGuard(const ConfigGuard&) = delete;
  ConfigGuard& operator=(const ConfigGuard&) = delete;

 private:
  std::vector<std::string> m_names;
};

constexpr const char* k_dev_key =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

TEST(StorePreconditions, EachStoreNamesTheObjectItMayReplaceItsOwnWay) {
  using Header = std::pair<std::string, std::string>;
  EXPECT_EQ(version_condition("/vsis3/b/k.tif", ""), Header("If-None-Match", "*"));
  EXPECT_EQ(version_condition("/vsis3/b/k.tif", "\"abc\""), Header("If-Match", "\"abc\""));
  EXPECT_EQ(version_condition("/vsigs/b/k.tif", ""), Header("x-goog-if-generation-match", "0"));
  EXPECT_EQ(version_condition("/vsigs/b/k.tif", "1733"),
            Header("x-goog-if-generation-match", "1733"));
  EXPECT_EQ(version_condition("/vsiaz/c/k.tif", ""), Header("If-None-Match", "*"));
  EXPECT_EQ(version_condition("/vsiaz/c/k.tif", "\"0x8D\""), Header("If-Match", "\"0x8D\""));
}

TEST(StorePreconditions, TheVersionIsTheGenerationOnGcsAndTheEtagElsewhere) {
  ObjectHeaders headers;
  headers.etag = "\"d41d8cd98f00b204e9800998ecf8427e\"";
  headers.generation = "1700000000000001";
  EXPECT_EQ(version_token("/vsigs/b/k", headers), "1700000000000001");
  EXPECT_EQ(version_token("/vsis3/b/k", headers), headers.etag);
  EXPECT_EQ(version_token("/vsiaz/c/k", headers), headers.etag);
}

TEST(StorePreconditions, AzureIsFencedOnlyWithAKeyToSignWith) {
  {
    const ConfigGuard sas({{"AZURE_STORAGE_CONNECTION_STRING", nullptr},
                           {"AZURE_STORAGE_ACCOUNT", "acct"},
                           {"AZURE_STORAGE_SAS_TOKEN", "sv=2020&sig=x"}});
    EXPECT_FALSE(azure_shared_key_account().has_value());
    EXPECT_FALSE(conditional_upload_applies("/vsiaz/c/k.tif", 100));
    EXPECT_FALSE(conditional_delete_applies("/vsiaz/c/k.tif"));
  }
  const ConfigGuard keyed(
      {{"AZURE_STORAGE_ACCOUNT", "acct"}, {"AZURE_STORAGE_ACCESS_KEY", k_dev_key}});
  EXPECT_TRUE(conditional_upload_applies("/vsiaz/c/k.tif", 100));
  // Over one Put Blob: as blocks, up to Azure's 50,000 of IDEM_AZURE_BLOCK_SIZE.
  EXPECT_TRUE(conditional_upload_applies("/vsiaz/c/k.tif", k_azure_put_blob_max + 1));
  EXPECT_TRUE(conditional_upload_applies("/vsiaz/c/k.tif", (int64_t{100} << 20) * 50000));
  EXPECT_FALSE(conditional_upload_applies("/vsiaz/c/k.tif", (int64_t{100} << 20) * 50000 + 1));
  {
    const ConfigGuard small_blocks({{"IDEM_AZURE_BLOCK_SIZE", "4"}});
    EXPECT_EQ(azure_block_size(), int64_t{4} << 20);
    EXPECT_FALSE(conditional_upload_applies("/vsiaz/c/k.tif", (int64_t{4} << 20) * 50000 + 1));
  }
  for (const char* bad : {"0", "4001", "-3", "1MB", ""}) {
    const ConfigGuard wrong({{"IDEM_AZURE_BLOCK_SIZE", bad}});
    EXPECT_THROW(azure_block_size(), Error) << bad;
  }
  EXPECT_TRUE(conditional_delete_applies("/vsiaz/c/k.tif"));
  const ConfigGuard off({{"IDEM_CONDITIONAL_WRITE", "NO"}});
  EXPECT_FALSE(conditional_upload_applies("/vsiaz/c/k.tif", 100));
}

TEST(AzureBlobName, OnlyAzuresTwoPrefixesNameABlob) {
  EXPECT_EQ(azure_blob_name("/vsiaz/c/k.tif"), "c/k.tif");
  EXPECT_EQ(azure_blob_name("/vsiadls/fs/dir/k.tif"), "fs/dir/k.tif");
  // Every other spelling is not IDEM's to send Azure requests for: GDAL's other filesystems,
  // the streaming variants (read-only), prefixes without their slash or with another case.
  for (const char* other :
       {"/vsiaz/", "/vsiadls/", "/vsiaz_streaming/c/k.tif", "/vsiadlsx/c/k", "/vsiazure/c/k",
        "/VSIAZ/c/k.tif", "vsiaz/c/k.tif", "/vsis3/c/k.tif", "/vsigs/c/k.tif", "/vsioss/c/k",
        "/vsiswift/c/k", "/vsicurl/http://x/c", "/tmp/vsiaz/c/k", ""}) {
    EXPECT_EQ(azure_blob_name(other), "") << other;
  }
  const ConfigGuard keyed(
      {{"AZURE_STORAGE_ACCOUNT", "acct"}, {"AZURE_STORAGE_ACCESS_KEY", k_dev_key}});
  for (const char* path : {"/vsiaz/c/k.tif", "/vsiadls/c/k.tif"}) {
    EXPECT_TRUE(conditional_upload_applies(path, 100)) << path;
    EXPECT_TRUE(conditional_delete_applies(path)) << path;
    EXPECT_EQ(version_condition(path, ""),
              std::make_pair(std::string("If-None-Match"), std::string("*")))
        << path;
  }
  for (const char* path : {"/vsioss/b/k.tif", "/vsiswift/b/k.tif", "/vsiaz_streaming/c/k.tif"}) {
    EXPECT_FALSE(conditional_upload_applies(path, 100)) << path;
    EXPECT_FALSE(conditional_delete_applies(path)) << path;
  }
}

TEST(StorePreconditions, GcsUploadsAreConditionalInGdalsOnePutOrInIdemsResumableUpload) {
  const char* path = "/vsigs/b/k.tif";
  const int64_t one_put_max = int64_t{5120} << 20;
  {
    // Credentials IDEM cannot sign with (OAuth2 here): GDAL's one PUT, up to its largest chunk.
    const ConfigGuard oauth({{"GS_NO_SIGN_REQUEST", nullptr},
                             {"GS_SECRET_ACCESS_KEY", nullptr},
                             {"GS_ACCESS_KEY_ID", nullptr},
                             {"GS_OAUTH2_REFRESH_TOKEN", "token"}});
    EXPECT_FALSE(gcs_signing_credentials(path).has_value());
    EXPECT_TRUE(conditional_upload_applies(path, int64_t{200} << 20));
    EXPECT_FALSE(conditional_upload_applies(path, one_put_max));
    EXPECT_TRUE(conditional_delete_applies(path));
  }
  {
    const ConfigGuard hmac({{"GS_NO_SIGN_REQUEST", nullptr},
                            {"CPL_GS_ENDPOINT", nullptr},
                            {"GS_SECRET_ACCESS_KEY", "secret"},
                            {"GS_ACCESS_KEY_ID", "GOOG1ID"}});
    const auto credentials = gcs_signing_credentials(path);
    ASSERT_TRUE(credentials.has_value());
    EXPECT_EQ(credentials->endpoint, "https://storage.googleapis.com/");
    EXPECT_EQ(credentials->access_key_id, "GOOG1ID");
    EXPECT_TRUE(conditional_upload_applies(path, one_put_max));
    EXPECT_TRUE(conditional_upload_applies(path, int64_t{5} << 40));
    {
      // Requester pays: GDAL adds a header IDEM's requests do not carry.
      const ConfigGuard user_project({{"GS_USER_PROJECT", "project"}});
      EXPECT_FALSE(gcs_signing_credentials(path).has_value());
      EXPECT_FALSE(conditional_upload_applies(path, one_put_max));
    }
    {
      const ConfigGuard no_id({{"GS_ACCESS_KEY_ID", nullptr}});
      EXPECT_FALSE(gcs_signing_credentials(path).has_value());
    }
  }
  {
    // GDAL sends no signature: neither does IDEM, to GDAL's endpoint.
    const ConfigGuard unsigned_requests({{"GS_NO_SIGN_REQUEST", "YES"},
                                         {"GS_SECRET_ACCESS_KEY", "ignored"},
                                         {"CPL_GS_ENDPOINT", "http://127.0.0.1:9"}});
    const auto credentials = gcs_signing_credentials(path);
    ASSERT_TRUE(credentials.has_value());
    EXPECT_EQ(credentials->endpoint, "http://127.0.0.1:9/");
    EXPECT_EQ(credentials->access_key_id, "");
    EXPECT_TRUE(conditional_upload_applies(path, one_put_max));
    const ConfigGuard off({{"IDEM_CONDITIONAL_WRITE", "NO"}});
    EXPECT_FALSE(conditional_upload_applies(path, 100));
  }
  {
    // A Compute Engine machine (as GDAL tells it) with none of GDAL's other credentials: the
    // metadata server's token, as GDAL's own requests get it.
    const ConfigGuard gce({{"GS_NO_SIGN_REQUEST", nullptr},
                           {"GS_SECRET_ACCESS_KEY", nullptr},
                           {"CPL_GCE_CHECK_LOCAL_FILES", "NO"},
                           {"HOME", "/nonexistent"},
                           {"BOTO_CONFIG", nullptr},
                           {"CLOUDSDK_CONFIG", nullptr}});
    const auto credentials = gcs_signing_credentials(path);
    ASSERT_TRUE(credentials.has_value());
    EXPECT_TRUE(credentials->metadata_server);
    EXPECT_EQ(credentials->access_key_id, "");
    EXPECT_TRUE(conditional_upload_applies(path, one_put_max));
    // Any credentials GDAL tries before the metadata server: not IDEM's to sign with.
    for (const char* name :
         {"GS_OAUTH2_REFRESH_TOKEN", "GOOGLE_APPLICATION_CREDENTIALS", "GS_OAUTH2_PRIVATE_KEY",
          "GS_OAUTH2_PRIVATE_KEY_FILE", "GS_OAUTH2_CLIENT_EMAIL"}) {
      const ConfigGuard other({{name, "x"}});
      EXPECT_FALSE(gcs_signing_credentials(path).has_value()) << name;
    }
    // A .boto file (BOTO_CONFIG, or in HOME) is GDAL's before the metadata server too.
    const std::string boto = std::string(CPLGenerateTempFilename("boto")) + ".cfg";
    VSILFILE* file = VSIFOpenL(boto.c_str(), "wb");
    ASSERT_NE(file, nullptr);
    VSIFCloseL(file);
    {
      const ConfigGuard boto_file({{"BOTO_CONFIG", boto.c_str()}});
      EXPECT_FALSE(gcs_signing_credentials(path).has_value());
    }
    VSIUnlink(boto.c_str());
    const ConfigGuard skip({{"CPL_GCE_SKIP", "YES"}});
    EXPECT_FALSE(gcs_signing_credentials(path).has_value());
  }
  {
    // Headers of the user's for GDAL's requests (an encryption key, say): IDEM's requests would
    // drop them, so it sends none itself, on GCS as on Azure.
    const ConfigGuard headers({{"GS_NO_SIGN_REQUEST", "YES"},
                               {"GDAL_HTTP_HEADERS", "x-goog-encryption-algorithm: AES256"},
                               {"AZURE_STORAGE_ACCOUNT", "acct"},
                               {"AZURE_STORAGE_ACCESS_KEY", k_dev_key}});
    EXPECT_FALSE(gcs_signing_credentials(path).has_value());
    EXPECT_FALSE(conditional_upload_applies(path, one_put_max));
    EXPECT_FALSE(azure_shared_key_account("/vsiaz/c/k.tif").has_value());
    EXPECT_FALSE(conditional_upload_applies("/vsiaz/c/k.tif", 100));
  }
  EXPECT_EQ(gcs_chunk_size(), int64_t{100} << 20);
  for (const char* bad : {"0", "5121", "-3", "1MB", ""}) {
    const ConfigGuard wrong({{"IDEM_GCS_CHUNK_SIZE", bad}});
    EXPECT_THROW(gcs_chunk_size(), Error) << bad;
  }
  // GCS's HMAC string to sign, as GDAL's /vsigs/ builds it.
  EXPECT_EQ(
      gcs_string_to_sign("POST", "", "application/octet-stream", "Sun, 06 Dec 2026 GMT",
                         "x-goog-if-generation-match:0\nx-goog-resumable:start\n", "/b/k.tif"),
      "POST\n\napplication/octet-stream\nSun, 06 Dec 2026 GMT\n"
      "x-goog-if-generation-match:0\nx-goog-resumable:start\n/b/k.tif");
}

TEST(AzureSharedKey, TheAccountComesFromTheConnectionStringOrTheAccountOptions) {
  {
    const std::string connection =
        "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=" +
        std::string(k_dev_key) + ";BlobEndpoint=http://127.0.0.1:10000/devstoreaccount1/;";
    const ConfigGuard emulator({{"AZURE_STORAGE_CONNECTION_STRING", connection.c_str()}});
    const auto account = azure_shared_key_account();
    ASSERT_TRUE(account.has_value());
    EXPECT_EQ(account->name, "devstoreaccount1");
    EXPECT_EQ(account->endpoint, "http://127.0.0.1:10000/devstoreaccount1");
    EXPECT_EQ(account->key.size(), 64U);  // the base64 key decoded (it ends with "==")
  }
  {
    const std::string connection =
        "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=" + std::string(k_dev_key) +
        ";EndpointSuffix=core.chinacloudapi.cn";
    const ConfigGuard cloud({{"AZURE_STORAGE_CONNECTION_STRING", connection.c_str()}});
    const auto account = azure_shared_key_account();
    ASSERT_TRUE(account.has_value());
    EXPECT_EQ(account->endpoint, "https://acct.blob.core.chinacloudapi.cn");
  }
  {
    const ConfigGuard sas_only({{"AZURE_STORAGE_CONNECTION_STRING",
                                 "BlobEndpoint=https://acct.blob.core.windows.net;"
                                 "SharedAccessSignature=sv=2020&sig=x"}});
    EXPECT_FALSE(azure_shared_key_account().has_value());
  }
}

TEST(AzureSharedKey, APathSignsForTheAccountGdalReadsItFrom) {
  // Options set for a path prefix (VSISetPathSpecificOption, a configuration file's
  // [credentials]) decide for paths under it, /vsiaz/ and /vsiadls/ alike; other paths keep the
  // configuration's account. Signing with another account than GDAL reads from would upload to
  // an object GDAL never looks at.
  const std::string other =
      "DefaultEndpointsProtocol=https;AccountName=other;AccountKey=" + std::string(k_dev_key) + ";";
  const ConfigGuard global(
      {{"AZURE_STORAGE_ACCOUNT", "acct"}, {"AZURE_STORAGE_ACCESS_KEY", k_dev_key}});
  VSISetPathSpecificOption("/vsiaz/special/", "AZURE_STORAGE_CONNECTION_STRING", other.c_str());
  VSISetPathSpecificOption("/vsiadls/lake/", "AZURE_STORAGE_ACCOUNT", "lakeacct");
  VSISetPathSpecificOption("/vsiaz/sas/", "AZURE_STORAGE_CONNECTION_STRING",
                           "BlobEndpoint=https://s.blob.core.windows.net;SharedAccessSignature=x");
  const auto name_for = [](const std::string& path) {
    const auto account = azure_shared_key_account(path);
    return account ? account->name : std::string("(none)");
  };
  EXPECT_EQ(name_for("/vsiaz/special/k.tif"), "other");
  EXPECT_EQ(name_for("/vsiaz/plain/k.tif"), "acct");
  EXPECT_EQ(name_for("/vsiadls/lake/dir/k.tif"), "lakeacct");  // its key: the configuration's
  EXPECT_EQ(name_for("/vsiaz/sas/k.tif"), "(none)");           // a SAS token: not fenced
  EXPECT_FALSE(conditional_upload_applies("/vsiaz/sas/k.tif", 100));
  EXPECT_TRUE(conditional_upload_applies("/vsiaz/plain/k.tif", 100));
  EXPECT_EQ(name_for(""), "acct");
  VSIClearPathSpecificOptions(nullptr);
}

TEST(AzureSharedKey, TheStringToSignFollowsTheReferencesFieldOrder) {
  // VERB, Content-Encoding, Content-Language, Content-Length, Content-MD5, Content-Type, Date,
  // If-Modified-Since, If-Match, If-None-Match, If-Unmodified-Since, Range, then the x-ms-
  // headers (lower case, sorted, one per line) and the resource.
  const std::string headers =
      "x-ms-blob-type:BlockBlob\nx-ms-date:Sun, 06 Dec 2026 00:11:18 GMT\n"
      "x-ms-version:2020-10-02\n";
  EXPECT_EQ(
      azure_string_to_sign("PUT", 5, "application/octet-stream", "", "*", headers,
                           "/acct/acct/c/k.tif"),
      "PUT\n\n\n5\n\napplication/octet-stream\n\n\n\n*\n\n\n" + headers + "/acct/acct/c/k.tif");
  // A zero Content-Length is signed as an empty field (version 2015-02-21 and later).
  EXPECT_EQ(azure_string_to_sign("DELETE", 0, "", "\"0x8D\"", "", "x-ms-date:d\n", "/acct/c/k.tif"),
            "DELETE\n\n\n\n\n\n\n\n\"0x8D\"\n\n\n\nx-ms-date:d\n/acct/c/k.tif");
}

}  // namespace
}  // namespace idem
