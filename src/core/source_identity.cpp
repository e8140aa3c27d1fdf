// Source identity: what a source dataset *is* for the key, independent of where it lives.
#include "core/source_identity.hpp"

#include <climits>
#include <cstdlib>
#include <memory>
#include <set>
#include <vector>

#include "core/error.hpp"
#include "core/sha256.hpp"
#include "cpl_conv.h"
#include "cpl_minixml.h"
#include "cpl_string.h"
#include "gdal_priv.h"

namespace idem {

namespace {

constexpr int k_max_vrt_depth = 32;

struct XmlFree {
  void operator()(CPLXMLNode* node) const { CPLDestroyXMLNode(node); }
};

// Local paths compare by their real path so two spellings of one file count once.
std::string dedup_key(const std::string& path) {
  if (path.rfind("/vsi", 0) == 0) {
    return path;
  }
  char resolved[PATH_MAX];
  if (::realpath(path.c_str(), resolved) != nullptr) {
    return resolved;
  }
  return path;
}

bool is_true_attribute(const CPLXMLNode* node, const char* name) {
  for (const CPLXMLNode* child = node->psChild; child != nullptr; child = child->psNext) {
    if (child->eType == CXT_Attribute && EQUAL(child->pszValue, name) &&
        child->psChild != nullptr) {
      return CPLTestBool(child->psChild->pszValue);
    }
  }
  return false;
}

std::string element_text(const CPLXMLNode* node) {
  for (const CPLXMLNode* child = node->psChild; child != nullptr; child = child->psNext) {
    if (child->eType == CXT_Text) {
      return child->pszValue;
    }
  }
  return std::string();
}

std::string pixels_sha256(GDALDataset* dataset) {
  Sha256 hasher;
  const int x_size = dataset->GetRasterXSize();
  const int y_size = dataset->GetRasterYSize();
  hasher.update(std::to_string(x_size) + "x" + std::to_string(y_size) + ";");
  for (int band_index = 1; band_index <= dataset->GetRasterCount(); ++band_index) {
    GDALRasterBand* band = dataset->GetRasterBand(band_index);
    const GDALDataType type = band->GetRasterDataType();
    const int type_size = GDALGetDataTypeSizeBytes(type);
    hasher.update(std::string(GDALGetDataTypeName(type)) + ";");
    std::vector<unsigned char> row(static_cast<std::size_t>(x_size) * type_size);
    for (int y = 0; y < y_size; ++y) {
      if (band->RasterIO(GF_Read, 0, y, x_size, 1, row.data(), x_size, 1, type, 0, 0, nullptr) !=
          CE_None) {
        throw Error(ErrorKind::k_source, std::string("cannot read pixels of source '") +
                                             dataset->GetDescription() + "'");
      }
      hasher.update(row.data(), row.size());
    }
  }
  return hasher.finish_hex();
}

GDALDatasetUniquePtr open_source(const std::string& name) {
  CPLErrorReset();
  GDALDatasetUniquePtr dataset;
  {
    CPLErrorHandlerPusher quiet(CPLQuietErrorHandler);
    dataset.reset(GDALDataset::Open(name.c_str(), GDAL_OF_RASTER | GDAL_OF_READONLY));
  }
  if (!dataset) {
    const std::string reason = CPLGetLastErrorMsg();
    throw Error(ErrorKind::k_source, "cannot open source '" + name + "'" +
                                         (reason.empty() ? std::string() : ": " + reason));
  }
  return dataset;
}

class IdentityCollector {
 public:
  explicit IdentityCollector(const SourceIdentityOptions& options) : m_options(options) {}

  void add_dataset(GDALDataset* dataset, int depth) {
    if (depth > k_max_vrt_depth) {
      throw Error(ErrorKind::k_source, std::string("VRT sources nested too deeply under '") +
                                           dataset->GetDescription() + "'");
    }
    const CPLStringList files(dataset->GetFileList());
    for (int i = 0; i < files.size(); ++i) {
      add_file(files[i]);
    }
    GDALDriver* driver = dataset->GetDriver();
    if (driver != nullptr && EQUAL(driver->GetDescription(), "VRT")) {
      CSLConstList xml = dataset->GetMetadata("xml:VRT");
      if (xml != nullptr && xml[0] != nullptr) {
        std::unique_ptr<CPLXMLNode, XmlFree> tree(CPLParseXMLString(xml[0]));
        const std::string description = dataset->GetDescription();
        const std::string vrt_dir = description.empty() || description[0] == '<'
                                        ? std::string()
                                        : std::string(CPLGetPath(description.c_str()));
        if (tree) {
          add_vrt_sources(tree.get(), vrt_dir, depth);
        }
      }
    }
  }

