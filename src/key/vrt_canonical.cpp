// SPDX-License-Identifier: MIT
// A VRT's XML as canonical JSON (see vrt_canonical.hpp and docs/keys.md).
#include "key/vrt_canonical.hpp"

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "base/error.hpp"
#include "base/paths.hpp"
#include "base/secret_names.hpp"
#include "cpl_conv.h"
#include "cpl_minixml.h"
#include "cpl_string.h"
#include "gdal_priv.h"
#include "key/crs_normalize.hpp"
#include "key/vrt_reads.hpp"

namespace idem {

namespace {

const char* const k_srs_tags[] = {"SRS", "SourceSRS", "TargetSRS", "SrcSRS", "DstSRS"};

// Attempt-varying settings that cannot change a pixel: out of the key.
const char* const k_dropped_elements[] = {"WarpMemoryLimit"};
const char* const k_dropped_options[] = {"NUM_THREADS"};

bool tag_in(const char* tag, const char* const* list, std::size_t count) {
  for (std::size_t i = 0; i < count; ++i) {
    if (EQUAL(tag, list[i])) {
      return true;
    }
  }
  return false;
}

template <std::size_t N>
bool tag_in(const char* tag, const char* const (&list)[N]) {
  return tag_in(tag, list, N);
}

// An attribute (or a child element) of `node` read as GDAL's VRT reader reads it: through
// CPLGetXMLValue / CPLGetXMLNode, which match names case-insensitively.
std::string attribute(const CPLXMLNode* node, const char* name) {
  return CPLGetXMLValue(node, name, "");
}

bool has_attribute(const CPLXMLNode* node, const char* name) {
  return CPLGetXMLNode(node, name) != nullptr;
}

std::string text_of(const CPLXMLNode* node) {
  std::string text;
  for (const CPLXMLNode* child = node->psChild; child != nullptr; child = child->psNext) {
    if (child->eType == CXT_Text) {
      text += child->pszValue;
    }
  }
  return text;
}

// What an element asks normalize_crs_with_axes, if anything: an SRS element's definition, or a
// GCP list's Projection attribute, with the data axis mapping.
using CrsQuestion = std::pair<std::string, std::string>;

std::optional<CrsQuestion> crs_question(const CPLXMLNode* node) {
  std::string definition;
  if (tag_in(node->pszValue, k_srs_tags)) {
    definition = CPLString(text_of(node)).Trim();
  } else if (EQUAL(node->pszValue, "GCPList")) {
    definition = attribute(node, "Projection");
    if (CPLString(definition).Trim().empty()) {
      definition.clear();
    }
  }
  if (definition.empty()) {
    return std::nullopt;
  }
  return CrsQuestion(definition, attribute(node, "dataAxisToSRSAxisMapping"));
}

void collect_crs_questions(const CPLXMLNode* node, std::vector<CrsQuestion>& questions) {
  for (; node != nullptr; node = node->psNext) {
    if (node->eType != CXT_Element) {
      continue;
    }
    if (auto question = crs_question(node)) {
      questions.push_back(std::move(*question));
    }
    collect_crs_questions(node->psChild, questions);
  }
}

bool has_child(const CPLXMLNode* node, const char* tag) {
  return CPLGetXMLNode(node, tag) != nullptr;
}

// Is an Option element, and its name (Option name="..." in warp options, key="..." in
// transformer options).
bool option_name(const CPLXMLNode* node, std::string& name) {
  if (node->eType != CXT_Element || !EQUAL(node->pszValue, "Option")) {
    return false;
  }
  if (has_attribute(node, "name")) {
    name = attribute(node, "name");
    return true;
  }
  if (has_attribute(node, "key")) {
    name = attribute(node, "key");
    return true;
  }
  return false;
}

// The datasets the VRT reads, by the element that names each (vrt_reads.hpp).
using ReadsByNode = std::map<const CPLXMLNode*, const VrtRead*>;

ReadsByNode reads_by_node(const std::vector<VrtRead>& reads) {
  ReadsByNode by_node;
  for (const VrtRead& read : reads) {
    by_node.emplace(read.node, &read);
  }
  return by_node;
}

// The warp sources' names (SourceDataset elements) that name local files.
void collect_warp_source_names(const std::vector<VrtRead>& reads, std::vector<std::string>& names) {
  for (const VrtRead& read : reads) {
    if (read.kind == VrtRead::Kind::k_warp_source && !is_vsi_path(read.name)) {
      names.push_back(read.name);
    }
  }
}

// Opens the warp's source (SourceDataset, kept open for the warp) ahead of the element walk,
// and adds its local files, as they are now, to `digests`: the digest cache is asked for them
// together with the CRS memo (see canonical_vrt). Files that cannot be read are left to the
// walk, which reports them.
void open_warp_sources(const std::vector<VrtRead>& reads, KeptSources& kept,
                       std::vector<DigestCache::Entry>& digests) {
  for (const VrtRead& read : reads) {
    if (read.kind != VrtRead::Kind::k_warp_source) {
      continue;
    }
    GDALDataset* dataset = open_and_keep_source(read.name, kept);
    const CPLStringList files(dataset->GetFileList());
    for (int i = 0; i < files.size(); ++i) {
      if (!is_vsi_path(files[i])) {
        try {
          digests.emplace_back(files[i], local_file_identity(files[i]));
        } catch (const Error&) {
          // left to the walk, which reports it
        }
      }
    }
  }
}

class VrtCanonicaliser {
 public:
  VrtCanonicaliser(const VrtCanonicalOptions& options, const ReadsByNode& reads)
      : m_options(options), m_reads(reads) {}

