// tandem_task_helper: a task for the local backend's tests (libc only).
//
//   hold-ports RELEASE_FILE   binds every port of TANDEM_PORTS (TCP, 0.0.0.0,
//                             SO_REUSEADDR off, listening), prints
//                             "bound P" or "bind-failed P <error>" per port,
//                             then "ready"; holds them until RELEASE_FILE
//                             exists (at most 60 s); exits 0 if every bind
//                             succeeded, 3 otherwise.
//   escape SECONDS            double-forks a grandchild that calls setsid()
//                             (its own session and group, reparented away),
//                             prints "grandchild PID", and then both sleep.
//   escape-clean SECONDS      the same, but the grandchild re-executes this
//                             helper as `sleep SECONDS` with an empty
//                             environment (no marker left to find), and the
//                             parent exits at once.
//   background SECONDS CODE   forks a child that sleeps SECONDS, prints
//                             "child PID", and exits CODE at once.
//   stubborn-child SECONDS    forks a child that ignores SIGTERM and sleeps,
//                             prints "child PID", and sleeps (SIGTERM ends it).
//   sleep SECONDS             sleeps.
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

namespace {

int HoldPorts(const char* release_file) {
  const char* ports = getenv("TANDEM_PORTS");
  if (!ports || !*ports) {
    printf("no TANDEM_PORTS\n");
    return 3;
  }
  bool all_ok = true;
  char buf[256];
  snprintf(buf, sizeof buf, "%s", ports);
  for (char* save = nullptr, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(nullptr, ",", &save)) {
    int port = atoi(tok);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(static_cast<uint16_t>(port));
    sa.sin_addr.s_addr = htonl(INADDR_ANY);
    if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 || listen(fd, 4) != 0) {
      printf("bind-failed %d %s\n", port, strerror(errno));
      all_ok = false;
    } else {
      printf("bound %d\n", port);  // the socket stays open until we exit
    }
  }
  printf("ready\n");
  fflush(stdout);
  struct stat st;
  for (int i = 0; i < 6000 && stat(release_file, &st) != 0; ++i) usleep(10000);
  return all_ok ? 0 : 3;
}

int Escape(int seconds) {
  // As in EscapeClean, the helper goes on only once the grandchild printed its
  // pid: with "escape 0" the task could end, and its leftovers be killed,
  // before the grandchild printed (seen in CI under load).
  int printed[2];
  if (pipe2(printed, O_CLOEXEC) != 0) return 1;
  pid_t child = fork();
  if (child == 0) {
    setsid();
    pid_t grandchild = fork();
    if (grandchild == 0) {
      printf("grandchild %d\n", getpid());
      fflush(stdout);
      (void)!write(printed[1], "x", 1);
      sleep(static_cast<unsigned>(seconds));
      _exit(0);
    }
    _exit(0);  // the grandchild is orphaned
  }
  waitpid(child, nullptr, 0);
  close(printed[1]);
  char byte = 0;
  (void)!read(printed[0], &byte, 1);
  close(printed[0]);
  sleep(static_cast<unsigned>(seconds));
  return 0;
}

void PrintPid(const char* what, pid_t pid) {
  printf("%s %d\n", what, pid);
  fflush(stdout);
}

int EscapeClean(const char* self, const char* seconds) {
  // The helper returns only once the grandchild has printed its pid: when it
  // returned first, the task's end could kill the grandchild before it
  // printed (seen under load), and the test waited for a pid in vain.
  int printed[2];
  if (pipe2(printed, O_CLOEXEC) != 0) return 1;
  pid_t child = fork();
  if (child == 0) {
    setsid();
    if (fork() == 0) {
      PrintPid("grandchild", getpid());
      (void)!write(printed[1], "x", 1);
      char* argv[] = {const_cast<char*>(self), const_cast<char*>("sleep"), const_cast<char*>(seconds), nullptr};
      char* envp[] = {nullptr};
      execve(self, argv, envp);
      _exit(127);
    }
    _exit(0);
  }
  waitpid(child, nullptr, 0);
  close(printed[1]);
  char byte = 0;
  (void)!read(printed[0], &byte, 1);
  return 0;
}

int Background(int seconds, int code) {
  pid_t child = fork();
  if (child == 0) {
    sleep(static_cast<unsigned>(seconds));
    _exit(0);
  }
  PrintPid("child", child);
  return code;
}

int StubbornChild(int seconds) {
  pid_t child = fork();
  if (child == 0) {
    signal(SIGTERM, SIG_IGN);
    sleep(static_cast<unsigned>(seconds));
    _exit(0);
  }
  PrintPid("child", child);
  sleep(static_cast<unsigned>(seconds));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 3 && strcmp(argv[1], "escape-clean") == 0) return EscapeClean(argv[0], argv[2]);
  if (argc >= 4 && strcmp(argv[1], "background") == 0) return Background(atoi(argv[2]), atoi(argv[3]));
  if (argc >= 3 && strcmp(argv[1], "stubborn-child") == 0) return StubbornChild(atoi(argv[2]));
  if (argc >= 3 && strcmp(argv[1], "sleep") == 0) {
    sleep(static_cast<unsigned>(atoi(argv[2])));
    return 0;
  }
  if (argc >= 3 && strcmp(argv[1], "hold-ports") == 0) return HoldPorts(argv[2]);
  if (argc >= 3 && strcmp(argv[1], "escape") == 0) return Escape(atoi(argv[2]));
  fprintf(stderr, "usage: tandem_task_helper hold-ports RELEASE_FILE | escape SECONDS\n");
  return 2;
}
