/*
 * probe: the measuring side of `make bench`, in C so that the driver adds as little as
 * possible to what it measures. Every clock is CLOCK_MONOTONIC (one clock for all processes).
 *
 *   probe siglat N SUP... --     time kill(SUP, SIGUSR1) -> the child's handler, N times, and
 *                                SUP's CPU time per signal (all its threads, schedstat)
 *   probe exitlat SUP... --      time the child's _exit -> SUP's exit seen by waitpid
 *   probe orphans burst N        (as SUP's child, in a PID namespace) N orphans exit at once
 *   probe orphans stream RATE S  RATE orphans per second for S seconds; samples the backlog
 *   probe zombies N              (as SUP's child, PID 1 of a namespace) N zombies parked by one
 *                                parent are reparented at once: the drain alone, with SIGUSR1
 *                                round trips through SUP measured while it drains
 *   probe time ARGV...           run ARGV once (stdout to /dev/null): wall time, peak RSS
 *   probe bomb PROCS             join the cgroup whose cgroup.procs is PROCS, then fork for ever
 *                                (every process: one that fails at the pids limit tries again)
 *   probe sigchild               (internal) the child of siglat
 *   probe exitchild              (internal) the child of exitlat
 *
 * SUP... is the supervisor's argv up to its own "--" (empty: the child runs directly).
 * Results are one JSON line on stdout.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void die(const char *what) {
  fprintf(stderr, "probe: %s: %s\n", what, strerror(errno));
  exit(2);
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

/* Prints the stats of n samples; `cpu_us`: CPU time per sample of the process measured. */
static void print_stats(const char *name, int64_t *v, int n, int lost, double cpu_us) {
  qsort(v, n, sizeof *v, cmp_i64);
  int64_t sum = 0;
  for (int i = 0; i < n; i++) sum += v[i];
  printf("{\"probe\":\"%s\",\"count\":%d,\"lost\":%d,\"median_us\":%.2f,\"p99_us\":%.2f,"
         "\"max_us\":%.2f,\"mean_us\":%.2f,\"cpu_us\":%.2f}\n",
         name, n, lost, v[n / 2] / 1e3, v[(int)(n * 0.99)] / 1e3, v[n - 1] / 1e3,
         (double)sum / n / 1e3, cpu_us);
}

/* CPU time of every thread of pid so far, in ns: the first field of each task's schedstat. */
static int64_t cpu_ns(pid_t pid) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/task", pid);
  DIR *tasks = opendir(path);
  if (!tasks) return -1;
  int64_t total = 0;
  struct dirent *e;
  while ((e = readdir(tasks))) {
    if (e->d_name[0] == '.') continue;
    snprintf(path, sizeof path, "/proc/%d/task/%.20s/schedstat", pid, e->d_name);
    FILE *f = fopen(path, "r");
    long long ns = 0;
    if (f && fscanf(f, "%lld", &ns) == 1) total += ns;
    if (f) fclose(f);
  }
  closedir(tasks);
  return total;
}

/* argv = SUP... -- ; builds SUP... <self> <mode> into a new argv. */
static char **with_child(char **sup, char *self, char *mode) {
  int n = 0;
  while (sup[n] && strcmp(sup[n], "--") != 0) n++;
  char **out = calloc(n + 4, sizeof *out);
  for (int i = 0; i < n; i++) out[i] = sup[i];
  out[n] = self;
  out[n + 1] = mode;
  return out;
}

static pid_t spawn_with_stdout(char **argv, int out_fd) {
  pid_t pid = fork();
  if (pid < 0) die("fork");
  if (pid == 0) {
    dup2(out_fd, 1);
    execvp(argv[0], argv);
    die("exec");
  }
  return pid;
}

/* ---- signal forwarding latency ---- */

static int sigchild(void) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGUSR1);
  sigaddset(&set, SIGTERM);
  sigprocmask(SIG_BLOCK, &set, NULL);
  if (write(1, "R", 1) != 1) return 3;
  for (;;) {
    int sig = sigwaitinfo(&set, NULL);
    if (sig == SIGTERM) return 0;
    if (sig == SIGUSR1 && write(1, "S", 1) != 1) return 3;
  }
}

