// SPDX-License-Identifier: MIT
// Object stores: headers, streaming copies, predicted ETags, local temporary root (see
// object_store.hpp).
//
// MD5 through OpenSSL's MD5_* functions rather than EVP, for the reason given in sha256.cpp.
#define OPENSSL_SUPPRESS_DEPRECATED
#include "store/object_store.hpp"

#include <openssl/md5.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <system_error>
#include <thread>
#include <vector>

#include "base/error.hpp"
#include "base/paths.hpp"
#include "base/sha256.hpp"
#include "cpl_conv.h"
#include "cpl_error.h"
#include "cpl_string.h"
#include "cpl_vsi.h"
#include "cpl_vsi_error.h"
#include "gdal_version.h"
#include "store/azure_blob.hpp"
#include "store/gcs_upload.hpp"
#include "store/vsi_file.hpp"

namespace idem {

namespace {

std::string last_vsi_error() {
  const char* message = VSIGetLastErrorMsg();
  if (message != nullptr && message[0] != '\0') {
    return message;
  }
  const char* cpl = CPLGetLastErrorMsg();
  if (cpl != nullptr && cpl[0] != '\0') {
    return cpl;
  }
  return std::strerror(errno != 0 ? errno : EIO);
}

class Md5 {
 public:
  Md5() { MD5_Init(&m_context); }
  void update(const void* data, size_t size) { MD5_Update(&m_context, data, size); }
  std::string finish_hex() {
    unsigned char digest[MD5_DIGEST_LENGTH];
    MD5_Final(digest, &m_context);
    return hex_of(digest, sizeof(digest));
  }
  // The digest of the bytes so far, base64 (as Content-MD5 carries it); more may follow.
  std::string base64_so_far() const {
    MD5_CTX copy = m_context;
    unsigned char digest[MD5_DIGEST_LENGTH];
    MD5_Final(digest, &copy);
    char* encoded = CPLBase64Encode(static_cast<int>(sizeof(digest)), digest);
    std::string result = encoded;
    CPLFree(encoded);
    return result;
  }

