// Finding and validating the checkpoints under a root (docs/weights.md
// "Checkpoints", issue #15 items 2 and 3).
//
// A checkpoint directory <root>/step-<N>/ is *valid* when:
//   - manifest.json is present, a regular file, and parses (checkpoint_manifest.h);
//   - the manifest's step is N;
//   - every listed file is present beneath the directory (no symlink at any
//     component), a regular file, of exactly the listed size;
//   - with Verify::kDigests, every file's XXH64 equals the listed digest.
//     This reads every byte of the checkpoint (its size at the disk's read
//     bandwidth): use it when resuming, not to list;
//   - nothing else is in the directory (an unlisted file, a symlink or a
//     special file makes it invalid: our writer never leaves one).
// Anything else is a DataLoss naming what is wrong: "missing manifest.json
// (an interrupted or partial checkpoint)", "size mismatch of file X: ...",
// "digest mismatch of file X: ...", "missing file X", "manifest.json: <the
// parser's error>".
//
// Everything read is hostile (the manifest is size-limited before it is
// read, paths are checked before they are opened); nothing throws. The check
// is of the bytes as they are now: a caller that then opens the files (the
// model loader) reads them again, and a file changed in between is caught
// only by that reader's own checks.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "workers/checkpoint/checkpoint_manifest.h"

namespace tandem::checkpoint {

enum class Verify {
  kSizes,    // manifest, presence and sizes: a few syscalls per file
  kDigests,  // and every byte's digest: reads the whole checkpoint
};

// Validates the checkpoint in `dir`, which should hold step `expected_step`;
// returns its manifest (rules above).
StatusOr<Manifest> ValidateCheckpoint(const std::string& dir, uint64_t expected_step, Verify verify);

// A step directory under a root (not yet validated).
struct StepDir {
  uint64_t step = 0;
  std::string path;  // <root>/step-<N>
};
// The canonical step directories under `root`, newest (highest step) first.
// NotFound when `root` does not exist; temp and trash directories and any
// other name are left out.
StatusOr<std::vector<StepDir>> ListStepDirs(const std::string& root);

struct ValidCheckpoint {
  std::string path;
  Manifest manifest;
};
struct SkippedCheckpoint {
  std::string path;
  Status why;
};

// The newest valid checkpoint under `root`. Each newer one that is not
// valid is skipped with a warning `[checkpoint] skipped <path>: <why>` and
// appended to `skipped` when given. NotFound when `root` holds none valid
// (the message counts the skipped ones and says why the newest was).
StatusOr<ValidCheckpoint> FindLatestCheckpoint(const std::string& root, Verify verify,
                                               std::vector<SkippedCheckpoint>* skipped = nullptr);

}  // namespace tandem::checkpoint