  JsonValue element(const CPLXMLNode* node, int depth) {
    const char* tag = node->pszValue;
    JsonValue result = JsonValue::object();
    result.set("tag", JsonValue::string(tag));

    // A dataset the VRT reads (a source, an RPC transformer's DEM, a geolocation array, a
    // processing step's gain, offset or trimming dataset) decides pixels: keyed by what it
    // holds, not by its name.
    if (const auto read = m_reads.find(node); read != m_reads.end()) {
      return read_element(node, *read->second, std::move(result));
    }
    const bool is_srs = tag_in(tag, k_srs_tags);
    if (is_srs) {
      if (const auto question = crs_question(node)) {
        result.set("crs", normalize_crs_with_axes(question->first, question->second,
                                                  m_options.sources.cache));
      }
    }

    Members members = members_of(node, depth, is_srs);
    JsonValue& attributes = members.attributes;
    JsonValue& children = members.children;
    JsonValue& options = members.options;
    const std::string& text = members.text;
    if (EQUAL(tag, "GDALWarpOptions")) {
      normalise_warp_options(node, options);
    }
    if (EQUAL(tag, "Metadata") && EQUAL(attribute(node, "domain").c_str(), "IMAGE_STRUCTURE")) {
      sort_items_by_key(children);
    }
    const std::string canonical_text = canonical_scalar_text(text);
    if (!canonical_text.empty()) {
      result.set("text", JsonValue::string(canonical_text));
    }
    if (!attributes.members().empty()) {
      result.set("attr", std::move(attributes));
    }
    if (!children.items().empty()) {
      result.set("children", std::move(children));
    }
    if (!options.members().empty()) {
      result.set("options", std::move(options));
    }
    return result;
  }

 private:
  // The parts of an element's canonical form that its XML children give.
  struct Members {
    JsonValue attributes = JsonValue::object();
    JsonValue children = JsonValue::array();
    JsonValue options = JsonValue::object();
    std::string text;
  };

  // `node`'s attributes, text, options and child elements (each canonical), `is_srs` for an
  // element holding a CRS (its text and axis mapping are folded into "crs").
  Members members_of(const CPLXMLNode* node, int depth, bool is_srs) {
    Members members;
    JsonValue& attributes = members.attributes;
    JsonValue& children = members.children;
    JsonValue& options = members.options;
    std::string& text = members.text;
    const bool is_gcp_list = EQUAL(node->pszValue, "GCPList");
    for (const CPLXMLNode* child = node->psChild; child != nullptr; child = child->psNext) {
      if (child->eType == CXT_Attribute) {
        const std::string name = child->pszValue;
        const std::string value = child->psChild != nullptr ? child->psChild->pszValue : "";
        if (is_srs && EQUAL(name.c_str(), "dataAxisToSRSAxisMapping")) {
          continue;  // folded into "crs"
        }
        if (is_gcp_list && EQUAL(name.c_str(), "dataAxisToSRSAxisMapping")) {
          continue;
        }
        if (is_gcp_list && EQUAL(name.c_str(), "Projection")) {
          if (const auto question = crs_question(node)) {
            attributes.set(name, normalize_crs_with_axes(question->first, question->second,
                                                         m_options.sources.cache));
          }
          continue;
        }
        attributes.set(name, JsonValue::string(canonical_scalar_text(value)));
      } else if (child->eType == CXT_Text) {
        if (!is_srs) {
          text += child->pszValue;
        }
      } else if (child->eType == CXT_Element) {
        std::string name;
        if (option_name(child, name)) {
          add_option(options, name, canonical_scalar_text(text_of(child)));
          continue;
        }
        if (tag_in(child->pszValue, k_dropped_elements)) {
          continue;
        }
        if (depth == 0 && EQUAL(child->pszValue, "Metadata")) {
          JsonValue metadata = dataset_metadata(child, depth + 1);
          if (metadata.type() != JsonValue::Type::k_null) {
            children.push_back(std::move(metadata));
          }
          continue;
        }
        children.push_back(element(child, depth + 1));
      }
    }
    return members;
  }