  void add_vrt_sources(const CPLXMLNode* node, const std::string& vrt_dir, int depth) {
    for (const CPLXMLNode* child = node; child != nullptr; child = child->psNext) {
      if (child->eType != CXT_Element) {
        continue;
      }
      if (EQUAL(child->pszValue, "SourceFilename") || EQUAL(child->pszValue, "SourceDataset")) {
        const std::string name = element_text(child);
        const bool relative = is_true_attribute(child, "relativeToVRT");
        add_source(relative && !vrt_dir.empty()
                       ? std::string(CPLProjectRelativeFilename(vrt_dir.c_str(), name.c_str()))
                       : name,
                   depth + 1);
      } else {
        add_vrt_sources(child->psChild, vrt_dir, depth);
      }
    }
  }

  void add_source(const std::string& name, int depth) {
    if (!m_seen_sources.insert(dedup_key(name)).second) {
      return;
    }
    GDALDatasetUniquePtr dataset = open_source(name);
    add_dataset(dataset.get(), depth);
  }

  void add_file(const std::string& path) {
    if (!m_seen_files.insert(dedup_key(path)).second) {
      return;
    }
    if (m_options.seen_files != nullptr) {
      m_options.seen_files->push_back(path);
    }
    m_files.push_back(
        source_digest_json(digest_source_file(path, m_options.policy, m_options.cache)));
  }

  JsonValue::Array take_files() { return std::move(m_files); }
  bool empty() const { return m_files.empty(); }

 private:
  const SourceIdentityOptions& m_options;
  std::set<std::string> m_seen_sources;
  std::set<std::string> m_seen_files;
  JsonValue::Array m_files;
};

// The dataset name with its first file's path replaced by "{file}", or "" when it is just that.
std::string name_template(const std::string& name, const std::string& first_file) {
  if (first_file.empty() || name == first_file) {
    return std::string();
  }
  std::string result = name;
  const auto at = result.find(first_file);
  if (at == std::string::npos) {
    return result;
  }
  result.replace(at, first_file.size(), "{file}");
  return result == "{file}" ? std::string() : result;
}

}  // namespace

JsonValue identity_of_dataset(GDALDataset* dataset, const SourceIdentityOptions& options) {
  JsonValue identity = JsonValue::object();
  GDALDriver* driver = dataset->GetDriver();
  const bool in_memory = driver != nullptr && EQUAL(driver->GetDescription(), "MEM");
  IdentityCollector collector(options);
  if (!in_memory) {
    collector.add_dataset(dataset, 0);
  }
  if (collector.empty()) {
    // No files behind it (MEM, some virtual datasets): its pixels are its identity.
    identity.set("pixels_sha256", JsonValue::string(pixels_sha256(dataset)));
    return identity;
  }
  const CPLStringList files(dataset->GetFileList());
  const std::string name =
      name_template(dataset->GetDescription(), files.size() > 0 ? files[0] : "");
  if (!name.empty()) {
    identity.set("name", JsonValue::string(name));
  }
  identity.set("files", JsonValue::array(collector.take_files()));
  return identity;
}

GDALDataset* open_and_keep_source(const std::string& name, KeptSources& kept) {
  if (GDALDataset* dataset = kept.find(name)) {
    return dataset;
  }
  GDALDatasetUniquePtr dataset = open_source(name);
  kept.keep(name, dataset.get());
  return dataset.release();
}

JsonValue identity_of_source(const std::string& name, const SourceIdentityOptions& options) {
  if (options.kept_sources != nullptr) {
    return identity_of_dataset(open_and_keep_source(name, *options.kept_sources), options);
  }
  GDALDatasetUniquePtr dataset = open_source(name);
  return identity_of_dataset(dataset.get(), options);
}

KeptSources::~KeptSources() {
  for (const auto& [name, dataset] : m_datasets) {
    dataset->ReleaseRef();
  }
}

void KeptSources::keep(const std::string& name, GDALDataset* dataset) {
  if (!m_datasets.emplace(name, dataset).second) {
    dataset->ReleaseRef();
  }
}

GDALDataset* KeptSources::find(const std::string& name) const {
  const auto it = m_datasets.find(name);
  return it == m_datasets.end() ? nullptr : it->second;
}

JsonValue source_digest_json(const SourceDigest& digest) {
  JsonValue entry = JsonValue::object();
  entry.set(digest.method, JsonValue::string(digest.value));
  if (digest.method != k_content_digest_method && digest.size >= 0) {
    entry.set("size", JsonValue::integer(digest.size));
  }
  return entry;
}

}  // namespace idem
