// SPDX-License-Identifier: MIT
// What a VRT reads (vrt_reads.hpp).
#include "key/vrt_reads.hpp"

#include "cpl_conv.h"
#include "cpl_string.h"

namespace idem {

namespace {

// An element's text as GDAL reads it (CPLGetXMLValue): its first text child, untrimmed.
std::string element_text(const CPLXMLNode* node) {
  for (const CPLXMLNode* child = node->psChild; child != nullptr; child = child->psNext) {
    if (child->eType == CXT_Text) {
      return child->pszValue;
    }
  }
  return std::string();
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

// A SourceFilename, SourceDataset or DEMPath's dataset, relative to the VRT's directory when
// its relativeToVRT attribute says so.
std::string source_name(const CPLXMLNode* node, const std::string& vrt_dir) {
  const std::string name = element_text(node);
  return is_true_attribute(node, "relativeToVRT") && !vrt_dir.empty()
             ? std::string(CPLProjectRelativeFilename(vrt_dir.c_str(), name.c_str()))
             : name;
}

// The MDI of a GeoLocTransformer's metadata whose key is `key`.
const CPLXMLNode* geoloc_item(const CPLXMLNode* geoloc_transformer, const std::string& key) {
  const CPLXMLNode* metadata = CPLGetXMLNode(geoloc_transformer, "Metadata");
  for (const CPLXMLNode* item = metadata != nullptr ? metadata->psChild : nullptr; item != nullptr;
       item = item->psNext) {
    if (item->eType == CXT_Element && EQUAL(item->pszValue, "MDI") &&
        EQUAL(CPLGetXMLValue(item, "key", ""), key.c_str())) {
      return item;
    }
  }
  return nullptr;
}

void collect(const CPLXMLNode* node, const std::string& vrt_dir, const std::string& warp_source,
             std::vector<VrtRead>& reads) {
  for (; node != nullptr; node = node->psNext) {
    if (node->eType != CXT_Element) {
      continue;
    }
    const char* tag = node->pszValue;
    if (EQUAL(tag, "SourceFilename") || EQUAL(tag, "SourceDataset") || EQUAL(tag, "DEMPath")) {
      const VrtRead::Kind kind = EQUAL(tag, "SourceFilename")  ? VrtRead::Kind::k_source
                                 : EQUAL(tag, "SourceDataset") ? VrtRead::Kind::k_warp_source
                                                               : VrtRead::Kind::k_dem;
      reads.push_back({kind, node, source_name(node, vrt_dir)});
      continue;
    }
    if (EQUAL(tag, "GeoLocTransformer")) {
      for (const char* axis : {"X", "Y"}) {
        const CPLXMLNode* item = geoloc_item(node, std::string(axis) + "_DATASET");
        const std::string name = geoloc_array_name(node, axis, warp_source);
        if (item != nullptr && !name.empty()) {
          reads.push_back({VrtRead::Kind::k_geoloc_array, item, name});
        }
      }
    } else if (EQUAL(tag, "Step")) {
      for (const CPLXMLNode* argument = node->psChild; argument != nullptr;
           argument = argument->psNext) {
        const std::string name = processing_step_dataset_name(node, argument, vrt_dir);
        if (!name.empty()) {
          reads.push_back({VrtRead::Kind::k_step_dataset, argument, name});
        }
      }
      continue;
    }
    if (EQUAL(tag, "GDALWarpOptions")) {
      const CPLXMLNode* source = CPLGetXMLNode(node, "SourceDataset");
      collect(node->psChild, vrt_dir, source != nullptr ? source_name(source, vrt_dir) : "", reads);
    } else {
      collect(node->psChild, vrt_dir, warp_source, reads);
    }
  }
}

}  // namespace

std::vector<VrtRead> vrt_reads(const CPLXMLNode* node, const std::string& vrt_dir) {
  std::vector<VrtRead> reads;
  collect(node, vrt_dir, std::string(), reads);
  return reads;
}

std::string geoloc_array_name(const CPLXMLNode* geoloc_transformer, const std::string& axis,
                              const std::string& warp_source) {
  const CPLXMLNode* item = geoloc_item(geoloc_transformer, axis + "_DATASET");
  std::string name = item != nullptr ? element_text(item) : std::string();
  const CPLXMLNode* relative_item =
      geoloc_item(geoloc_transformer, axis + "_DATASET_RELATIVE_TO_SOURCE");
  const bool relative =
      relative_item != nullptr && CPLTestBool(element_text(relative_item).c_str());
  const char* own_source = CPLGetXMLValue(geoloc_transformer, "SourceDataset", nullptr);
  const std::string base = own_source != nullptr ? own_source : warp_source;
  if (!name.empty() && relative && !base.empty()) {
    return CPLProjectRelativeFilename(CPLGetDirname(base.c_str()), name.c_str());
  }
  return name;
}

std::string processing_step_dataset_name(const CPLXMLNode* step, const CPLXMLNode* argument,
                                         const std::string& vrt_dir) {
  if (argument->eType != CXT_Element || !EQUAL(argument->pszValue, "Argument")) {
    return std::string();
  }
  const std::string name = CPLString(CPLGetXMLValue(argument, "name", "")).tolower();
  if (name.find("dataset_filename") == std::string::npos) {
    return std::string();
  }
  const std::string value = element_text(argument);
  bool relative = false;
  for (const CPLXMLNode* other = step->psChild; other != nullptr; other = other->psNext) {
    if (other->eType == CXT_Element && EQUAL(other->pszValue, "Argument") &&
        EQUAL(CPLGetXMLValue(other, "name", ""), "relativeToVRT")) {
      relative = CPLTestBool(element_text(other).c_str());
    }
  }
  return relative && !vrt_dir.empty()
             ? std::string(CPLProjectRelativeFilename(vrt_dir.c_str(), value.c_str()))
             : value;
}

}  // namespace idem
