/*
 * `denit job keep DIR SEQ CAP [--cwd DIR] [--oom-count FILE] [--nofile N] [--env NAME=VALUE]...
 * -- ARGV...`:
 * the keeper of one job, started by the job service (src/jobs/service.ts), in C so that it costs
 * almost nothing and needs no runtime. It leaves the service at once (a process of its own,
 * which the service's death does not touch: denit, PID 1 or subreaper, adopts it) and is the
 * job's parent for the job's whole life, and the subreaper of its descendants (it reaps them). It
 * starts ARGV in a process group of its own (every signal at its default, none blocked, stdin from
 * /dev/null, an open-file soft limit of N), moves its stdout and stderr from pipes into DIR/SEQ.out
 * and DIR/SEQ.err (both together at most CAP bytes; what comes beyond is read and dropped), reaps
 * it, and records what happened in DIR/SEQ.state, a file replaced whole at each change:
 *
 *   pid=P keeper=K exit=C signal=S finished=MS truncated=0|1 lost=B ended=0|1 oom=0|1
 *
 * (exit -1 while it runs; signal 0 unless a signal ended it; finished: when it ended, in
 * milliseconds since the epoch, 0 before; lost: bytes that could not be stored, a full or
 * read-only disk; ended: the output ended, every writer of the pipes gone; oom: a SIGKILL ended
 * it while the `oom_kill` count in FILE, the memory cgroup's, rose). It prints "pid P"
 * on its stdout once the job runs, then closes it. It stays while any process of the job's group
 * is left, whatever signal comes but SIGKILL. SIGUSR1 is a Cancel: it reads the grace (ms) from
 * DIR/SEQ.cancel, sends SIGTERM (with SIGCONT, for a stopped process) to the group and to every
 * process the job started (setsid ones too: they are the keeper's descendants), and SIGKILL once
 * the grace is over (again, until none is left: a fork bomb ends too). A status it cannot write yet
 * (a full disk) is tried again every second. A job that cannot be run ends 127 (not found) or 126,
 * with the reason on its stderr.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "launch.h"

/* How often the group is looked at while only it is left, and while a Cancel's SIGKILL repeats. */
#define GROUP_IDLE_MS 1000
#define GROUP_POLL_MS 20
#define RETRY_SAVE_MS 1000
/* Every state line is padded to this length (the longest is under 200 bytes). */
#define STATE_BYTES 256

struct state {
  pid_t pid, keeper;
  long long since; /* the keeper's start time: with its pid, who it is (a pid is used again) */
  int exit_code, signal, truncated, ended, oom;
  long long lost, finished;
};

static char dir[4096], seq[32];
/* Written once the state names this keeper: until then it stays the service's grandchild. */
static int ready_fd = -1;
static const char *oom_count_file;
/* The job's open-file soft limit (the container's; the service's runtime raised its own). */
static long long nofile;