static int siglat(int n, char **sup, char *self) {
  int fds[2];
  if (pipe(fds) < 0) die("pipe");
  char **argv = with_child(sup, self, "sigchild");
  pid_t pid = spawn_with_stdout(argv, fds[1]);
  close(fds[1]);
  char c;
  if (read(fds[0], &c, 1) != 1 || c != 'R') die("child not ready");
  /* Deno arms its signal listeners as the program starts; give every supervisor 200 ms
     (PROBE_SETTLE_MS: longer, for a load to start beside it first). */
  const char *settle_ms = getenv("PROBE_SETTLE_MS");
  long ms = settle_ms ? atol(settle_ms) : 200;
  struct timespec settle = {ms / 1000, (ms % 1000) * 1000000L}, gap = {0, 1000000};
  nanosleep(&settle, NULL);
  int64_t *v = calloc(n, sizeof *v);
  int lost = 0;
  int64_t cpu0 = cpu_ns(pid);
  for (int i = 0; i < n; i++) {
    int64_t t0 = now_ns();
    if (kill(pid, SIGUSR1) < 0) die("kill");
    alarm(2);
    if (read(fds[0], &c, 1) != 1) { lost++; break; }
    alarm(0);
    v[i] = now_ns() - t0;
    nanosleep(&gap, NULL);
  }
  double cpu_us = (cpu_ns(pid) - cpu0) / 1e3 / n;
  kill(pid, SIGTERM);
  int status;
  waitpid(pid, &status, 0);
  print_stats("siglat", v, lost ? 1 : n, lost, cpu_us);
  return 0;
}

/* ---- exit propagation ---- */

static int exitchild(void) {
  /* Exit once the supervisor is idle: its own start-up is not exit propagation. */
  struct timespec settle = {0, 200000000};
  nanosleep(&settle, NULL);
  int64_t t = now_ns();
  if (write(1, &t, sizeof t) != sizeof t) return 3;
  _exit(0);
}

static int exitlat(char **sup, char *self) {
  int fds[2];
  if (pipe(fds) < 0) die("pipe");
  char **argv = with_child(sup, self, "exitchild");
  pid_t pid = spawn_with_stdout(argv, fds[1]);
  close(fds[1]);
  int64_t t_child;
  if (read(fds[0], &t_child, sizeof t_child) != sizeof t_child) die("read stamp");
  int status;
  if (waitpid(pid, &status, 0) < 0) die("waitpid");
  int64_t t = now_ns();
  printf("{\"probe\":\"exitlat\",\"us\":%.2f,\"status\":%d}\n", (t - t_child) / 1e3, status);
  return 0;
}

/* ---- orphans ---- */

/* Children of PID 1 that are not yet reaped (zombies and orphans still exiting), minus us. */
static int outstanding(void) {
  int count = 0;
  DIR *tasks = opendir("/proc/1/task");
  if (!tasks) die("opendir /proc/1/task");
  struct dirent *e;
  char path[64], buf[8192];
  while ((e = readdir(tasks))) {
    if (e->d_name[0] == '.') continue;
    snprintf(path, sizeof path, "/proc/1/task/%.32s/children", e->d_name);
    FILE *f = fopen(path, "r");
    if (!f) continue;
    size_t r;
    while ((r = fread(buf, 1, sizeof buf, f)) > 0)
      for (size_t i = 0; i < r; i++) count += buf[i] == ' ';
    fclose(f);
  }
  closedir(tasks);
  return count - 1;
}

/* One orphan: a grandchild that waits for `gate` to close, whose parent exits at once. */
static void make_orphan(int gate, int gate_writer) {
  pid_t child = fork();
  if (child < 0) die("fork");
  if (child == 0) {
    if (gate_writer >= 0) close(gate_writer); /* else the gate never reads EOF */
    pid_t grandchild = fork();
    if (grandchild == 0) {
      char c;
      while (read(gate, &c, 1) > 0) {}
      _exit(0);
    }
    _exit(0);
  }
  waitpid(child, NULL, 0);
}

