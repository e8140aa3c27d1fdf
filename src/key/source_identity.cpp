// SPDX-License-Identifier: MIT
// Source identity: what a source dataset *is* for the key, independent of where it lives.
#include "key/source_identity.hpp"

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <iterator>
#include <memory>
#include <set>
#include <vector>

#include "base/error.hpp"
#include "base/gdal_compat.hpp"
#include "base/paths.hpp"
#include "base/sha256.hpp"
#include "cpl_conv.h"
#include "cpl_minixml.h"
#include "cpl_string.h"
#include "cpl_vsi.h"
#include "gdal_priv.h"
#include "gdal_proxy.h"
#include "key/source_drivers.hpp"
#include "key/vrt_reads.hpp"
#include "ogr_spatialref.h"
#include "vrtdataset.h"

namespace idem {

namespace {

// Local paths compare by their real path so two spellings of one file count once.
std::string dedup_key(const std::string& path) {
  if (is_vsi_path(path)) {
    return path;
  }
  char resolved[PATH_MAX];
  if (::realpath(path.c_str(), resolved) != nullptr) {
    return resolved;
  }
  return path;
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

// Everything besides its pixels that a dataset without files hands a reader, and so the output:
// georeferencing, GCPs, metadata of every domain, and per band nodata, colour interpretation and
// table, offset, scale, unit, description, metadata and mask (its flags, and its pixels when it
// is a mask of its own). One SHA-256 over a canonical text of them.
std::string raster_sha256(GDALDataset* dataset) {
  Sha256 hasher;
  const auto put = [&hasher](const std::string& name, const std::string& value) {
    hasher.update(name + "=" + std::to_string(value.size()) + ":" + value + ";");
  };
  const auto metadata_text = [](GDALMajorObject* object) {
    std::string text;
    const CPLStringList domains(object->GetMetadataDomainList());
    std::set<std::string> sorted_domains{""};
    for (int i = 0; i < domains.size(); ++i) {
      sorted_domains.insert(domains[i]);
    }
    for (const std::string& domain : sorted_domains) {
      if (domain.rfind("xml:", 0) == 0 || domain == "DERIVED_SUBDATASETS") {
        continue;
      }
      CPLStringList items(CSLDuplicate(object->GetMetadata(domain.c_str())), TRUE);
      items.Sort();
      for (int i = 0; i < items.size(); ++i) {
        text += domain + "|" + items[i] + "\n";
      }
    }
    return text;
  };
  double transform[6];
  if (dataset->GetGeoTransform(transform) == CE_None) {
    put("geotransform",
        CPLSPrintf("%.17g,%.17g,%.17g,%.17g,%.17g,%.17g", transform[0], transform[1], transform[2],
                   transform[3], transform[4], transform[5]));
  }
  const auto wkt_of = [](const OGRSpatialReference* srs) {
    char* wkt = nullptr;
    const char* const options[] = {"FORMAT=WKT2_2019", nullptr};
    if (srs == nullptr || srs->exportToWkt(&wkt, options) != OGRERR_NONE || wkt == nullptr) {
      CPLFree(wkt);
      return std::string();
    }
    std::string text = wkt;
    CPLFree(wkt);
    return text;
  };
  put("srs", wkt_of(dataset->GetSpatialRef()));
  const GDAL_GCP* gcps = dataset->GetGCPs();
  for (int i = 0; i < dataset->GetGCPCount(); ++i) {
    put("gcp", CPLSPrintf("%.17g,%.17g,%.17g,%.17g,%.17g", gcps[i].dfGCPPixel, gcps[i].dfGCPLine,
                          gcps[i].dfGCPX, gcps[i].dfGCPY, gcps[i].dfGCPZ));
  }
  if (dataset->GetGCPCount() > 0) {
    put("gcp_srs", wkt_of(dataset->GetGCPSpatialRef()));
  }
  put("metadata", metadata_text(dataset));
  for (int index = 1; index <= dataset->GetRasterCount(); ++index) {
    GDALRasterBand* band = dataset->GetRasterBand(index);
    put("band", std::to_string(index));
    int has = FALSE;
    const double nodata = band->GetNoDataValue(&has);
    put("nodata", has ? CPLSPrintf("%.17g", nodata) : "none");
    put("color_interpretation", std::to_string(band->GetColorInterpretation()));
    put("offset", CPLSPrintf("%.17g", band->GetOffset()));
    put("scale", CPLSPrintf("%.17g", band->GetScale()));
    put("unit", band->GetUnitType());
    put("description", band->GetDescription());
    if (const GDALColorTable* table = band->GetColorTable()) {
      for (int i = 0; i < table->GetColorEntryCount(); ++i) {
        const GDALColorEntry* entry = table->GetColorEntry(i);
        put("color", CPLSPrintf("%d,%d,%d,%d", entry->c1, entry->c2, entry->c3, entry->c4));
      }
    }
    put("band_metadata", metadata_text(band));
    const int mask_flags = band->GetMaskFlags();
    put("mask_flags", std::to_string(mask_flags));
    if ((mask_flags & (GMF_ALL_VALID | GMF_NODATA)) == 0) {
      GDALRasterBand* mask = band->GetMaskBand();
      const int x_size = mask->GetXSize();
      std::vector<unsigned char> row(static_cast<std::size_t>(x_size));
      for (int y = 0; y < mask->GetYSize(); ++y) {
        if (mask->RasterIO(GF_Read, 0, y, x_size, 1, row.data(), x_size, 1, GDT_Byte, 0, 0,
                           nullptr) != CE_None) {
          throw Error(ErrorKind::k_source, std::string("cannot read the mask of source '") +
                                               dataset->GetDescription() + "'");
        }
        hasher.update(row.data(), row.size());
      }
    }
  }
  return hasher.finish_hex();
}

}  // namespace

bool is_vrt_in_memory(GDALDataset* dataset) {
  const std::string description = dataset->GetDescription();
  return dynamic_cast<VRTDataset*>(dataset) != nullptr &&
         (description.empty() || description[0] == '<');
}

bool held_not_reopened(GDALDataset* dataset) {
  // A VRT's stand-in for a file (GDALProxyPoolDataset, gdalbuildvrt's) opens it by its name: it
  // lists no file when that file is gone, and is then a missing source, not one held.
  return is_vrt_in_memory(dataset) || (dynamic_cast<GDALProxyPoolDataset*>(dataset) == nullptr &&
                                       CPLStringList(dataset->GetFileList()).size() == 0);
}

std::optional<JsonValue> missing_source(const std::string& name) {
  VSIStatBufL info;
  if (VSIStatExL(name.c_str(), &info, VSI_STAT_EXISTS_FLAG) == 0) {
    return std::nullopt;
  }
  JsonValue entry = JsonValue::object();
  entry.set("missing", JsonValue::string(name));
  return entry;
}

namespace {

// A dataset without files is what it holds: its pixels and all that describes them.
JsonValue in_memory_identity(GDALDataset* dataset) {
  JsonValue identity = JsonValue::object();
  identity.set("pixels_sha256", JsonValue::string(pixels_sha256(dataset)));
  identity.set("raster_sha256", JsonValue::string(raster_sha256(dataset)));
  return identity;
}

std::string vrt_xml_sha256(GDALDataset* dataset, const KeptSources* kept) {
  Sha256 hasher;
  hasher.update(vrt_xml_for_key(dataset, kept));
  return hasher.finish_hex();
}

// Whether an element of a VRTRasterBand is one of its sources (what GDAL writes for each entry
// of the band's source list): one that names its dataset.
bool is_source_element(const CPLXMLNode* node) {
  return node->eType == CXT_Element && CPLGetXMLNode(node, "SourceFilename") != nullptr;
}

// GDALProxyDataset::RefUnderlyingDataset() is protected, with no public way to the dataset a proxy
// stands for (3.6 to 3.13). An explicit instantiation may name a protected member (C++17
// [temp.spec]/6), which this one hands out as a member pointer, checked by the compiler against
// the header; a call through it dispatches virtually.
using RefUnderlying = GDALDataset* (GDALProxyDataset::*)() const;
RefUnderlying ref_underlying_member();
template <RefUnderlying member>
struct RefUnderlyingMember {
  friend RefUnderlying ref_underlying_member() { return member; }
};
template struct RefUnderlyingMember<&GDALProxyDataset::RefUnderlyingDataset>;

// The dataset a GDALG pipeline's proxy stands for, which it holds for its own life (its Unref is
// nothing); nullptr for another dataset.
GDALDataset* underlying_of_proxy(GDALDataset* dataset) {
  const auto* proxy = dynamic_cast<GDALProxyDataset*>(dataset);
  return proxy != nullptr ? (proxy->*ref_underlying_member())() : nullptr;
}

// NAME of DERIVED_SUBDATASET:FUNCTION:NAME, the dataset a derived subdataset computes from.
std::string derived_source_name(const std::string& description) {
  const std::string prefix = "DERIVED_SUBDATASET:";
  const auto function_end = STARTS_WITH_CI(description.c_str(), prefix.c_str())
                                ? description.find(':', prefix.size())
                                : std::string::npos;
  if (function_end == std::string::npos) {
    throw Error(ErrorKind::k_source, "the derived dataset '" + description +
                                         "' is not named DERIVED_SUBDATASET:FUNCTION:NAME");
  }
  return description.substr(function_end + 1);
}

// Whether `path` is a `.aux.xml` that holds nothing but the exact statistics GDAL computes from
// the pixels and saves beside a source (STATISTICS_MINIMUM, _MAXIMUM, _MEAN, _STDDEV,
// _VALID_PERCENT, without STATISTICS_APPROXIMATE): a function of the pixels, nodata and mask
// the key identifies already. Writing an RST, or `gdal_translate -stats`, computes them on the
// source and saves them there when the source is closed, after the work: keyed, they made the
// work's first rerun a new work. Anything else in the file (approximate statistics, a
// histogram, georeferencing, nodata, other metadata) keeps the whole file in the key
// (docs/keys.md, "Source identity").
bool holds_only_derived_statistics(const std::string& path) {
  constexpr int64_t k_largest = int64_t{64} * 1024;
  VSIStatBufL info;
  if (!EQUAL(CPLGetExtension(path.c_str()), "xml") || path.size() < 8 ||
      !EQUAL(path.substr(path.size() - 8).c_str(), ".aux.xml") ||
      VSIStatL(path.c_str(), &info) != 0 || static_cast<int64_t>(info.st_size) > k_largest) {
    return false;
  }
  const CPLXMLTreeCloser tree(CPLParseXMLFile(path.c_str()));
  const CPLXMLNode* root = tree.get();
  while (root != nullptr && root->eType != CXT_Element) {
    root = root->psNext;  // an <?xml ...?> declaration
  }
  if (root == nullptr || !EQUAL(root->pszValue, "PAMDataset") || root->psNext != nullptr) {
    return false;
  }
  static const char* const derived[] = {"STATISTICS_MINIMUM", "STATISTICS_MAXIMUM",
                                        "STATISTICS_MEAN", "STATISTICS_STDDEV",
                                        "STATISTICS_VALID_PERCENT"};
  bool any = false;
  for (const CPLXMLNode* band = root->psChild; band != nullptr; band = band->psNext) {
    if (band->eType == CXT_Attribute || band->eType == CXT_Text) {
      return false;
    }
    if (band->eType != CXT_Element || !EQUAL(band->pszValue, "PAMRasterBand")) {
      return false;
    }
    for (const CPLXMLNode* item = band->psChild; item != nullptr; item = item->psNext) {
      if (item->eType == CXT_Attribute && EQUAL(item->pszValue, "band")) {
        continue;
      }
      if (item->eType != CXT_Element || !EQUAL(item->pszValue, "Metadata")) {
        return false;
      }
      for (const CPLXMLNode* mdi = item->psChild; mdi != nullptr; mdi = mdi->psNext) {
        if (mdi->eType != CXT_Element || !EQUAL(mdi->pszValue, "MDI")) {
          return false;  // a domain attribute, or anything but items
        }
        const char* key = CPLGetXMLValue(mdi, "key", "");
        if (std::find_if(std::begin(derived), std::end(derived),
                         [&](const char* name) { return EQUAL(name, key); }) == std::end(derived)) {
          return false;
        }
        any = true;
      }
    }
  }
  return any;
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
      throw Error(ErrorKind::k_source, std::string("the VRT sources under '") +
                                           dataset->GetDescription() + "' are nested more than " +
                                           std::to_string(k_max_vrt_depth) +
                                           " levels deep (or a VRT reads itself): flatten them");
    }
    // What the dataset reads, as its driver lets the key know it (source_drivers.hpp): a driver
    // not known to list all it reads is refused here, before any claim.
    const DriverReads reads = driver_reads(dataset);
    switch (reads.kind) {
      case DriverReads::Kind::k_refused:
        // A source named by the work itself that has no files (a database or a service) is
        // known by what it holds, as a MEM dataset is (identity_of_dataset).
        if (depth == 0 && CPLStringList(dataset->GetFileList()).size() == 0) {
          return;
        }
        refuse_unknown_reads(dataset->GetDescription(), reads.driver);
      case DriverReads::Kind::k_derived:
        add_source(derived_source_name(dataset->GetDescription()), depth + 1);
        return;
      case DriverReads::Kind::k_pipeline:
        add_pipeline(dataset, depth);
        return;
      case DriverReads::Kind::k_no_files:
        if (depth > 0) {  // opened by its name (MEM:::): known by what it holds
          m_files.push_back(in_memory_identity(dataset));
        }
        return;
      case DriverReads::Kind::k_trusted: {
        JsonValue entry = JsonValue::object();
        entry.set("file_list_trusted", JsonValue::string(reads.driver));
        m_files.push_back(std::move(entry));
        break;
      }
      case DriverReads::Kind::k_file_list:
      case DriverReads::Kind::k_vrt:
        break;
    }
    // A VRT made in memory has no file of its own, and the names its file list gives for its
    // sources may be of datasets held in memory (GDAL 3.10 lists them whether or not a file of
    // that name exists): its sources are taken from its XML below instead.
    if (!is_vrt_in_memory(dataset)) {
      const CPLStringList files(dataset->GetFileList());
      for (int i = 0; i < files.size(); ++i) {
        // From GDAL 3.10 the list holds a sidecar GDAL means to write at close but has not
        // written yet (the .aux.xml of statistics gdal_translate -stats computed on the
        // source): a local file that is not there is not part of the source.
        VSIStatBufL info;
        if (i > 0 && !is_vsi_path(files[i]) &&
            VSIStatExL(files[i], &info, VSI_STAT_EXISTS_FLAG) != 0) {
          continue;
        }
        if (i > 0 && holds_only_derived_statistics(files[i])) {
          continue;
        }
        add_file(files[i]);
      }
    }
    if (reads.kind == DriverReads::Kind::k_vrt) {
      const std::string xml = vrt_xml_for_key(dataset, m_options.kept_sources);
      if (!xml.empty()) {
        const CPLXMLTreeCloser tree(CPLParseXMLString(xml.c_str()));
        const std::string description = dataset->GetDescription();
        const std::string vrt_dir = description.empty() || description[0] == '<'
                                        ? std::string()
                                        : std::string(CPLGetPath(description.c_str()));
        // Every dataset the VRT reads: its sources, and for a warp the RPC DEM (DEMPath)
        // and the geolocation arrays its transformer reads, which decide pixels as the sources
        // do.
        for (const VrtRead& read : vrt_reads(tree.get(), vrt_dir)) {
          add_source(read.name, depth + 1);
        }
      }
    }
  }

