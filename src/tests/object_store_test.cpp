// SPDX-License-Identifier: MIT
// The stores' preconditions (store/object_store.hpp) and the Azure request signing
// (store/azure_blob.hpp): which header fences which store, and the shared-key parts Azure's
// "Authorize with Shared Key" reference defines.
#include "store/object_store.hpp"

#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "base/error.hpp"
#include "cpl_conv.h"
#include "cpl_vsi.h"
#include "store/azure_blob.hpp"
#include "store/gcs_upload.hpp"

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
    // Credentials IDEM cannot tell as GDAL would (headers of the user's, which may hold GDAL's
    // Authorization): GDAL's one PUT, up to its largest chunk.
    const ConfigGuard header_file(
        {{"GS_NO_SIGN_REQUEST", "YES"}, {"GDAL_HTTP_HEADER_FILE", "/nonexistent/headers"}});
    EXPECT_FALSE(gcs_signing_credentials(path).has_value());
    EXPECT_TRUE(conditional_upload_applies(path, int64_t{200} << 20));
    EXPECT_FALSE(conditional_upload_applies(path, one_put_max));
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
      // Requester pays: IDEM's requests name the project as GDAL's do.
      const ConfigGuard user_project({{"GS_USER_PROJECT", "project"}});
      EXPECT_EQ(gcs_signing_credentials(path)->user_project, "project");
      EXPECT_TRUE(conditional_upload_applies(path, one_put_max));
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
    EXPECT_EQ(credentials->kind, GcsCredentials::Kind::k_metadata_server);
    EXPECT_EQ(credentials->access_key_id, "");
    EXPECT_TRUE(conditional_upload_applies(path, one_put_max));
    // A file a later GDAL could read before the metadata server (BOTO_CONFIG; GDAL up to 3.13
    // reads ~/.boto or CPL_GS_CREDENTIALS_FILE only): IDEM leaves the upload to GDAL.
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

// A file holding `text`, removed at the end of the test.
class TextFile {
 public:
  TextFile(const char* suffix, const std::string& text)
      : m_path(std::string(CPLGenerateTempFilename("idem_gcs")) + suffix) {
    VSILFILE* file = VSIFOpenL(m_path.c_str(), "wb");
    if (file != nullptr) {
      VSIFWriteL(text.data(), 1, text.size(), file);
      VSIFCloseL(file);
    }
  }
  ~TextFile() { VSIUnlink(m_path.c_str()); }
  TextFile(const TextFile&) = delete;
  TextFile& operator=(const TextFile&) = delete;
  const char* path() const { return m_path.c_str(); }

 private:
  std::string m_path;
};