static int orphans_burst(int n) {
  int gate[2];
  if (pipe(gate) < 0) die("pipe");
  for (int i = 0; i < n; i++) make_orphan(gate[0], gate[1]);
  close(gate[0]);
  int peak = 0;
  int64_t t0 = now_ns();
  close(gate[1]); /* every orphan sees EOF and exits now */
  int left, polls = 0;
  struct timespec pause = {0, 1000000}; /* 1 ms: poll without starving the reaper of CPU */
  while ((left = outstanding()) > 0) {
    if (left > peak) peak = left;
    polls++;
    nanosleep(&pause, NULL);
    if (now_ns() - t0 > 60000000000LL) break;
  }
  int64_t t = now_ns() - t0;
  printf("{\"probe\":\"orphans-burst\",\"orphans\":%d,\"seconds\":%.4f,\"per_second\":%.0f,"
         "\"peak\":%d,\"left\":%d,\"polls\":%d}\n",
         n, t / 1e9, n / (t / 1e9), peak, left < 0 ? 0 : left, polls);
  return left > 0;
}

static int orphans_stream(int rate, int seconds) {
  int made = 0, peak = 0;
  int64_t t0 = now_ns(), period = 1000000000LL / rate;
  int gate[2];
  if (pipe(gate) < 0) die("pipe");
  close(gate[1]); /* closed gate: every orphan exits as soon as it runs */
  while (now_ns() - t0 < (int64_t)seconds * 1000000000LL) {
    int64_t due = t0 + (int64_t)made * period;
    /* Sleep, not spin, until the next orphan is due: the supervisor needs the CPU. */
    struct timespec until = {due / 1000000000LL, due % 1000000000LL};
    clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, NULL);
    make_orphan(gate[0], -1);
    made++;
    if (made % 50 == 0) {
      int left = outstanding();
      if (left > peak) peak = left;
    }
  }
  int64_t end = now_ns();
  int left;
  while ((left = outstanding()) > 0 && now_ns() - end < 10000000000LL) {}
  printf("{\"probe\":\"orphans-stream\",\"orphans\":%d,\"rate\":%d,\"peak_backlog\":%d,"
         "\"left\":%d,\"drain_ms\":%.1f}\n",
         made, rate, peak, left, (now_ns() - end) / 1e6);
  return left > 0;
}

/* ---- zombies reparented at once ---- */

