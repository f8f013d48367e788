// libFuzzer target for the job store's recovery path (durable_log.h,
// journal_format.h): arbitrary bytes become journal.log (and, by the mode
// byte, snapshot.json) in a scratch directory, then DurableLog::Open
// recovers it. It must never crash, hang or leak; and when recovery succeeds,
// appending one record and recovering again must give exactly one record
// more, no warning, and the same snapshot (a torn tail was truncated away).
//
// Input: byte 0 = mode bits, byte 1 = generations, byte 2 = split, rest = body.
//   mode & 1: give every body line a correct checksum, so inputs get past the
//             CRC and exercise JSON, header and generation handling;
//   mode & 2: put a valid header (generation byte1 & 3) before the body;
//   mode & 4: write a valid snapshot.json of generation (byte1 >> 2) & 3;
//   mode & 8: instead, the first `split` body bytes are snapshot.json, raw.
// Built only with -DTANDEM_BUILD_FUZZ=ON under clang; scripts/fuzz.sh runs it.
#include <stdlib.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include "common/log.h"
#include "orchestrator/store/durable_log.h"
#include "orchestrator/store/journal_format.h"

namespace {

namespace fs = std::filesystem;
using tandem::store::DurableLog;
using tandem::store::Recovered;

fs::path ScratchDir() {
  std::string tmpl = (fs::exists("/dev/shm") ? std::string("/dev/shm") : fs::temp_directory_path().string()) +
                     "/tandem-journal-fuzz-XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) __builtin_trap();
  return tmpl;
}

const fs::path& Dir() {
  static const fs::path dir = ScratchDir();
  static const int registered = std::atexit([] {
    std::error_code ec;
    fs::remove_all(Dir(), ec);
  });
  (void)registered;
  return dir;
}

void WriteFile(const fs::path& p, std::string_view bytes) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Each '\n'-terminated line gets a valid "<crc> " prefix; a last line without
// a newline stays without one (a torn tail).
std::string WithChecksums(std::string_view body) {
  std::string out;
  while (!body.empty()) {
    size_t nl = body.find('\n');
    std::string_view line = body.substr(0, nl);
    std::string enc = tandem::store::EncodeLine(line);
    if (nl == std::string_view::npos) {
      enc.pop_back();
      body = {};
    } else {
      body.remove_prefix(nl + 1);
    }
    out += enc;
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  spdlog::set_level(spdlog::level::off);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const fs::path& dir = Dir();
  if (size < 3) return 0;
  const uint8_t mode = data[0];
  const uint8_t gens = data[1];
  const size_t split = data[2];
  std::string_view body(reinterpret_cast<const char*>(data + 3), size - 3);

  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) fs::remove_all(e.path(), ec);

  if (mode & 8) {
    const size_t k = split < body.size() ? split : body.size();
    WriteFile(dir / "snapshot.json", body.substr(0, k));
    body.remove_prefix(k);
  } else if (mode & 4) {
    WriteFile(dir / "snapshot.json", tandem::store::EncodeSnapshot((gens >> 2) & 3, R"({"jobs":[]})"));
  }
  std::string journal;
  if (mode & 2) journal = tandem::store::EncodeJournalHeader(gens & 3);
  journal += (mode & 1) ? WithChecksums(body) : std::string(body);
  WriteFile(dir / "journal.log", journal);

  boost::asio::io_context io;
  Recovered first;
  {
    auto log = DurableLog::Open(io, dir, &first);
    if (!log.ok()) return 0;  // refusing corrupt input is fine; crashing is not
    (*log)->Append({{"fuzz", 1}});
    if (!(*log)->Flush().ok()) __builtin_trap();
  }
  Recovered second;
  auto again = DurableLog::Open(io, dir, &second);
  if (!again.ok()) __builtin_trap();  // what we recovered and appended must recover
  if (second.records.size() != first.records.size() + 1) __builtin_trap();
  if (second.records.back() != nlohmann::json{{"fuzz", 1}}) __builtin_trap();
  if (!second.warnings.empty()) __builtin_trap();
  if (second.snapshot != first.snapshot) __builtin_trap();
  return 0;
}