  // What the dataset `resolved` holds, once per name. Only a warp's source (`keep_open`:
  // GDALWarpOptions has one) stays open for the warp to reuse; a mosaic VRT can name thousands
  // of files, which must not all stay open at once. A source the caller holds without files (a
  // MEM dataset) is taken from its handle.
  const JsonValue& identity(const std::string& resolved, bool keep_open) {
    auto cached = m_identities.find(resolved);
    if (cached == m_identities.end()) {
      SourceIdentityOptions options = m_options.sources;
      GDALDataset* held =
          options.kept_sources != nullptr ? options.kept_sources->find(resolved) : nullptr;
      if (!keep_open && (held == nullptr || !held_not_reopened(held))) {
        options.kept_sources = nullptr;
      }
      cached = m_identities.emplace(resolved, identity_of_source(resolved, options)).first;
    }
    return cached->second;
  }

  JsonValue read_element(const CPLXMLNode* node, const VrtRead& read, JsonValue result) {
    JsonValue attributes = JsonValue::object();
    switch (read.kind) {
      case VrtRead::Kind::k_geoloc_array:  // X_DATASET or Y_DATASET
        attributes.set("key", JsonValue::string(attribute(node, "key").substr(0, 1) + "_DATASET"));
        break;
      case VrtRead::Kind::k_step_dataset:
        attributes.set("name", JsonValue::string(attribute(node, "name")));
        break;
      default:
        // Attributes other than where the path is anchored (e.g. shared="0") go in as written.
        for (const CPLXMLNode* child = node->psChild; child != nullptr; child = child->psNext) {
          if (child->eType == CXT_Attribute && !EQUAL(child->pszValue, "relativeToVRT")) {
            attributes.set(
                child->pszValue,
                JsonValue::string(child->psChild != nullptr ? child->psChild->pszValue : ""));
          }
        }
    }
    result.set("source", identity(read.name, read.kind == VrtRead::Kind::k_warp_source));
    if (!attributes.members().empty()) {
      result.set("attr", std::move(attributes));
    }
    return result;
  }

  // Dataset metadata: AREA_OR_POINT=Area in the default domain is GDAL's default (absent means
  // Area), so it is dropped; rasterio's WarpedVRT does not copy it, gdalwarp does.
  // The IMAGE_STRUCTURE domain is what the driver reports (COMPRESSION, INTERLEAVE...), in an
  // order that changed between GDAL releases (3.6 and 3.10 differ): the items are keyed
  // by name, which is how GDAL reads them.
  static void sort_items_by_key(JsonValue& items) {
    const auto key_of = [](const JsonValue& item) {
      const JsonValue* attributes = item.find("attr");
      const JsonValue* key = attributes != nullptr ? attributes->find("key") : nullptr;
      return key != nullptr ? key->text() : std::string();
    };
    std::stable_sort(items.items().begin(), items.items().end(),
                     [&](const JsonValue& a, const JsonValue& b) { return key_of(a) < key_of(b); });
  }

  JsonValue dataset_metadata(const CPLXMLNode* node, int depth) {
    const std::string domain = attribute(node, "domain");
    JsonValue result = element(node, depth);
    if (!domain.empty()) {
      return result;
    }
    auto& members = result.members();
    auto children = members.find("children");
    if (children == members.end()) {
      return result;
    }
    JsonValue::Array kept;
    for (auto& item : children->second.items()) {
      const JsonValue* attributes = item.find("attr");
      const JsonValue* key = attributes != nullptr ? attributes->find("key") : nullptr;
      const JsonValue* value = item.find("text");
      if (key != nullptr && EQUAL(key->text().c_str(), "AREA_OR_POINT") && value != nullptr &&
          EQUAL(value->text().c_str(), "Area")) {
        continue;
      }
      kept.push_back(std::move(item));
    }
    if (kept.empty()) {
      members.erase(children);
      if (members.size() == 1) {  // only "tag" left: an empty default-domain block
        return JsonValue::null();
      }
    } else {
      children->second = JsonValue::array(std::move(kept));
    }
    return result;
  }

