// gdal-idem: the command-line tool (stub; being written).
#include <cstdio>

#include "core/version.hpp"

int main() {
  std::printf("gdal-idem %s\n", idem::idem_version().c_str());
  return 0;
}
