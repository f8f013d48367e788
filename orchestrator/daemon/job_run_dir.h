// Run dirs of jobs (docs/jobspec.md "Run directories"): resolving and
// comparing them however a path is spelled, creating them with modes that
// do not depend on the umask, private files for what holds the spec's
// environment, and archiving the files of a previous run under history/
// without ever leaving the run dir. Used by admission (job_admission.cc).
#pragma once

#include <filesystem>
#include <string>

#include "common/status.h"

namespace tandem::daemon {

// A name for history/<name>/ from an old job.json's "id": only what a job id
// can hold ([A-Za-z0-9._-], not "." or ".."), else "previous". The file is
// the run dir's, and a task may have written it.
std::string ArchiveName(const std::filesystem::path& job_json);

// A run dir reused by a new job keeps the old job's files under
// history/<old id>/ (history/<old id>-2/, ... when taken). Every step goes
// through directory fds opened without following symlinks, so a symlink a
// task left (history -> /elsewhere) cannot move files out of the run dir.
Status ArchivePreviousRun(const std::filesystem::path& run_dir);

// The run dir as the file system resolves it (symlinks, ".."), for comparing.
std::filesystem::path ResolvedDir(const std::string& dir);

// One contains the other (or they are the same): the jobs would share files.
bool DirsOverlap(const std::filesystem::path& a, const std::filesystem::path& b);

// Creates `dir` if needed; directories this creates are 0755 whatever the
// umask. With `must_be_private`, an existing one must not be writable by
// others (they could replace what the job writes there).
Status PrepareDir(const std::filesystem::path& dir, bool must_be_private);

// Writes `text` to `path` as 0600 (tmp + fsync + rename): job.json holds the spec's environment.
Status WritePrivateFile(const std::filesystem::path& path, const std::string& text);

}  // namespace tandem::daemon
