// tandem-exec: the exec shim of the local backend (docs/architecture.md,
// backends/local/local_executor.h). Depends on libc only; linked statically
// where possible so it starts fast.
//
//   tandem-exec [--exit-path FILE] [--cgroup DIR] [--shm-dir DIR] -- COMMAND [ARG...]
//   tandem-exec --probe-cgroup DIR
//
// The local executor spawns this shim as a session leader (its own session
// and process group) with the task's final environment, cwd and stdio. The
// shim
//   1. starts COMMAND (looked up in the task's PATH) in a process group of its
//      own (pgid = the command's pid), with fork + exec; with --cgroup, the
//      child moves itself into the cgroup DIR before exec (task_cgroup.h), so
//      the command and everything it starts live there and the shim does not;
//      a child that cannot join fails like an exec failure (127);
//   2. does not die of SIGTERM, SIGINT or SIGHUP itself but forwards each to
//      the command's process group;
//   3. waits for the command and writes the exit record atomically (write
//      FILE.tmp, fsync, rename):
//        {"exit_code":N,"signal":S,"detail":"...","ended_at_ms":T,"marker":M}
//      exit_code is -1 when the command died of signal S; a command that
//      cannot be executed gives exit_code 127 and detail "exec failed: <why>";
//      marker is the task's TANDEM_TASK_MARK, so a record left by an earlier
//      run at the same path is never mistaken for this one;
//   4. before the record, removes the shared-memory weight segments the
//      task's publishers left (killed, they cannot unlink them; docs/
//      weights.md "The shm segment"): DIR/tandem-<job>-<task>-v<digits>
//      of its own TANDEM_JOB_ID and TANDEM_TASK_ID only (bytes outside
//      [A-Za-z0-9._] as '_', an empty id as "_": workers/weights/
//      shm_segment.h's names), DIR being --shm-dir, default /dev/shm. So on
//      every host of every backend a task's segments go with it, before
//      anyone learns it ended (a restarted publisher of the same task
//      starts after);
//   5. ends the way the command ended: the same exit code, or the same
//      signal (core dumps off).
// The record is how a restarted daemon learns how a task ended while it was
// down; the daemon treats it as authoritative.
//
// --probe-cgroup DIR moves the shim itself into DIR and exits 0 (1 with the
// reason on stderr): the executor's start-up check that it may move
// processes into its cgroups, which only a real move proves.
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char** environ;