  void add_source(const std::string& name, int depth) {
    if (!m_seen_sources.insert(dedup_key(name)).second) {
      return;
    }
    // A source the caller holds without files (a MEM dataset a VRT made in memory reads from)
    // is taken from the caller's handle; it could not be opened by its name.
    if (m_options.kept_sources != nullptr) {
      if (GDALDataset* kept = m_options.kept_sources->find(name)) {
        if (is_vrt_in_memory(kept)) {
          add_vrt_in_memory(kept, depth);
          return;
        }
        if (held_not_reopened(kept)) {
          m_files.push_back(m_options.kept_sources->held_identity(kept));
          return;
        }
      }
    }
    // A file a VRT names that is not there: GDAL opens a VRT's sources only when it reads
    // them, so the work may never need it (gdal_translate -srcwin away from it), and one that
    // does fails as the direct call fails. Its absence is what the key records: the work is
    // done again once a file appears under that name (docs/keys.md, "Missing sources").
    // Only a name that does not open and is no file at all counts as missing: a name that
    // opens without being a file (NETCDF:"x.nc":var) is identified as it opens.
    GDALDatasetUniquePtr dataset;
    try {
      dataset = open_source(name);
    } catch (const Error&) {
      std::optional<JsonValue> missing = depth > 0 ? missing_source(name) : std::nullopt;
      if (!missing) {
        throw;
      }
      m_files.push_back(std::move(*missing));
      return;
    }
    add_dataset(dataset.get(), depth);
  }

