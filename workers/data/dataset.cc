// The data set registry (dataset.h).
#include "workers/data/dataset.h"

#include <array>

#include "workers/data/dapo_math.h"
#include "workers/data/gsm8k.h"
#include "workers/data/synthetic_arith.h"

namespace tandem::data {
namespace {

struct DatasetRow {
  std::string_view name;
  StatusOr<std::unique_ptr<Dataset>> (*open)(const nlohmann::json&);
};

constexpr std::array<DatasetRow, 3> kDatasets{{
    {"synthetic-arith", &OpenSyntheticArith},
    {"gsm8k", &OpenGsm8k},
    {"dapo-math", &OpenDapoMath},
}};

}  // namespace

StatusOr<std::unique_ptr<Dataset>> OpenDataset(std::string_view name, const nlohmann::json& options) {
  for (const DatasetRow& row : kDatasets)
    if (row.name == name) return row.open(options);
  std::string names;
  for (const DatasetRow& row : kDatasets) {
    if (!names.empty()) names += ", ";
    names += row.name;
  }
  return InvalidArgument("unknown data set '" + std::string(name) + "' (known: " + names + ")");
}

std::vector<std::string> DatasetNames() {
  std::vector<std::string> out;
  for (const DatasetRow& row : kDatasets) out.emplace_back(row.name);
  return out;
}

}  // namespace tandem::data