/* The memory cgroup's `oom_kill` count (v1 memory.oom_control, v2 memory.events); -1 if none. */
static long long oom_kills(void) {
  char text[4096];
  int fd = oom_count_file == NULL ? -1 : open(oom_count_file, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = read(fd, text, sizeof text - 1);
  close(fd);
  if (n <= 0) return -1;
  text[n] = '\0';
  for (char *line = text; line != NULL; line = strchr(line, '\n')) {
    if (*line == '\n') line++;
    if (strncmp(line, "oom_kill ", 9) == 0) return atoll(line + 9);
  }
  return -1;
}

/*
 * Whether the count rose past `before`: the OOM killer counts its kill after it sent SIGKILL, so
 * a victim reaped at once can be seen before the count; a plain SIGKILL waits 100 ms for nothing.
 */
static int oom_killed(long long before) {
  for (int tries = 0; before >= 0 && tries < 20; tries++) {
    if (oom_kills() > before) return 1;
    usleep(5000);
  }
  return 0;
}

static long long now_ms(clockid_t clock) {
  struct timespec now;
  clock_gettime(clock, &now);
  return (long long)now.tv_sec * 1000 + now.tv_nsec / 1000000;
}

static int open_spool(const char *suffix, int flags) {
  char path[4200];
  snprintf(path, sizeof path, "%s/%s.%s", dir, seq, suffix);
  return open(path, flags | O_NOFOLLOW | O_CLOEXEC, 0600);
}

/*
 * Replaces DIR/SEQ.state whole, never through a link: the line, padded to STATE_BYTES, is
 * written over a spare (DIR/SEQ.state.new) and the two are swapped (RENAME_EXCHANGE). Once both
 * exist nothing is allocated, so a full disk cannot keep a job's end from being recorded; where
 * the filesystem cannot swap, the spare is renamed over the state.
 */
static int save(const struct state *s) {
  char line[STATE_BYTES + 1], from[4200], to[4200];
  int n = snprintf(line, sizeof line,
                   "pid=%d keeper=%d since=%lld exit=%d signal=%d finished=%lld truncated=%d "
                   "lost=%lld ended=%d oom=%d",
                   (int)s->pid, (int)s->keeper, s->since, s->exit_code, s->signal, s->finished,
                   s->truncated, s->lost, s->ended, s->oom);
  memset(line + n, ' ', STATE_BYTES - 1 - (size_t)n);
  line[STATE_BYTES - 1] = '\n';
  int fd = open_spool("state.new", O_WRONLY | O_CREAT);
  if (fd < 0) return -1;
  int ok = pwrite(fd, line, STATE_BYTES, 0) == STATE_BYTES;
  close(fd);
  if (!ok) return -1;
  snprintf(from, sizeof from, "%s/%s.state.new", dir, seq);
  snprintf(to, sizeof to, "%s/%s.state", dir, seq);
  if (renameat2(AT_FDCWD, from, AT_FDCWD, to, RENAME_EXCHANGE) == 0) return 0;
  if (errno != ENOENT && errno != EINVAL && errno != ENOSYS) return -1;
  return rename(from, to);
}

/*
 * Only 0, 1 and 2 cross into a keeper, and so into its job (the keeper opens everything
 * O_CLOEXEC): whatever else the service or its runtime left open (the listening job socket above
 * all, which would let a job take other clients' calls) is closed.
 */
static void close_above_stderr(void) {
  if (close_range(3, ~0U, 0) == 0) return;
  struct rlimit files; /* a kernel before 5.9: each possible descriptor, up to a bound */
  rlim_t last = 65536;
  if (getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < last) last = files.rlim_cur;
  for (rlim_t fd = 3; fd < last; fd++) close((int)fd);
}

/* The job could not be run: says so on `started` (its keeper waits for that or for the exec). */
static void refuse(int started, int code) {
  write_all(started, "x", 1);
  _exit(code);
}

/*
 * The job itself, after fork: its own group, signals at default, its streams, then exec; a
 * failure is told on `started`, which exec closes.
 */
static void start(char **argv, char **env, const char *cwd, int out, int err, int started) {
  setpgid(0, 0);
  for (int signo = 1; signo <= SIGRTMAX; signo++) {
    if (signo != SIGKILL && signo != SIGSTOP) signal(signo, SIG_DFL);
  }
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (null < 0 || dup2(null, 0) < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0) refuse(started, 125);
  struct rlimit files;
  if (nofile > 0 && getrlimit(RLIMIT_NOFILE, &files) == 0 && (rlim_t)nofile <= files.rlim_max) {
    files.rlim_cur = (rlim_t)nofile;
    setrlimit(RLIMIT_NOFILE, &files);
  }
  for (char **entry = env; *entry != NULL; entry++) putenv(*entry);
  if (cwd != NULL && chdir(cwd) != 0) {
    dprintf(2, "denit: Cannot start \"%s\": work_dir \"%s\": %s\n", argv[0], cwd, strerror(errno));
    refuse(started, 126);
  }
  execvp(argv[0], argv);
  int failure = errno;
  if (failure == ENOENT) {
    dprintf(2, "denit: Cannot start \"%s\": command not found\n", argv[0]);
    refuse(started, 127);
  }
  dprintf(2, "denit: Cannot start \"%s\": %s\n", argv[0], strerror(failure));
  refuse(started, 126);
}

/* This process's start time, proc(5) stat field 22 (clock ticks since boot); 0 if unknown. */
static long long start_time(void) {
  char text[1024];
  int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
  ssize_t n = fd < 0 ? -1 : read(fd, text, sizeof text - 1);
  if (fd >= 0) close(fd);
  if (n <= 0) return 0;
  text[n] = '\0';
  char *at = strrchr(text, ')'); /* the name may hold spaces and parentheses */
  for (int field = 3; at != NULL && field <= 22; field++) at = strchr(at + 1, ' ');
  return at == NULL ? 0 : atoll(at + 1);
}

/* The job's end, from its wait status. */
static void record_end(struct state *s, int status, long long oom_before) {
  s->exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  s->signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  s->oom = s->signal == SIGKILL && oom_killed(oom_before);
  s->finished = now_ms(CLOCK_REALTIME);
}

/*
 * Moves what a pipe holds into its file, within the cap: 1 more may come, 0 at its end. What
 * changes the state (a first truncation, lost bytes) clears `saved`.
 */
static int take(int pipe_fd, int file, long long *stored, long long cap, struct state *s,
                int *saved) {
  static char buffer[65536];
  ssize_t n = read(pipe_fd, buffer, sizeof buffer);
  if (n < 0) return errno == EINTR || errno == EAGAIN;
  if (n == 0) return 0;
  long long room = cap - *stored;
  size_t keep = room <= 0 ? 0 : (size_t)(n < room ? n : room);
  if (keep < (size_t)n && !s->truncated) {
    s->truncated = 1;
    *saved = 0;
  }
  if (keep > 0 && (file < 0 || write_all(file, buffer, keep) != 0)) {
    s->lost += (long long)keep; /* a full or read-only disk: counted, and the job goes on */
    *saved = 0;
  } else {
    *stored += (long long)keep;
  }
  return 1;
}

/* The processes a walk found, parents before their children. */
struct tree {
  pid_t *pids;
  size_t count, room;
};

/*
 * Appends every descendant of `pid` (its children as /proc lists them for each of its threads,
 * and theirs): a process the job started in a session or group of its own (setsid) is the
 * keeper's descendant still, as the keeper adopts its orphans.
 */
static void walk(pid_t pid, struct tree *tree) {
  char path[64], text[4096];
  snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
  DIR *tasks = opendir(path);
  if (tasks == NULL) return;
  struct dirent *task;
  while ((task = readdir(tasks)) != NULL) {
    if (task->d_name[0] == '.') continue;
    char children[300];
    snprintf(children, sizeof children, "/proc/%d/task/%s/children", (int)pid, task->d_name);
    int fd = open(children, O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    ssize_t n = read(fd, text, sizeof text - 1);
    close(fd);
    text[n > 0 ? n : 0] = '\0';
    for (char *at = text, *end; *at != '\0'; at = end) {
      long child = strtol(at, &end, 10);
      if (end == at) break;
      if (tree->count == tree->room) {
        size_t room = tree->room == 0 ? 64 : tree->room * 2;
        pid_t *grown = realloc(tree->pids, room * sizeof *grown);
        if (grown == NULL) break; /* what was found is signalled; the group gets it too */
        tree->pids = grown;
        tree->room = room;
      }
      tree->pids[tree->count++] = (pid_t)child;
      walk((pid_t)child, tree);
    }
  }
  closedir(tasks);
}

/*
 * `signo` to every process the job started, wherever it went, then to the job's group. The tree
 * is read whole first: a parent signalled before its children were read could end and hand them
 * to the keeper unseen. A parent is signalled before its children: one that restarts a child
 * which ends has its own signal by then.
 */
static void signal_job(pid_t pgid, int signo) {
  struct tree tree = {0};
  walk(getpid(), &tree);
  for (size_t i = 0; i < tree.count; i++) {
    kill(tree.pids[i], signo);
    kill(tree.pids[i], SIGCONT); /* a stopped process takes TERM too */
  }
  free(tree.pids);
  kill(-pgid, signo);
}

/* A Cancel: the grace from DIR/SEQ.cancel; SIGTERM to the whole job now. Returns the deadline. */
static long long cancel(pid_t pgid) {
  char text[32] = {0};
  int fd = open_spool("cancel", O_RDONLY);
  long long grace = 0;
  if (fd >= 0) {
    if (read(fd, text, sizeof text - 1) > 0) grace = atoll(text);
    close(fd);
  }
  signal_job(pgid, SIGTERM);
  return now_ms(CLOCK_MONOTONIC) + (grace > 0 ? grace : 0);
}

/* The keeper proper: runs the job and keeps it, as the comment at the top says. */
static int keep(char **argv, char **env, const char *cwd, long long cap) {
  int out_file = open_spool("out", O_WRONLY | O_CREAT | O_TRUNC);
  int err_file = open_spool("err", O_WRONLY | O_CREAT | O_TRUNC);
  int out[2], err[2], started[2];
  if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0 || pipe2(started, O_CLOEXEC) != 0) {
    return 125;
  }
  /* Every signal is blocked (SIGKILL aside), and only SIGCHLD and SIGUSR1 are read: a stop
   * signal meant for the job (denit's leftovers' stop, a signal passed on, `kill -1`) must not
   * end its keeper first, or the job's output and status go with it. */
  sigset_t wanted, all;
  sigfillset(&all);
  sigprocmask(SIG_BLOCK, &all, NULL);
  sigemptyset(&wanted);
  sigaddset(&wanted, SIGCHLD);
  sigaddset(&wanted, SIGUSR1);
  int sfd = signalfd(-1, &wanted, SFD_CLOEXEC | SFD_NONBLOCK);
  /* The job's orphans come here, not to denit: a job that forks and exits in a loop costs
   * PID 1 nothing. Not every kernel interface has it (qemu-user): the keeper goes on without. */
  prctl(PR_SET_CHILD_SUBREAPER, 1L, 0L, 0L, 0L);
  long long oom_before = oom_kills();
  long long since = start_time();
  struct state s = {.pid = fork(), .keeper = getpid(), .since = since, .exit_code = -1};
  if (s.pid < 0) return 125;
  if (s.pid == 0) start(argv, env, cwd, out[1], err[1], started[1]);
  setpgid(s.pid, s.pid); /* the child does the same: whichever comes first, the group exists */
  close(out[1]);
  close(err[1]);
  close(started[1]);
  /* Until the exec or its failure: a job that could not be run is recorded as ended (127 or
   * 126) before the service hears its pid, so that Run answers with that. */
  char told;
  ssize_t n;
  while ((n = read(started[0], &told, 1)) < 0 && errno == EINTR) {
  }
  close(started[0]);
  int reaped = 0, status;
  if (n == 1) {
    while (waitpid(s.pid, &status, 0) < 0 && errno == EINTR) {
    }
    record_end(&s, status, oom_before);
    reaped = 1;
  }
  char adj[64];
  snprintf(adj, sizeof adj, "/proc/%d/oom_score_adj", (int)s.pid);
  int fd = open(adj, O_WRONLY | O_CLOEXEC); /* the OOM killer's first pick, before the service */
  if (fd >= 0) {
    write_all(fd, "1000", 4);
    close(fd);
  }
  /* Twice: the state, then its spare, both made while the disk has room. */
  int saved = save(&s) == 0 && save(&s) == 0;
  write_all(ready_fd, "x", 1);
  close(ready_fd);
  printf("pid %d\n", (int)s.pid);
  fflush(stdout);
  close(1);
  long long stored = 0, deadline = -1;
  struct pollfd fds[3] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}, {sfd, POLLIN, 0}};
  int children = 1;
  for (;;) {
    /* After a Cancel the job is every process it started: its group, and what left it. */
    int group = kill(-s.pid, 0) == 0 || errno != ESRCH || (deadline >= 0 && children);
    if (reaped && fds[0].fd < 0 && fds[1].fd < 0 && saved && !group) return 0;
    int timeout = -1;
    if (!saved) timeout = RETRY_SAVE_MS;
    if (reaped && fds[0].fd < 0 && fds[1].fd < 0 && group) timeout = GROUP_IDLE_MS;
    if (deadline >= 0) {
      long long left = deadline - now_ms(CLOCK_MONOTONIC);
      if (left <= 0) signal_job(s.pid, SIGKILL); /* and again at each turn, until it is gone */
      left = left <= 0 ? GROUP_POLL_MS : left;
      if (timeout < 0 || left < timeout) timeout = (int)left;
    }
    if (poll(fds, 3, timeout) < 0 && errno != EINTR) return 125;
    for (int i = 0; i < 2; i++) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      if (!take(fds[i].fd, i == 0 ? out_file : err_file, &stored, cap, &s, &saved)) {
        close(fds[i].fd);
        fds[i].fd = -1; /* poll(2) ignores a negative descriptor */
        saved = 0;
      }
    }
    struct signalfd_siginfo info;
    while (read(sfd, &info, sizeof info) > 0) {
      if (info.ssi_signo == SIGUSR1 && deadline < 0) deadline = cancel(s.pid);
    }
    pid_t gone;
    while ((gone = waitpid(-1, &status, WNOHANG)) > 0 || (gone < 0 && errno == EINTR)) {
      if (gone < 0) continue;
      if (gone != s.pid) continue; /* an orphan of the job's, adopted: reaped here */
      reaped = 1;
      record_end(&s, status, oom_before);
      saved = 0;
    }
    children = !(gone < 0 && errno == ECHILD);
    int ended = fds[0].fd < 0 && fds[1].fd < 0;
    if (ended != s.ended) {
      s.ended = ended;
      saved = 0;
    }
    if (!saved) saved = save(&s) == 0;
  }
}