  // A GDALG pipeline (GDAL 3.11+): its file (the command line), and the dataset the pipeline
  // computes as GDAL opened it, keyed by what that one reads (a VRT made in memory, usually).
  void add_pipeline(GDALDataset* dataset, int depth) {
    const CPLStringList files(dataset->GetFileList());
    for (int i = 0; i < files.size(); ++i) {
      add_file(files[i]);
    }
    GDALDataset* computed = underlying_of_proxy(dataset);
    if (computed == nullptr) {
      refuse_unknown_reads(dataset->GetDescription(), "GDALG");
    }
    const DriverReads reads = driver_reads(computed);
    if (is_vrt_in_memory(computed)) {
      add_vrt_in_memory(computed, depth + 1);
    } else if (reads.kind == DriverReads::Kind::k_no_files ||
               CPLStringList(computed->GetFileList()).size() == 0) {
      m_files.push_back(in_memory_identity(computed));
    } else {
      add_dataset(computed, depth + 1);
    }
  }

  // A VRT made in memory has no file that holds its XML: the XML itself is identified, with the
  // sources it names.
  void add_vrt_in_memory(GDALDataset* dataset, int depth) {
    JsonValue entry = JsonValue::object();
    entry.set("vrt_xml_sha256", JsonValue::string(vrt_xml_sha256(dataset, m_options.kept_sources)));
    m_files.push_back(std::move(entry));
    add_dataset(dataset, depth);
  }