 private:
  MD5_CTX m_context;
};

constexpr size_t k_copy_chunk = 1 << 20;

// The MD5 of the object's bytes as the store serves them now, or nullopt when it cannot be read.
std::optional<std::string> object_md5(const std::string& path) {
  VSICurlPartialClearCache(path.c_str());
  VsiFile in(VSIFOpenExL(path.c_str(), "rb", FALSE));
  Md5 md5;
  if (!in || !read_vsi_chunks(in.get(), k_copy_chunk, [&](const unsigned char* data, size_t size) {
        md5.update(data, size);
        return true;
      })) {
    return std::nullopt;
  }
  return md5.finish_hex();
}

// The ETag without its quotes, lowercase.
std::string bare_etag(const std::string& etag) {
  std::string bare = etag;
  if (bare.size() >= 2 && bare.front() == '"' && bare.back() == '"') {
    bare = bare.substr(1, bare.size() - 2);
  }
  for (char& c : bare) {
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return bare;
}

}  // namespace

bool is_object_store_path(const std::string& path) {
  static const char* const k_prefixes[] = {"/vsis3/",
                                           "/vsigs/",
                                           "/vsiaz/",
                                           "/vsiadls/",
                                           "/vsioss/",
                                           "/vsiswift/",
                                           "/vsicurl/",
                                           "/vsis3_streaming/",
                                           "/vsigs_streaming/",
                                           "/vsiaz_streaming/",
                                           "/vsioss_streaming/",
                                           "/vsiswift_streaming/",
                                           "/vsicurl_streaming/",
                                           "/vsiwebhdfs/",
                                           "/vsihdfs/"};
  for (const char* prefix : k_prefixes) {
    if (path.rfind(prefix, 0) == 0) {
      return true;
    }
  }
  return false;
}

namespace {

// Whether GDAL's last file-system error, after a look at an object that found none, is the
// store's own answer that there is none (404: GDAL 3.6 to 3.13 set "HTTP response code: 404", or
// its object-not-found code), rather than a failure to look.
bool store_said_missing() {
  const int error = VSIGetLastErrorNo();
  if (error == VSIE_None) {
    return true;  // no request failed: GDAL knew it from a listing of the object's directory
  }
  if (error == 8) {  // VSIE_ObjectNotFound (VSIE_AWSObjectNotFound before GDAL 3.12)
    return true;
  }
  const char* message = VSIGetLastErrorMsg();
  return error == VSIE_HttpError && message != nullptr &&
         std::strncmp(message, "HTTP response code: 404", 23) == 0 &&
         !std::isdigit(static_cast<unsigned char>(message[23]));
}

}  // namespace

ObjectLook look_at_object(const std::string& path, bool fresh) {
  if (fresh) {
    VSICurlPartialClearCache(path.c_str());
  }
  ObjectLook look;
  // The metadata request fills GDAL's cached properties, so the stat below sends nothing. Its
  // failure is told apart by GDAL's file-system error (the stat that follows reads the cache
  // and says only "no file"); GDAL's messages stay quiet: the caller says what it means.
  CPLErrorStateBackuper keep_error_state;
  CPLErrorHandlerPusher quiet(CPLQuietErrorHandler);
  VSIErrorReset();
  const CPLStringList metadata(VSIGetFileMetadata(path.c_str(), "HEADERS", nullptr));
  const bool missing_said = metadata.empty() && store_said_missing();
  const std::string why = metadata.empty() ? std::string(VSIGetLastErrorMsg()) : std::string();
  VSIStatBufL info;
  if (VSIStatExL(path.c_str(), &info, VSI_STAT_EXISTS_FLAG | VSI_STAT_SIZE_FLAG) != 0) {
    look.found = missing_said ? ObjectLook::Found::k_missing : ObjectLook::Found::k_unknown;
    look.why = why.empty() ? std::string("the store did not answer") : why;
    return look;
  }
  if (VSI_ISDIR(info.st_mode)) {
    look.found = ObjectLook::Found::k_missing;  // a "directory": no object of that name
    return look;
  }
  look.found = ObjectLook::Found::k_object;
  ObjectHeaders& headers = look.headers;
  headers.size = static_cast<int64_t>(info.st_size);
  for (int i = 0; i < metadata.size(); ++i) {
    char* raw_name = nullptr;
    const char* value = CPLParseNameValue(metadata[i], &raw_name);
    if (raw_name != nullptr && value != nullptr) {
      if (EQUAL(raw_name, "ETag")) {
        headers.etag = value;
      } else if (EQUAL(raw_name, "x-amz-checksum-sha256")) {
        headers.checksum_sha256 = value;
      } else if (EQUAL(raw_name, "x-goog-generation")) {
        headers.generation = value;
      } else if (EQUAL(raw_name, "Content-MD5")) {
        headers.content_md5 = value;
      }
    }
    CPLFree(raw_name);
  }
  return look;
}

std::optional<ObjectHeaders> object_headers(const std::string& path, bool fresh) {
  ObjectLook look = look_at_object(path, fresh);
  switch (look.found) {
    case ObjectLook::Found::k_missing:
      return std::nullopt;
    case ObjectLook::Found::k_unknown:
      throw StoreUnreachable("cannot look at " + path + ": its store did not answer (" + look.why +
                             "); nothing is decided on it (its ledger rows are kept): run again "
                             "when the store answers");
    case ObjectLook::Found::k_object:
      break;
  }
  return std::move(look.headers);
}

namespace {

bool is_gcs(const std::string& path) {
  return path.rfind("/vsigs/", 0) == 0;
}

// The largest chunk GDAL's /vsigs/ writer takes (it clamps larger ones to it): an object up to
// it can be sent in one PUT, which carries the upload's condition.
constexpr int64_t k_gcs_one_put_max = int64_t{5120} << 20;

bool is_azure(const std::string& path) {
  return !azure_blob_name(path).empty();
}

// The credentials IDEM sends a conditional upload of `size` bytes to the GCS `path` with itself,
// as a resumable upload (gcs_upload.hpp): one larger than IDEM_GCS_CHUNK_SIZE or than GDAL's
// one PUT takes, when IDEM can sign as GDAL would. nullopt: GDAL's one PUT sends it, fenced up
// to k_gcs_one_put_max.
std::optional<GcsCredentials> idem_gcs_upload(const std::string& path, int64_t size) {
  if (size <= gcs_chunk_size() && size < k_gcs_one_put_max) {
    return std::nullopt;
  }
  return gcs_signing_credentials(path);
}

}  // namespace

std::string version_token(const std::string& path, const ObjectHeaders& headers) {
  return is_gcs(path) ? headers.generation : headers.etag;
}

std::string current_object_version(const std::string& path) {
  VSICurlPartialClearCache(path.c_str());
  // Only the object's own request: no stat, which after a 404 would list the "directory" too.
  const CPLStringList metadata(VSIGetFileMetadata(path.c_str(), "HEADERS", nullptr));
  const char* token = metadata.FetchNameValue(is_gcs(path) ? "x-goog-generation" : "ETag");
  return token != nullptr ? token : "";
}

std::pair<std::string, std::string> version_condition(const std::string& path,
                                                      const std::string& version) {
  if (is_gcs(path)) {
    return {"x-goog-if-generation-match", version.empty() ? "0" : version};
  }
  return version.empty() ? std::make_pair(std::string("If-None-Match"), std::string("*"))
                         : std::make_pair(std::string("If-Match"), version);
}

void validate_store_options() {
  conditional_writes_enabled();
  azure_block_size();
  gcs_chunk_size();
}

std::string local_temp_root() {
  if (const char* configured = CPLGetConfigOption("CPL_TMPDIR", nullptr)) {
    if (configured[0] != '\0') {
      return configured;
    }
  }
  if (const char* tmpdir = std::getenv("TMPDIR")) {
    if (tmpdir[0] != '\0') {
      return tmpdir;
    }
  }
  return "/tmp";
}

bool read_vsi_chunks(VSILFILE* file, size_t chunk,
                     const std::function<bool(const unsigned char*, size_t)>& sink) {
  const std::unique_ptr<unsigned char[]> buffer(new unsigned char[chunk]);
  for (;;) {
    const size_t got = VSIFReadL(buffer.get(), 1, chunk, file);
    if (!sink(buffer.get(), got)) {
      return false;
    }
    if (got < chunk) {
      return VSIFEofL(file) != 0;  // a short read before the end is an error
    }
  }
}

std::optional<std::string> predicted_etag(const std::string& path, const CopiedBytes& sent) {
  if (sent.size > k_predicted_etag_max_size ||
      (path.rfind("/vsis3/", 0) != 0 && path.rfind("/vsigs/", 0) != 0)) {
    return std::nullopt;
  }
  return k_predicted_etag_prefix + sent.md5;
}

EtagMatch match_object_etag(const std::string& path, const ObjectHeaders& headers,
                            const std::string& recorded) {
  if (headers.etag == recorded) {
    return EtagMatch::k_same;
  }
  const std::string prefix = k_predicted_etag_prefix;
  if (recorded.rfind(prefix, 0) != 0) {
    return EtagMatch::k_different;
  }
  const std::string md5 = recorded.substr(prefix.size());
  if (bare_etag(headers.etag) == md5) {
    return EtagMatch::k_same;
  }
  // Not the MD5 (a multipart upload, SSE-KMS...): the bytes decide. A size over the bound means
  // they are not what was uploaded, since predictions are only made below it.
  if (headers.size > k_predicted_etag_max_size) {
    return EtagMatch::k_different;
  }
  const auto actual = object_md5(path);
  return actual && *actual == md5 ? EtagMatch::k_same_content : EtagMatch::k_different;
}

bool conditional_writes_enabled() {
  const std::string mode = CPLGetConfigOption("IDEM_CONDITIONAL_WRITE", "AUTO");
  if (EQUAL(mode.c_str(), "NO")) {
    return false;
  }
  if (!EQUAL(mode.c_str(), "AUTO")) {
    throw Error(ErrorKind::k_usage,
                "IDEM_CONDITIONAL_WRITE=" + mode + " is not valid: use AUTO (the default) or NO");
  }
  return true;
}

namespace {

// The size from which GDAL's /vsis3/ writer sends an object in parts: it buffers VSIS3_CHUNK_SIZE
// (MB) and starts a multipart upload when the buffer fills; below it the object goes in one PUT.
int64_t s3_chunk_size() {
  int64_t chunk = int64_t(atoi(CPLGetConfigOption("VSIS3_CHUNK_SIZE", "50"))) << 20;
  if (const char* bytes = CPLGetConfigOption("VSIS3_CHUNK_SIZE_BYTES", nullptr)) {
    chunk = CPLAtoGIntBig(bytes);
  }
  return chunk;
}

// The upload ID GDAL names in its error about a failed CompleteMultipartUpload
// ("... (uploadId=ID) failed"), or "".
std::string upload_id_in(const std::string& message) {
  const std::string marker = "uploadId=";
  const size_t at = message.find(marker);
  if (at == std::string::npos) {
    return std::string();
  }
  const size_t start = at + marker.size();
  const size_t end = message.find_first_of(") \n", start);
  return message.substr(start, end == std::string::npos ? std::string::npos : end - start);
}

// A multipart upload whose completion was refused keeps its parts (and their cost) until it is
// aborted. GDAL 3.10 and later abort it here; GDAL 3.6 has no call for it (and its writer does
// not abort it): the bucket's lifecycle rule AbortIncompleteMultipartUpload removes them
// (docs/object-storage.md).
void abort_refused_upload(const std::string& path, const std::string& upload_id) {
#if GDAL_VERSION_NUM >= GDAL_COMPUTE_VERSION(3, 10, 0)
  if (!upload_id.empty()) {
    CPLErrorHandlerPusher quiet(CPLQuietErrorHandler);
    if (VSIMultipartUploadAbort(path.c_str(), upload_id.c_str(), nullptr)) {
      CPLDebug("IDEM", "aborted the refused multipart upload %s of %s", upload_id.c_str(),
               path.c_str());
    }
  }
#else
  (void)path;
  (void)upload_id;
#endif
}

}  // namespace

bool conditional_upload_applies(const std::string& path, int64_t size) {
  if (!conditional_writes_enabled() ||
      (path.rfind("/vsis3/", 0) != 0 && !is_gcs(path) && !is_azure(path))) {
    return false;
  }
  if (is_gcs(path)) {
    // In one PUT by GDAL, or by IDEM as a resumable upload (copy_vsi_file).
    return size < k_gcs_one_put_max || idem_gcs_upload(path, size).has_value();
  }
  if (is_azure(path)) {
    // Sent by IDEM itself (azure_blob.hpp), in one Put Blob or as blocks, with a key it can
    // sign with.
    return size <= azure_block_size() * k_azure_max_blocks &&
           azure_shared_key_account(path).has_value();
  }
  // A multipart upload takes its condition on its completion, sent through GDAL_HTTP_HEADERS
  // (copy_vsi_file), which then cannot also carry headers the user set there.
  return size < s3_chunk_size() || CPLGetConfigOption("GDAL_HTTP_HEADERS", nullptr) == nullptr;
}

bool conditional_delete_applies(const std::string& path) {
  if (is_azure(path)) {
    return conditional_writes_enabled() && azure_shared_key_account(path).has_value();
  }
  return (path.rfind("/vsis3/", 0) == 0 || is_gcs(path)) && conditional_writes_enabled() &&
         CPLGetConfigOption("GDAL_HTTP_HEADERS", nullptr) == nullptr;
}

bool delete_object_if_version(const std::string& path, const std::string& version) {
  if (is_azure(path)) {
    const std::optional<AzureAccount> account = azure_shared_key_account(path);
    const bool deleted = account && azure_delete_blob(*account, path, version).status == 202;
    VSICurlPartialClearCache(path.c_str());
    return deleted;
  }
  const auto [name, value] = version_condition(path, version);
  const std::string condition = name + ": " + value;
  CPLConfigOptionSetter header("GDAL_HTTP_HEADERS", condition.c_str(), true);
  CPLErrorHandlerPusher quiet(CPLQuietErrorHandler);
  return VSIUnlink(path.c_str()) == 0;
}

namespace {

// Thrown when a conditional upload failed: refused because another writer changed the object
// (UploadRefused), or failed for another reason, naming the condition and how to do without it.
[[noreturn]] void throw_conditional_failure(const std::string& to, const ExpectedObject& expected,
                                            const std::string& condition_name,
                                            const std::string& error) {
  if (current_object_version(to) != expected.version) {
    throw UploadRefused(ErrorKind::k_ledger, "the upload to " + to +
                                                 " was refused: another writer changed the " +
                                                 "object after this attempt looked at it");
  }
  throw Error(ErrorKind::k_io, "uploading " + to + " failed: " + error +
                                   "; the upload was conditional (" + condition_name +
                                   "): if this store refuses conditional writes, set "
                                   "IDEM_CONDITIONAL_WRITE=NO");
}

// The upload of an object to /vsiaz/ that must be conditional, sent by IDEM (azure_blob.hpp):
// one Put Blob up to IDEM_AZURE_BLOCK_SIZE, blocks committed by one conditional Put Block List
// above it; never GDAL's writer, which deletes the blob when a PUT is refused.
CopiedBytes upload_to_azure(const std::string& from, const std::string& to,
                            const ExpectedObject& expected,
                            const std::pair<std::string, std::string>& precondition,
                            const std::optional<int64_t>& from_size) {
  const std::optional<AzureAccount> account = azure_shared_key_account(to);
  if (!account || !from_size) {
    throw Error(ErrorKind::k_io, "cannot upload " + from + " to " + to +
                                     ": no shared-key credentials, or the file is missing");
  }
  Md5 md5;
  CopiedBytes sent;
  sent.size = *from_size;
  const auto hash = [&](const unsigned char* data, size_t size) {
    if (data == nullptr) {
      md5 = Md5();  // sent again from the start
    } else {
      md5.update(data, size);
    }
  };
  const int64_t block_size = azure_block_size();
  const AzureAnswer answer =
      sent.size <= std::min(block_size, k_azure_put_blob_max)
          ? azure_put_blob(*account, to, from, sent.size, precondition.first, precondition.second,
                           hash)
          : azure_put_block_list(*account, to, from, block_size, precondition.first,
                                 precondition.second, hash, [&] { return md5.base64_so_far(); });
  // GDAL's cached view of the object and its folder predates this write.
  VSICurlPartialClearCache(to.c_str());
  VSICurlPartialClearCache(dirname_of(to).c_str());
  if (answer.status == 201) {
    sent.md5 = md5.finish_hex();
    return sent;
  }
  if (answer.status == 409 || answer.status == 412) {
    throw_conditional_failure(to, expected, precondition.first, answer.error);
  }
  throw Error(ErrorKind::k_io, "uploading " + to + " failed: " + answer.error +
                                   "; check that the container exists and that the account's "
                                   "key (AZURE_STORAGE_CONNECTION_STRING) may write to it");
}

// The upload of an object to /vsigs/ that must be conditional and that IDEM sends itself
// (idem_gcs_upload): a resumable upload whose object appears only if the condition holds when GCS
// finalizes it.
CopiedBytes upload_to_gcs(const std::string& from, const std::string& to,
                          const ExpectedObject& expected,
                          const std::pair<std::string, std::string>& precondition,
                          const GcsCredentials& credentials, int64_t size) {
  Md5 md5;
  CopiedBytes sent;
  sent.size = size;
  const HttpAnswer answer = gcs_resumable_upload(
      credentials, to, from, size, gcs_chunk_size(), precondition.second,
      [&](const unsigned char* data, size_t count) { md5.update(data, count); });
  VSICurlPartialClearCache(to.c_str());
  VSICurlPartialClearCache(dirname_of(to).c_str());
  if (answer.status == 200 || answer.status == 201) {
    sent.md5 = md5.finish_hex();
    return sent;
  }
  if (answer.status == 412) {
    throw_conditional_failure(to, expected, precondition.first, answer.error);
  }
  throw Error(ErrorKind::k_io, "uploading " + to + " failed: " + answer.error +
                                   "; check that the bucket exists and that GDAL's GCS "
                                   "credentials (GS_ACCESS_KEY_ID, GS_SECRET_ACCESS_KEY) may "
                                   "write to it");
}

// A conditional upload of `from` (`from_size` bytes, nullopt when it could not be looked at)
// that IDEM sends itself, not through GDAL's writer: every one to Azure, one to GCS larger than a
// chunk (idem_gcs_upload). nullopt for the others.
std::optional<CopiedBytes> upload_by_idem(const std::string& from, const std::string& to,
                                          const ExpectedObject& expected,
                                          const std::pair<std::string, std::string>& precondition,
                                          const std::optional<int64_t>& from_size) {
  if (is_azure(to)) {
    return upload_to_azure(from, to, expected, precondition, from_size);
  }
  if (is_gcs(to) && from_size) {
    if (const std::optional<GcsCredentials> credentials = idem_gcs_upload(to, *from_size)) {
      return upload_to_gcs(from, to, expected, precondition, *credentials, *from_size);
    }
  }
  return std::nullopt;
}

}  // namespace

CopiedBytes copy_vsi_file(const std::string& from, const std::string& to,
                          const ExpectedObject* expected) {
  VSIErrorReset();
  CPLErrorReset();
  VsiFile in(VSIFOpenExL(from.c_str(), "rb", TRUE));
  if (!in) {
    throw Error(ErrorKind::k_io, "cannot read " + from + ": " + last_vsi_error());
  }
  // The condition travels as a creation header of a single PUT (GDAL sends the options of
  // VSIFOpenEx2L as HTTP headers). An object GDAL sends in parts takes it on the request that
  // completes the upload, made when the file is closed: the header is then set for this thread's
  // requests (GDAL_HTTP_HEADERS) around the close only. The parts sent during the writes carry
  // nothing; the last part, sent by the close, carries it too and S3 ignores it there.
  CPLStringList headers;
  std::string condition;
  std::pair<std::string, std::string> precondition;
  if (expected != nullptr) {
    precondition = version_condition(to, expected->version);
    condition = precondition.first + ": " + precondition.second;
  }
  // The size of what a conditional upload sends decides how it goes: looked at once.
  std::optional<int64_t> from_size;
  VSIStatBufL from_info;
  if (expected != nullptr && VSIStatL(from.c_str(), &from_info) == 0) {
    from_size = static_cast<int64_t>(from_info.st_size);
  }
  if (expected != nullptr) {
    if (std::optional<CopiedBytes> sent =
            upload_by_idem(from, to, *expected, precondition, from_size)) {
      return *sent;
    }
  }
  const bool in_parts = from_size && to.rfind("/vsis3/", 0) == 0 && *from_size >= s3_chunk_size();
  if (expected != nullptr && !in_parts) {
    headers.SetNameValue(precondition.first.c_str(), precondition.second.c_str());
  }
  // GDAL reports a refused PUT as an error of its own; a conditional upload's failure is told by
  // the Error thrown below instead (a refusal is often followed by a successful upload).
  std::optional<CPLErrorHandlerPusher> quiet_while_conditional;
  if (expected != nullptr) {
    quiet_while_conditional.emplace(CPLQuietErrorHandler);
  }
  // GDAL 3.10 and later send an object of VSIGS_CHUNK_SIZE (100 MB) or more to /vsigs/ as a
  // multipart upload, whose first request, not its completion, would carry the condition: the
  // chunk is made larger than the object for this thread, so it goes in one PUT, as GDAL 3.6
  // sends every object (conditional_upload_applies stops at GDAL's largest chunk, 5120 MiB).
  std::optional<CPLConfigOptionSetter> one_gcs_put;
  std::optional<CPLConfigOptionSetter> one_gcs_put_bytes;
  if (from_size && is_gcs(to)) {
    const int64_t mib = (*from_size >> 20) + 1;
    one_gcs_put.emplace("VSIGS_CHUNK_SIZE", std::to_string(mib).c_str(), true);
    one_gcs_put_bytes.emplace("VSIGS_CHUNK_SIZE_BYTES", std::to_string(mib << 20).c_str(), true);
  }
  VSILFILE* out = VSIFOpenEx2L(to.c_str(), "wb", TRUE, headers.List());
  if (out == nullptr) {
    throw Error(ErrorKind::k_io, "cannot write " + to + ": " + last_vsi_error() +
                                     " (check the bucket exists and the credentials allow it)");
  }
  CopiedBytes sent;
  Md5 md5;
  // The last chunk (all of a tile) is hashed while the close sends it: an object's upload happens
  // there, and the hash then costs no time of its own.
  std::vector<unsigned char> last_chunk;
  bool written = true;
  bool ok = read_vsi_chunks(in.get(), k_copy_chunk, [&](const unsigned char* data, size_t size) {
    if (size > 0 && VSIFWriteL(data, 1, size, out) != size) {
      written = false;
      return false;
    }
    if (size < k_copy_chunk) {
      last_chunk.assign(data, data + size);
    } else {
      md5.update(data, size);
    }
    sent.size += static_cast<int64_t>(size);
    return true;
  });
  const bool read_failed = !ok && written;  // the source's read failed, not the upload
  const auto hash_last_chunk = [&] { md5.update(last_chunk.data(), last_chunk.size()); };
  std::thread hashing;
  try {
    hashing = std::thread(hash_last_chunk);
  } catch (const std::system_error&) {
    hash_last_chunk();  // no thread to be had: hashed here
  }
  // For an object the upload completes (or fails) on close.
  {
    std::optional<CPLConfigOptionSetter> completion_condition;
    if (in_parts) {
      completion_condition.emplace("GDAL_HTTP_HEADERS", condition.c_str(), true);
    }
    if (VSIFCloseL(out) != 0) {
      ok = false;
    }
  }
  std::string close_error;
  if (in_parts && !ok) {
    close_error = last_vsi_error();
    abort_refused_upload(to, upload_id_in(std::string(CPLGetLastErrorMsg()) + " " + close_error));
  }
  if (hashing.joinable()) {
    hashing.join();
  }
  if (read_failed) {
    throw Error(ErrorKind::k_io, "reading " + from + " to copy it to " + to + " failed");
  }
  if (!ok && expected != nullptr) {
    // Refused for its condition, or failed for another reason: the store's object now decides.
    throw_conditional_failure(to, *expected, precondition.first,
                              close_error.empty() ? last_vsi_error() : close_error);
  }
  if (!ok) {
    if (is_object_store_path(to)) {
      throw Error(ErrorKind::k_io, "uploading " + to + " failed: " + last_vsi_error() +
                                       "; check that the bucket exists and that GDAL's "
                                       "credentials (AWS_*, profile, IAM role) may write to it");
    }
    throw Error(ErrorKind::k_io, "copying " + from + " to " + to + " failed: " + last_vsi_error());
  }
  sent.md5 = md5.finish_hex();
  return sent;
}

}  // namespace idem