namespace {

// A fixed-size text buffer: no allocation, no libstdc++.
struct Buf {
  char data[8192];
  size_t len = 0;
  void Add(const char* s) {
    while (*s && len + 1 < sizeof data) data[len++] = *s++;
    data[len] = '\0';
  }
  void AddJsonString(const char* s) {
    Add("\"");
    for (; *s; ++s) {
      unsigned char c = static_cast<unsigned char>(*s);
      char esc[8];
      if (c == '"' || c == '\\') {
        esc[0] = '\\'; esc[1] = static_cast<char>(c); esc[2] = '\0';
        Add(esc);
      } else if (c < 0x20) {
        snprintf(esc, sizeof esc, "\\u%04x", c);
        Add(esc);
      } else {
        esc[0] = static_cast<char>(c); esc[1] = '\0';
        Add(esc);
      }
    }
    Add("\"");
  }
  void AddLong(long long v) {
    char n[32];
    snprintf(n, sizeof n, "%lld", v);
    Add(n);
  }
};

void Say(const char* a, const char* b = "", const char* c = "", const char* d = "") {
  Buf m;
  m.Add("tandem-exec: "); m.Add(a); m.Add(b); m.Add(c); m.Add(d); m.Add("\n");
  ssize_t ignored = write(STDERR_FILENO, m.data, m.len);
  (void)ignored;
}

bool WriteAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

// Writes the record to `path` atomically. Failures are reported on stderr
// only: the task's outcome does not depend on the record.
void WriteExitRecord(const char* path, int exit_code, int sig, const char* detail) {
  if (!path || !*path) return;
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  long long ms = static_cast<long long>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
  Buf rec;
  rec.Add("{\"exit_code\":"); rec.AddLong(exit_code);
  rec.Add(",\"signal\":"); rec.AddLong(sig);
  rec.Add(",\"detail\":"); rec.AddJsonString(detail);
  rec.Add(",\"ended_at_ms\":"); rec.AddLong(ms);
  const char* marker = getenv("TANDEM_TASK_MARK");
  if (marker) {
    rec.Add(",\"marker\":");
    rec.AddJsonString(marker);
  }
  rec.Add("}\n");

  Buf tmp;
  tmp.Add(path); tmp.Add(".tmp");
  int fd = open(tmp.data, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) { Say("cannot write exit record ", tmp.data, ": ", strerror(errno)); return; }
  bool ok = WriteAll(fd, rec.data, rec.len) && fsync(fd) == 0;
  int err = errno;
  close(fd);
  if (!ok || rename(tmp.data, path) != 0) {
    if (ok) err = errno;
    Say("cannot write exit record ", path, ": ", strerror(err));
    unlink(tmp.data);
    return;
  }
  // The directory is not fsync'd: the rename survives a daemon crash, which
  // is what the record is for; after a machine crash the task is gone anyway.
}

void AddSegmentId(Buf& b, const char* id) {
  if (!*id) b.Add("_");
  for (; *id; ++id) {
    const char c = *id;
    const bool keep = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_';
    const char one[2] = {keep ? c : '_', '\0'};
    b.Add(one);
  }
}

// Step 4 above: unlinks dir/tandem-<job>-<task>-v<digits> of this task.
void RemoveWeightSegments(const char* dir) {
  const char* job = getenv("TANDEM_JOB_ID");
  const char* task = getenv("TANDEM_TASK_ID");
  if (!job || !task) return;  // not a tandem task
  Buf prefix;
  prefix.Add("tandem-"); AddSegmentId(prefix, job); prefix.Add("-"); AddSegmentId(prefix, task); prefix.Add("-v");
  DIR* d = opendir(dir);
  if (!d) return;
  while (const dirent* e = readdir(d)) {
    if (strncmp(e->d_name, prefix.data, prefix.len) != 0 || e->d_name[prefix.len] == '\0') continue;
    bool digits = true;
    for (const char* c = e->d_name + prefix.len; *c; ++c) digits = digits && *c >= '0' && *c <= '9';
    if (digits && unlinkat(dirfd(d), e->d_name, 0) != 0 && errno != ENOENT)
      Say("cannot remove weight segment ", e->d_name, ": ", strerror(errno));
  }
  closedir(d);
}

[[noreturn]] void EndLike(int exit_code, int sig) {
  if (sig > 0) {
    rlimit no_core{0, 0};
    setrlimit(RLIMIT_CORE, &no_core);
    signal(sig, SIG_DFL);
    sigset_t one;
    sigemptyset(&one);
    sigaddset(&one, sig);
    sigprocmask(SIG_UNBLOCK, &one, nullptr);
    kill(getpid(), sig);
    _exit(128 + sig);  // a signal that does not terminate
  }
  _exit(exit_code & 0xff);
}

// Moves the calling process into the cgroup directory `dir`; 0 or -1 (errno).
int JoinCgroup(const char* dir) {
  Buf path;
  path.Add(dir);
  path.Add("/cgroup.procs");
  int fd = open(path.data, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t w = write(fd, "0", 1);
  int err = errno;
  close(fd);
  if (w != 1) {
    errno = w < 0 ? err : EIO;
    return -1;
  }
  return 0;
}

struct Launched {
  pid_t pid = -1;
  int err = 0;      // errno of the failed stage, 0 on success
  char stage = 0;   // 'F' fork, 'J' join the cgroup, 'E' exec
};

// fork + (join cgroup) + exec, in a process group of its own, with default
// signal dispositions and an empty mask. A close-on-exec pipe carries a
// failure (stage, errno) back; EOF without data means exec succeeded.
Launched Launch(char** cmd, const char* cgroup) {
  Launched l;
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    l.err = errno;
    l.stage = 'F';
    return l;
  }
  pid_t pid = fork();
  if (pid < 0) {
    l.err = errno;
    l.stage = 'F';
    close(fds[0]);
    close(fds[1]);
    return l;
  }
  if (pid == 0) {
    close(fds[0]);
    setpgid(0, 0);
    struct { char stage; int err; } msg{};
    if (cgroup && JoinCgroup(cgroup) != 0) {
      msg = {'J', errno};
    } else {
      for (int sig = 1; sig < NSIG; ++sig) signal(sig, SIG_DFL);
      sigset_t none;
      sigemptyset(&none);
      sigprocmask(SIG_SETMASK, &none, nullptr);
      execvp(cmd[0], cmd);
      msg = {'E', errno};
    }
    ssize_t ignored = write(fds[1], &msg, sizeof msg);
    (void)ignored;
    _exit(127);
  }
  close(fds[1]);
  setpgid(pid, pid);  // also here: a signal forwarded right away must find the group
  struct { char stage; int err; } msg{};
  ssize_t n;
  do n = read(fds[0], &msg, sizeof msg);
  while (n < 0 && errno == EINTR);
  close(fds[0]);
  l.pid = pid;
  if (n == static_cast<ssize_t>(sizeof msg)) {
    int ignored_status = 0;
    waitpid(pid, &ignored_status, 0);
    l.err = msg.err;
    l.stage = msg.stage;
  }
  return l;
}

}  // namespace