  void add_file(const std::string& path) {
    if (!m_seen_files.insert(dedup_key(path)).second) {
      return;
    }
    SourceDigest digest = digest_source_file(path, m_options.policy, m_options.cache);
    if (m_options.seen_files != nullptr) {
      m_options.seen_files->push_back(SourceFile{path, digest.read_as});
    }
    m_files.push_back(source_digest_json(digest));
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
    return in_memory_identity(dataset);  // no files behind it (MEM, some virtual datasets)
  }
  if (is_vrt_in_memory(dataset)) {
    identity.set("vrt_xml_sha256",
                 JsonValue::string(vrt_xml_sha256(dataset, options.kept_sources)));
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
  GDALDataset* dataset = nullptr;
  GDALDatasetUniquePtr opened;
  try {
    dataset = options.kept_sources != nullptr ? open_and_keep_source(name, *options.kept_sources)
                                              : (opened = open_source(name)).get();
  } catch (const Error&) {
    std::optional<JsonValue> missing = missing_source(name);
    if (!missing) {
      throw;
    }
    return std::move(*missing);
  }
  return identity_of_dataset(dataset, options);
}

KeptSources::~KeptSources() {
  for (const auto& [name, dataset] : m_datasets) {
    dataset->ReleaseRef();
  }
}

std::string vrt_xml_for_key(GDALDataset* vrt, const KeptSources* kept) {
  CSLConstList xml = vrt->GetMetadata("xml:VRT");
  if (xml == nullptr || xml[0] == nullptr) {
    return std::string();
  }
  // Which sources of which band go by an alias: none, most of the time.
  std::map<int, std::map<size_t, std::string>> aliases;
  const bool any = kept != nullptr && kept->has_aliases();
  for (int number = 1; any && number <= vrt->GetRasterCount(); ++number) {
    auto* band = dynamic_cast<VRTSourcedRasterBand*>(vrt->GetRasterBand(number));
    if (band == nullptr) {
      continue;
    }
    const std::vector<VRTSource*> sources = compat::vrt_band_sources(band);
    for (size_t i = 0; i < sources.size(); ++i) {
      GDALRasterBand* from = sources[i]->IsSimpleSource()
                                 ? static_cast<VRTSimpleSource*>(sources[i])->GetRasterBand()
                                 : nullptr;
      const std::string alias = from != nullptr && from->GetDataset() != nullptr
                                    ? kept->alias_of(from->GetDataset())
                                    : std::string();
      if (!alias.empty()) {
        aliases[number][i] = alias;
      }
    }
  }
  if (aliases.empty()) {
    return xml[0];
  }
  const CPLXMLTreeCloser tree(CPLParseXMLString(xml[0]));
  CPLXMLNode* root = tree ? CPLGetXMLNode(tree.get(), "=VRTDataset") : nullptr;
  if (root == nullptr) {
    throw Error(ErrorKind::k_internal, "the xml:VRT of a VRT made in memory does not parse");
  }
  int number = 0;
  for (CPLXMLNode* band = root->psChild; band != nullptr; band = band->psNext) {
    if (band->eType != CXT_Element || !EQUAL(band->pszValue, "VRTRasterBand")) {
      continue;
    }
    number = std::atoi(CPLGetXMLValue(band, "band", std::to_string(number + 1).c_str()));
    const auto renamed = aliases.find(number);
    size_t index = 0;
    for (CPLXMLNode* source = band->psChild; source != nullptr; source = source->psNext) {
      if (!is_source_element(source)) {
        continue;
      }
      if (renamed != aliases.end()) {
        const auto alias = renamed->second.find(index);
        if (alias != renamed->second.end()) {
          CPLSetXMLValue(source, "SourceFilename", alias->second.c_str());
        }
      }
      ++index;
    }
  }
  char* text = CPLSerializeXMLTree(tree.get());
  std::string rewritten = text != nullptr ? text : "";
  CPLFree(text);
  return rewritten;
}

const JsonValue& KeptSources::held_identity(GDALDataset* dataset) {
  auto known = m_held_identities.find(dataset);
  if (known == m_held_identities.end()) {
    known = m_held_identities.emplace(dataset, in_memory_identity(dataset)).first;
  }
  return known->second;
}

void KeptSources::keep_aliased(GDALDataset* dataset) {
  auto known = m_aliases.find(dataset);
  if (known == m_aliases.end()) {
    Sha256 hasher;
    hasher.update(held_identity(dataset).dump());
    known = m_aliases
                .emplace(dataset, std::string(dataset->GetDescription()) +
                                      "#idem-held:" + hasher.finish_hex())
                .first;
  }
  keep(known->second, dataset);
}

std::string KeptSources::alias_of(GDALDataset* dataset) const {
  const auto it = m_aliases.find(dataset);
  return it == m_aliases.end() ? std::string() : it->second;
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