TEST(StorePreconditions, GcsCredentialsAreGdalsInGdalsOrder) {
  const char* path = "/vsigs/b/k.tif";
  using Kind = GcsCredentials::Kind;
  // None of GDAL's credentials, and not a Compute Engine machine.
  const ConfigGuard none(
      {{"GS_NO_SIGN_REQUEST", "NO"}, {"HOME", "/nonexistent"}, {"CPL_GCE_SKIP", "YES"}});
  EXPECT_FALSE(gcs_signing_credentials(path).has_value());
  const std::string pem = "-----BEGIN PRIVATE KEY-----\\nMIIB\\n-----END PRIVATE KEY-----\\n";
  const std::string key_text = "-----BEGIN PRIVATE KEY-----\nMIIB\n-----END PRIVATE KEY-----\n";
  {
    const ConfigGuard refresh({{"GS_OAUTH2_REFRESH_TOKEN", "1//refresh"},
                               {"GS_OAUTH2_CLIENT_ID", "client"},
                               {"GS_OAUTH2_CLIENT_SECRET", "shh"}});
    auto credentials = gcs_signing_credentials(path);
    ASSERT_TRUE(credentials.has_value());
    EXPECT_EQ(credentials->kind, Kind::k_refresh_token);
    EXPECT_EQ(credentials->refresh_token, "1//refresh");
    EXPECT_EQ(credentials->client_id, "client");
    EXPECT_EQ(credentials->client_secret, "shh");
    {
      // An HMAC key comes before it in GDAL's order.
      const ConfigGuard hmac({{"GS_SECRET_ACCESS_KEY", "secret"}, {"GS_ACCESS_KEY_ID", "ID"}});
      EXPECT_EQ(gcs_signing_credentials(path)->kind, Kind::k_hmac);
    }
    {
      // GDAL refuses a client's id without its secret: so does IDEM (GDAL's PUT then fails).
      const ConfigGuard half({{"GS_OAUTH2_CLIENT_SECRET", nullptr}});
      EXPECT_FALSE(gcs_signing_credentials(path).has_value());
    }
  }
  {
    const TextFile service(".json", R"({"type": "service_account", "private_key": ")" + pem +
                                        R"(", "client_email": "sa@p.iam.gserviceaccount.com"})");
    const TextFile user(".json",
                        R"({"type": "authorized_user", "client_id": "cid", "client_secret": "cs",)"
                        R"( "refresh_token": "1//user"})");
    const TextFile other(".json", R"({"type": "external_account"})");
    const TextFile keyless(".json", R"({"type": "service_account", "client_email": "sa@p.iam"})");
    const TextFile broken(".json", "{not json");
    {
      const ConfigGuard json({{"GOOGLE_APPLICATION_CREDENTIALS", service.path()},
                              {"GS_OAUTH2_SCOPE", "https://www.googleapis.com/auth/x"}});
      auto credentials = gcs_signing_credentials(path);
      ASSERT_TRUE(credentials.has_value());
      EXPECT_EQ(credentials->kind, Kind::k_service_account);
      EXPECT_EQ(credentials->private_key, key_text);  // "\n" as GDAL reads it
      EXPECT_EQ(credentials->client_email, "sa@p.iam.gserviceaccount.com");
      EXPECT_EQ(credentials->scope, "https://www.googleapis.com/auth/x");
      // A refresh token comes before it.
      const ConfigGuard refresh({{"GS_OAUTH2_REFRESH_TOKEN", "1//refresh"}});
      EXPECT_EQ(gcs_signing_credentials(path)->kind, Kind::k_refresh_token);
    }
    {
      const ConfigGuard json({{"GOOGLE_APPLICATION_CREDENTIALS", user.path()}});
      auto credentials = gcs_signing_credentials(path);
      ASSERT_TRUE(credentials.has_value());
      EXPECT_EQ(credentials->kind, Kind::k_refresh_token);
      EXPECT_EQ(credentials->refresh_token, "1//user");
      EXPECT_EQ(credentials->client_id, "cid");
      EXPECT_EQ(credentials->client_secret, "cs");
    }
    for (const char* unusable :
         {other.path(), keyless.path(), broken.path(), "/nonexistent/key.json"}) {
      // GDAL stops at a file it cannot use; IDEM does not look further either.
      const ConfigGuard json({{"GOOGLE_APPLICATION_CREDENTIALS", unusable},
                              {"GS_OAUTH2_PRIVATE_KEY", pem.c_str()},
                              {"GS_OAUTH2_CLIENT_EMAIL", "sa@p"}});
      EXPECT_FALSE(gcs_signing_credentials(path).has_value()) << unusable;
    }
  }
  {
    const TextFile key(".pem", key_text);
    const ConfigGuard key_file({{"GS_OAUTH2_PRIVATE_KEY_FILE", key.path()}});
    EXPECT_FALSE(gcs_signing_credentials(path).has_value());  // no GS_OAUTH2_CLIENT_EMAIL
    const ConfigGuard email({{"GS_OAUTH2_CLIENT_EMAIL", "sa@p"}});
    auto credentials = gcs_signing_credentials(path);
    ASSERT_TRUE(credentials.has_value());
    EXPECT_EQ(credentials->kind, Kind::k_service_account);
    EXPECT_EQ(credentials->private_key, key_text);
    EXPECT_EQ(credentials->scope, "https://www.googleapis.com/auth/devstorage.read_write");
  }
  {
    const TextFile hmac(".boto",
                        "[Boto]\nx = y\n[Credentials]\ngs_access_key_id = GOOGID\n"
                        "gs_secret_access_key = s3cret \n");
    const TextFile refresh(".boto",
                           "[Credentials]\ngs_oauth2_refresh_token = 1//boto\n"
                           "gs_access_key_id = GOOGID\ngs_secret_access_key = s\n"
                           "[OAuth2]\nclient_id = fid\nclient_secret = fs\n");
    const TextFile empty(".boto", "[Credentials]\n");
    const TextFile half_client(".boto",
                               "[Credentials]\ngs_oauth2_refresh_token = 1//boto\n"
                               "[OAuth2]\nclient_id = fid\n");
    {
      const ConfigGuard file({{"CPL_GS_CREDENTIALS_FILE", hmac.path()}});
      auto credentials = gcs_signing_credentials(path);
      ASSERT_TRUE(credentials.has_value());
      EXPECT_EQ(credentials->kind, Kind::k_hmac);
      EXPECT_EQ(credentials->access_key_id, "GOOGID");
      EXPECT_EQ(credentials->secret, "s3cret");
    }
    {
      const ConfigGuard file({{"CPL_GS_CREDENTIALS_FILE", refresh.path()}});
      auto credentials = gcs_signing_credentials(path);
      ASSERT_TRUE(credentials.has_value());
      EXPECT_EQ(credentials->kind, Kind::k_refresh_token);
      EXPECT_EQ(credentials->refresh_token, "1//boto");
      EXPECT_EQ(credentials->client_id, "fid");
      // The configuration's client before the file's.
      const ConfigGuard client({{"GS_OAUTH2_CLIENT_ID", "cid"}, {"GS_OAUTH2_CLIENT_SECRET", "cs"}});
      EXPECT_EQ(gcs_signing_credentials(path)->client_id, "cid");
    }
    {
      // A file without credentials: on to the metadata server, as GDAL goes.
      const ConfigGuard file({{"CPL_GS_CREDENTIALS_FILE", empty.path()}});
      EXPECT_FALSE(gcs_signing_credentials(path).has_value());
      const ConfigGuard gce({{"CPL_GCE_SKIP", "NO"}, {"CPL_GCE_CHECK_LOCAL_FILES", "NO"}});
      EXPECT_EQ(gcs_signing_credentials(path)->kind, Kind::k_metadata_server);
    }
    {
      // A refresh token whose client has an id but no secret: GDAL refuses the file and stops
      // there; IDEM does not sign with the machine's account instead.
      const ConfigGuard file({{"CPL_GS_CREDENTIALS_FILE", half_client.path()},
                              {"CPL_GCE_SKIP", "NO"},
                              {"CPL_GCE_CHECK_LOCAL_FILES", "NO"}});
      EXPECT_FALSE(gcs_signing_credentials(path).has_value());
    }
  }
  {
    // Tokens are asked of the endpoints GDAL's configuration names; one that answers nothing
    // gives an error naming the credentials' source, never the token or secret.
    const ConfigGuard refresh({{"GS_OAUTH2_REFRESH_TOKEN", "1//do-not-print"},
                               {"GOA2_AUTH_URL_TOKEN", "http://127.0.0.1:9/token"},
                               {"GDAL_HTTP_TIMEOUT", "5"}});
    auto credentials = gcs_signing_credentials(path);
    ASSERT_TRUE(credentials.has_value());
    try {
      gcs_bearer_authorization(*credentials);
      ADD_FAILURE() << "no token endpoint answered, yet a token came";
    } catch (const Error& error) {
      const std::string message = error.what();
      EXPECT_NE(message.find("GS_OAUTH2_REFRESH_TOKEN"), std::string::npos) << message;
      EXPECT_EQ(message.find("do-not-print"), std::string::npos) << message;
    }
    credentials->kind = Kind::k_hmac;
    EXPECT_EQ(gcs_bearer_authorization(*credentials), "");
  }
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
