// Slurm's reason for how a step or a batch job ended (issue #5 item 4,
// "recorded with Slurm's reason"). When Slurm ends a step itself (time limit,
// preemption, node failure, scancel) slurmstepd writes one banner line into
// the step's stderr and srun repeats it in its own log:
//
//   slurmstepd: error: *** STEP 12.3 ON vm CANCELLED AT 2026-11-30T11:00:00 DUE TO TIME LIMIT ***
//
// The Slurm executor appends the banner's text to the task's exit detail, so
// the daemon's task and job records say why Slurm ended it.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace tandem::backends::slurm {

// The text between "*** " and " ***" of the last Slurm banner in `text`
// ("STEP 12.3 ON vm CANCELLED AT ... DUE TO TIME LIMIT"); "" when none.
std::string BannerIn(const std::string& text);

// BannerIn over the last 64 KiB of each file, first match wins ("" if none;
// unreadable files are skipped).
std::string BannerInFiles(const std::vector<std::filesystem::path>& files);

}  // namespace tandem::backends::slurm