static int zombies(int n) {
  sigset_t usr1;
  sigemptyset(&usr1);
  sigaddset(&usr1, SIGUSR1);
  sigprocmask(SIG_BLOCK, &usr1, NULL);
  int ready[2], go[2];
  if (pipe(ready) < 0 || pipe(go) < 0) die("pipe");
  pid_t parker = fork();
  if (parker < 0) die("fork");
  if (parker == 0) {
    /* N children that exit at once and stay zombies of this process until it exits. */
    pid_t *kids = calloc(n, sizeof *kids);
    for (int i = 0; i < n; i++) {
      kids[i] = fork();
      if (kids[i] < 0) die("fork");
      if (kids[i] == 0) _exit(0);
    }
    siginfo_t info;
    for (int i = 0; i < n; i++) waitid(P_PID, kids[i], &info, WEXITED | WNOWAIT);
    /* Reaped in fork order (waitpid(-1) takes the first zombie of PID 1's list, and the
       kernel appends reparented children in order): the last one's pid marks the end. */
    if (write(ready[1], &kids[n - 1], sizeof kids[0]) != sizeof kids[0]) _exit(3);
    char c;
    if (read(go[0], &c, 1) != 1) _exit(3);
    _exit(0); /* the kernel reparents every zombie to PID 1 now */
  }
  pid_t last;
  if (read(ready[0], &last, sizeof last) != sizeof last) die("parker not ready");
  struct timespec settle = {0, 200000000};
  nanosleep(&settle, NULL);
  int64_t t0 = now_ns();
  if (write(go[1], "G", 1) != 1) die("write go");
  waitpid(parker, NULL, 0);
  int64_t *lat = calloc(100000, sizeof *lat);
  int signals = 0, lost = 0, peak = 0, left = n, round = 0;
  struct timespec wait = {1, 0}, gap = {0, 1000000};
  /* Counting what is left reads /proc/1/task/N/children, which holds up the reaper in the
     kernel (a list of 20,000 pids): counted only once the last zombie is gone (kill(pid, 0)
     finds a zombie, not a reaped pid), so that the end is seen within a round, and every
     hundredth round in case the order was not the fork order. */
  while ((round++ % 100 != 0 && kill(last, 0) == 0) || (left = outstanding()) > 0) {
    if (left > peak) peak = left;
    int64_t s0 = now_ns();
    if (kill(1, SIGUSR1) < 0) die("kill");
    if (sigtimedwait(&usr1, NULL, &wait) < 0) lost++;
    else if (signals < 100000) lat[signals++] = now_ns() - s0;
    nanosleep(&gap, NULL);
    if (now_ns() - t0 > 60000000000LL) break;
  }
  int64_t t = now_ns() - t0;
  qsort(lat, signals, sizeof *lat, cmp_i64);
  printf("{\"probe\":\"zombies\",\"zombies\":%d,\"seconds\":%.4f,\"per_second\":%.0f,"
         "\"peak\":%d,\"left\":%d,\"signals\":%d,\"lost\":%d,\"sig_p50_us\":%.1f,"
         "\"sig_p99_us\":%.1f,\"sig_max_us\":%.1f}\n",
         n, t / 1e9, n / (t / 1e9), peak, left < 0 ? 0 : left, signals, lost,
         signals ? lat[signals / 2] / 1e3 : 0, signals ? lat[signals * 99 / 100] / 1e3 : 0,
         signals ? lat[signals - 1] / 1e3 : 0);
  return left > 0;
}

static int time_once(char **argv) {
  int null = open("/dev/null", O_WRONLY);
  int64_t t0 = now_ns();
  pid_t pid = spawn_with_stdout(argv, null);
  int status;
  struct rusage usage;
  if (wait4(pid, &status, 0, &usage) < 0) die("wait4");
  int64_t t = now_ns() - t0;
  printf("{\"probe\":\"time\",\"us\":%.2f,\"status\":%d,\"maxrss_kb\":%ld}\n", t / 1e3, status,
         usage.ru_maxrss);
  return 0;
}

static int bomb(const char *procs) {
  FILE *f = fopen(procs, "w");
  if (f == NULL || fprintf(f, "%d\n", (int)getpid()) < 0 || fclose(f) != 0) die(procs);
  for (;;) fork();
  return 0;
}

int main(int argc, char **argv) {
  if (argc >= 3 && strcmp(argv[1], "bomb") == 0) return bomb(argv[2]);
  if (argc >= 3 && strcmp(argv[1], "time") == 0) return time_once(argv + 2);
  if (argc >= 2 && strcmp(argv[1], "sigchild") == 0) return sigchild();
  if (argc >= 2 && strcmp(argv[1], "exitchild") == 0) return exitchild();
  if (argc >= 3 && strcmp(argv[1], "siglat") == 0) return siglat(atoi(argv[2]), argv + 3, argv[0]);
  if (argc >= 2 && strcmp(argv[1], "exitlat") == 0) return exitlat(argv + 2, argv[0]);
  if (argc >= 3 && strcmp(argv[1], "zombies") == 0) return zombies(atoi(argv[2]));
  if (argc >= 4 && strcmp(argv[1], "orphans") == 0 && strcmp(argv[2], "burst") == 0)
    return orphans_burst(atoi(argv[3]));
  if (argc >= 5 && strcmp(argv[1], "orphans") == 0 && strcmp(argv[2], "stream") == 0)
    return orphans_stream(atoi(argv[3]), atoi(argv[4]));
  fprintf(stderr, "usage: see the comment at the top of probe.c\n");
  return 2;
}