int keep_main(int argc, char **argv) {
  if (argc < 6) {
    fprintf(stderr, "denit job keep: DIR SEQ CAP [--cwd DIR] [--oom-count FILE] [--nofile N] "
                    "[--env NAME=VALUE]... -- ARGV...\n");
    return 2;
  }
  snprintf(dir, sizeof dir, "%s", argv[1]);
  snprintf(seq, sizeof seq, "%s", argv[2]);
  const char *cwd = NULL;
  char **env = calloc((size_t)argc, sizeof *env);
  size_t envs = 0;
  int at = 4;
  for (; at < argc && strcmp(argv[at], "--") != 0; at += 2) {
    if (at + 1 >= argc || env == NULL) return 2;
    if (strcmp(argv[at], "--cwd") == 0) cwd = argv[at + 1];
    else if (strcmp(argv[at], "--oom-count") == 0) oom_count_file = argv[at + 1];
    else if (strcmp(argv[at], "--nofile") == 0) nofile = atoll(argv[at + 1]);
    else if (strcmp(argv[at], "--env") == 0) env[envs++] = argv[at + 1];
    else return 2;
  }
  if (at + 1 >= argc) return 2;
  close_above_stderr();
  /* Out of the service's hands: the process the service started exits once the state names the
   * keeper (or it failed), so that denit, which adopts it, knows it as its own from the start. */
  int ready[2];
  if (pipe2(ready, O_CLOEXEC) != 0) return 125;
  pid_t self = fork();
  if (self < 0) {
    fprintf(stderr, "denit job keep: fork: %s\n", strerror(errno));
    return 125;
  }
  if (self > 0) {
    close(ready[1]);
    char told;
    while (read(ready[0], &told, 1) < 0 && errno == EINTR) {
    }
    _exit(0);
  }
  close(ready[0]);
  ready_fd = ready[1];
  return keep(argv + at + 1, env, cwd, atoll(argv[3]));
}