int main(int argc, char** argv) {
  const char* exit_path = nullptr;
  const char* cgroup = nullptr;
  const char* shm_dir = "/dev/shm";
  int i = 1;
  if (argc == 3 && strcmp(argv[1], "--probe-cgroup") == 0) {
    if (JoinCgroup(argv[2]) != 0) {
      Say("cannot join cgroup ", argv[2], ": ", strerror(errno));
      return 1;
    }
    return 0;
  }
  for (; i < argc; ++i) {
    if (strcmp(argv[i], "--exit-path") == 0 && i + 1 < argc) {
      exit_path = argv[++i];
    } else if (strcmp(argv[i], "--cgroup") == 0 && i + 1 < argc) {
      cgroup = argv[++i];
    } else if (strcmp(argv[i], "--shm-dir") == 0 && i + 1 < argc) {
      shm_dir = argv[++i];
    } else if (strcmp(argv[i], "--") == 0) {
      ++i;
      break;
    } else {
      Say("usage: tandem-exec [--exit-path FILE] [--cgroup DIR] [--shm-dir DIR] -- COMMAND [ARG...]");
      WriteExitRecord(exit_path, 127, 0, "tandem-exec: bad arguments");
      return 127;
    }
  }
  if (i >= argc) {
    Say("no command given");
    WriteExitRecord(exit_path, 127, 0, "exec failed: no command given");
    return 127;
  }
  char** cmd = argv + i;

  // A session (and process group) of our own, unless the spawner made one.
  if (getsid(0) != getpid()) setsid();

  // Signals we wait for synchronously: forwarded ones, and SIGCHLD.
  sigset_t waited;
  sigemptyset(&waited);
  sigaddset(&waited, SIGTERM);
  sigaddset(&waited, SIGINT);
  sigaddset(&waited, SIGHUP);
  sigaddset(&waited, SIGCHLD);
  signal(SIGCHLD, SIG_DFL);  // never auto-reap (SIG_IGN would)
  sigprocmask(SIG_BLOCK, &waited, nullptr);

  Launched l = Launch(cmd, cgroup);
  pid_t child = l.pid;
  if (l.err != 0) {
    Buf detail;
    if (l.stage == 'J') {
      detail.Add("cannot join cgroup ");
      detail.Add(cgroup);
      detail.Add(": ");
      Say("cannot join cgroup ", cgroup, ": ", strerror(l.err));
    } else {
      detail.Add("exec failed: ");
      Say("cannot execute '", cmd[0], "': ", strerror(l.err));
    }
    detail.Add(strerror(l.err));
    WriteExitRecord(exit_path, 127, 0, detail.data);
    return 127;
  }

  int status = 0;
  for (;;) {
    siginfo_t si{};
    int s = sigwaitinfo(&waited, &si);
    if (s < 0) continue;  // EINTR
    if (s == SIGCHLD) {
      pid_t r = waitpid(child, &status, WNOHANG);
      if (r == child) break;
      continue;
    }
    kill(-child, s);  // forward to the command's process group
  }
  RemoveWeightSegments(shm_dir);

  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    Buf detail;
    detail.Add("killed by signal ");
    detail.AddLong(sig);
    detail.Add(" (");
    detail.Add(strsignal(sig));
    detail.Add(")");
    WriteExitRecord(exit_path, -1, sig, detail.data);
    EndLike(-1, sig);
  }
  int code = WIFEXITED(status) ? WEXITSTATUS(status) : 127;
  WriteExitRecord(exit_path, code, 0, "");
  EndLike(code, 0);
}