  static void add_option(JsonValue& options, const std::string& raw_name,
                         const std::string& value) {
    const std::string name = CPLString(raw_name).toupper();
    if (tag_in(name.c_str(), k_dropped_options) || names_a_secret(name)) {
      return;  // a credential (an open option PASSWORD=...) is never stored (secret_names.hpp)
    }
    auto& members = options.members();
    auto existing = members.find(name);
    if (existing == members.end()) {
      members.emplace(name, JsonValue::string(value));
      return;
    }
    // A repeated option: keep every value in order (which one GDAL uses is its business).
    if (!existing->second.is_array()) {
      JsonValue first = std::move(existing->second);
      existing->second = JsonValue::array();
      existing->second.push_back(std::move(first));
    }
    existing->second.push_back(JsonValue::string(value));
  }

  // Normalisations of warp options that provably cannot change a pixel (GDAL 3.6
  // gdalwarpoperation.cpp; docs/keys.md):
  //  - INIT_DEST=NO_DATA without destination nodata initialises with 0, exactly as INIT_DEST=0;
  //  - UNIFIED_SRC_NODATA is read only when there is source nodata and more than one band.
  static void normalise_warp_options(const CPLXMLNode* warp_options, JsonValue& options) {
    int band_count = 0;
    bool any_src_nodata = false;
    bool any_dst_nodata = false;
    for (const CPLXMLNode* child = warp_options->psChild; child != nullptr; child = child->psNext) {
      if (child->eType != CXT_Element || !EQUAL(child->pszValue, "BandList")) {
        continue;
      }
      for (const CPLXMLNode* band = child->psChild; band != nullptr; band = band->psNext) {
        if (band->eType != CXT_Element || !EQUAL(band->pszValue, "BandMapping")) {
          continue;
        }
        ++band_count;
        any_src_nodata = any_src_nodata || has_child(band, "SrcNoDataReal");
        any_dst_nodata = any_dst_nodata || has_child(band, "DstNoDataReal");
      }
    }
    auto& members = options.members();
    auto init_dest = members.find("INIT_DEST");
    if (init_dest != members.end() && init_dest->second.is_string() && !any_dst_nodata &&
        EQUAL(init_dest->second.text().c_str(), "NO_DATA")) {
      init_dest->second = JsonValue::string("0");
    }
    if (!any_src_nodata || band_count <= 1) {
      members.erase("UNIFIED_SRC_NODATA");
    }
  }

  const VrtCanonicalOptions& m_options;
  const ReadsByNode& m_reads;
  std::map<std::string, JsonValue> m_identities;
};

}  // namespace

JsonValue canonical_vrt(const std::string& xml, const VrtCanonicalOptions& options) {
  CPLXMLTreeCloser tree(nullptr);
  {
    CPLErrorHandlerPusher quiet(CPLQuietErrorHandler);
    tree.reset(CPLParseXMLString(xml.c_str()));
  }
  const CPLXMLNode* root = tree.get();
  while (root != nullptr && root->eType != CXT_Element) {
    root = root->psNext;
  }
  if (root == nullptr) {
    throw Error(ErrorKind::k_internal, "the source's xml:VRT does not parse as XML");
  }
  const std::vector<VrtRead> reads = vrt_reads(root, options.vrt_dir);
  const ReadsByNode by_node = reads_by_node(reads);
  if (options.sources.cache == nullptr) {
    VrtCanonicaliser canonicaliser(options, by_node);
    return canonicaliser.element(root, 0);
  }
  // The memo's answers for every CRS in the VRT, and the digests of the warp's source files,
  // in one read (see prefetch_crs_answers). The query is sent before the sources are opened,
  // with the warp sources' names as the VRT gives them: their file lists, sidecars included,
  // are known only once they are open, and a file not asked ahead has them all asked again.
  std::vector<CrsQuestion> questions;
  collect_crs_questions(root, questions);
  std::vector<std::string> ahead = crs_memo_paths(questions);
  if (options.sources.kept_sources != nullptr) {
    collect_warp_source_names(reads, ahead);
  }
  options.sources.cache->read_ahead(ahead);
  std::vector<DigestCache::Entry> digests;
  if (options.sources.kept_sources != nullptr) {
    open_warp_sources(reads, *options.sources.kept_sources, digests);
  }
  std::map<std::string, std::string> found =
      prefetch_crs_answers(questions, *options.sources.cache, digests);
  PrefetchedDigestCache prefetched(*options.sources.cache, digests, std::move(found));
  VrtCanonicalOptions walk = options;
  walk.sources.cache = &prefetched;
  VrtCanonicaliser canonicaliser(walk, by_node);
  return canonicaliser.element(root, 0);
}

}  // namespace idem
