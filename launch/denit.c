/*
 * denit's launcher: the `denit` that users run (the image's /denit, DEST/denit after `denit
 * init`, dist/denit and bin/denit in a checkout). It starts the runtime beside it (`deno`) on the
 * bundle beside it (`denit.js`), keeping its PID, after what nothing inside the runtime could do
 * early enough:
 *
 * - Signals. To supervise, it blocks every signal denit forwards, and SIGCHLD, in the only thread
 *   there is; every thread of the runtime inherits that mask, so none of them is ever delivered
 *   to a handler: denit reads them from a signalfd, whenever they came (during the runtime's boot
 *   they wait, pending). Each is set to its default first (exec keeps an inherited SIG_IGN, and
 *   an ignored SIGCHLD would make the kernel reap the child itself). SIGPIPE, SIGTTIN, SIGTTOU
 *   and SIGPROF are ignored instead, the crash signals left to the runtime. In every mode
 *   SIGUSR1 is blocked: the runtime opens a V8 inspector on 127.0.0.1:9229 when it sees one.
 * - Arguments and limits. The runtime reads arguments as UTF-8 (replacing what is not) and
 *   raises the open-file soft limit to the hard one: the arguments' bytes and the soft limit as
 *   the container set it go to denit in a memfd and in DENIT_LAUNCH.
 * - The environment. Variables the runtime acts on before any script runs (DENO_*, NODE_*,
 *   OTEL_*, RUST_*, npm_config_*, LD_*, GLIBC_TUNABLES) are moved into the memfd, which denit
 *   reads back and gives to the child byte for byte; the runtime gets the cache shipped beside
 *   it as DENO_DIR (`deno-cache`, made by fixtures/cache.ts and read-only where it is shipped;
 *   without one, a DENO_DIR that cannot exist) and one malloc arena (memory the runtime's
 *   threads free at start is then used again, not kept per thread).
 * - On a terminal, the runtime's stderr is a pipe while it boots, copied to the terminal by a
 *   process of the launcher's (see lend_stderr); denit takes the terminal back before it writes.
 *
 * The memfd holds NUL-ended entries: the count of arguments, the arguments, the moved
 * "NAME=VALUE" entries, an empty entry, then the names the launcher set for the runtime.
 * DENIT_LAUNCH is "MEMFD:NOFILE_SOFT:STDERR_FD:COPIER" (-1 and -1: stderr was not lent).
 * Exit 125 with one line when the runtime cannot be started.
 */
#define _GNU_SOURCE
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "launch.h"

/* More V8 flags, for a build of the launcher that is not shipped: build/eager.ts's profile of a
 * start (V8's function log on stdout). */
#ifndef V8_EXTRA
#define V8_EXTRA ""
#endif

extern char **environ;

/* Signals that stay with the runtime (src/common/signals.ts, action "never"). */
static const int NEVER[] = {SIGILL, SIGTRAP, SIGABRT, SIGBUS, SIGFPE, SIGKILL, SIGSEGV, SIGSTOP,
                            SIGSYS};
/* Ignored while denit runs (action "ignore"). */
static const int IGNORED[] = {SIGPIPE, SIGTTIN, SIGTTOU, SIGPROF};

/* First words that select a mode other than supervising (mod.ts dispatches the same way). */
static const char *const OTHER_MODES[] = {"init", "copy", "job"};

/* Variables the runtime acts on before denit runs: moved aside for the child. */
static const char *const PREFIXES[] = {"DENO_", "NODE_", "OTEL_", "RUST_", "npm_config_",
                                       "NPM_CONFIG_", "LD_", "GLIBC_TUNABLES"};

/* What the launcher sets for the runtime; denit removes them again. */
static const char *const ADDED[] = {"DENO_DIR", "DENO_DISABLE_NODE_SHIM", "DENO_NO_UPDATE_CHECK",
                                    "GLIBC_TUNABLES", "DENIT_LAUNCH"};

static const char *const RUN[] = {"run", "--quiet", "--no-config", "--no-lock", "--allow-all",
                                  "--no-prompt"};

#define COUNT(array) (sizeof array / sizeof *array)

/*
 * The open-file limit the runtime needs: it raises its soft limit to the hard one and fails
 * below about 15 descriptors (an import, a signalfd); this leaves room for the health endpoint
 * and the job service.
 */
#define MIN_OPEN_FILES 32

static int fail(const char *what, const char *detail) {
  char shown[4 * PATH_MAX];
  const char *why = strerror(errno);
  fprintf(stderr, "denit: %s %s: %s\n", what, visible(shown, sizeof shown, detail), why);
  return 125;
}

/*
 * execv(2) says ENOENT when the runtime is there but its ELF loader is not (an image without the
 * GNU C library): then this names the loader (PT_INTERP) and says what is missing.
 */
static int missing_loader(const char *deno) {
  Elf64_Ehdr header;
  Elf64_Phdr program;
  char loader[PATH_MAX];
  int fd = open(deno, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  int found = 0;
  if (pread(fd, &header, sizeof header, 0) == (ssize_t)sizeof header) {
    for (int i = 0; i < header.e_phnum && !found; i++) {
      off_t at = (off_t)header.e_phoff + (off_t)i * header.e_phentsize;
      if (pread(fd, &program, sizeof program, at) != (ssize_t)sizeof program) break;
      if (program.p_type != PT_INTERP || program.p_filesz >= sizeof loader) continue;
      ssize_t n = pread(fd, loader, program.p_filesz, (off_t)program.p_offset);
      found = n == (ssize_t)program.p_filesz && access(loader, F_OK) != 0;
      loader[n > 0 ? n - 1 : 0] = '\0'; /* p_filesz counts the NUL */
    }
  }
  close(fd);
  if (found) {
    fprintf(stderr,
            "denit: cannot start the runtime %s: its loader %s is missing: the runtime needs the "
            "GNU C library (a glibc base image such as distroless/cc)\n",
            deno, loader);
  }
  return found;
}

static int listed(int signo, const int *list, size_t count) {
  for (size_t i = 0; i < count; i++) {
    if (list[i] == signo) return 1;
  }
  return 0;
}

/* The blocked set, dispositions set as the comment above says. */
/*
 * Signals 32 and 33 belong to the C library, whose sigaction(2) refuses them; the runtime's
 * copy handles 33 but not 32, whose default ends the process. Ignored with the system call.
 */
static int ignore_reserved(void) {
  struct {
    void (*handler)(int);
    unsigned long flags;
    void (*restorer)(void);
    unsigned long mask;
  } ignore = {SIG_IGN, 0, NULL, 0};
  for (int signo = 32; signo < SIGRTMIN; signo++) {
    if (syscall(SYS_rt_sigaction, signo, &ignore, NULL, sizeof ignore.mask) != 0) return -1;
  }
  return 0;
}

static int take_signals(int supervise) {
  sigset_t set;
  sigemptyset(&set);
  if (ignore_reserved() != 0) return -1;
  if (!supervise) {
    sigaddset(&set, SIGUSR1);
    return sigprocmask(SIG_BLOCK, &set, NULL);
  }
  for (int signo = 1; signo <= SIGRTMAX; signo++) {
    if (listed(signo, NEVER, COUNT(NEVER))) continue;
    if (signo >= 32 && signo < SIGRTMIN) continue; /* the C library's own */
    int ignored = listed(signo, IGNORED, COUNT(IGNORED));
    if (signal(signo, ignored ? SIG_IGN : SIG_DFL) == SIG_ERR) return -1;
    if (!ignored) sigaddset(&set, signo);
  }
  return sigprocmask(SIG_BLOCK, &set, NULL);
}

static int moved(const char *entry) {
  for (size_t i = 0; i < COUNT(PREFIXES); i++) {
    if (strncmp(entry, PREFIXES[i], strlen(PREFIXES[i])) == 0) return 1;
  }
  return 0;
}

const char *visible(char *out, size_t size, const char *text) {
  size_t at = 0;
  for (const unsigned char *c = (const unsigned char *)text; *c != '\0' && at + 5 < size; c++) {
    at += (size_t)snprintf(out + at, size - at, *c < 0x20 || *c == 0x7f ? "\\x%02x" : "%c", *c);
  }
  out[at] = '\0';
  return out;
}

int write_all(int fd, const char *data, size_t length) {
  while (length > 0) {
    ssize_t n = write(fd, data, length);
    if (n < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    data += n;
    length -= (size_t)n;
  }
  return 0;
}

static int put(int fd, const char *entry) {
  return write_all(fd, entry, strlen(entry) + 1);
}

/* Writes the memfd (inherited: denit closes it) and sets the runtime's environment. */
static int set_aside(int argc, char **argv, int saved_stderr, pid_t relay, const char *cache) {
  int fd = memfd_create("denit-launch", 0);
  if (fd < 0) return -1;
  char text[64];
  snprintf(text, sizeof text, "%d", argc - 1);
  if (put(fd, text) != 0) return -1;
  for (int i = 1; i < argc; i++) {
    if (put(fd, argv[i]) != 0) return -1;
  }
  size_t kept = 0;
  for (char **entry = environ; *entry != NULL; entry++) {
    if (!moved(*entry)) {
      environ[kept++] = *entry; /* compacted in place: environ is ours until exec */
    } else if (put(fd, *entry) != 0) {
      return -1;
    }
  }
  environ[kept] = NULL;
  if (put(fd, "") != 0) return -1;
  for (size_t i = 0; i < COUNT(ADDED); i++) {
    if (put(fd, ADDED[i]) != 0) return -1;
  }
  struct rlimit files;
  if (getrlimit(RLIMIT_NOFILE, &files) != 0) return -1;
  snprintf(text, sizeof text, "%d:%llu:%d:%d", fd, (unsigned long long)files.rlim_cur,
           saved_stderr, (int)relay);
  if (setenv("DENO_DIR", cache, 1) != 0 ||
      setenv("DENO_DISABLE_NODE_SHIM", "1", 1) != 0 ||
      setenv("DENO_NO_UPDATE_CHECK", "1", 1) != 0 ||
      setenv("GLIBC_TUNABLES", "glibc.malloc.arena_max=1", 1) != 0 ||
      setenv("DENIT_LAUNCH", text, 1) != 0) {
    return -1;
  }
  return 0;
}

static volatile sig_atomic_t copier_told;

static void copier_stop(int signo) {
  (void)signo;
  copier_told = 1;
}

/*
 * On a terminal: the runtime's stderr becomes a pipe, which a process of the launcher's copies
 * to the terminal. The runtime says on a terminal what it says nowhere else (a cache it cannot
 * open), and an error before denit runs still shows. denit takes the terminal back (the
 * descriptor in *saved, inherited) and sends the copier SIGTERM: it copies what is left in the
 * pipe and exits (as it does at the pipe's end, when the runtime failed). Its pid, or -1.
 */
static pid_t lend_stderr(int *saved) {
  int ends[2];
  *saved = dup(STDERR_FILENO);
  if (*saved < 0 || pipe2(ends, O_CLOEXEC) != 0) return -1;
  pid_t copier = fork();
  if (copier < 0) return -1;
  if (copier == 0) {
    close(ends[1]);
    struct sigaction stop = {.sa_handler = copier_stop};
    sigaction(SIGTERM, &stop, NULL);
    sigset_t all, waiting; /* SIGTERM only while ppoll waits: no wake-up is missed */
    sigfillset(&all);
    sigprocmask(SIG_SETMASK, &all, NULL);
    waiting = all;
    sigdelset(&waiting, SIGTERM);
    struct pollfd pipe_end = {ends[0], POLLIN, 0};
    char buffer[4096];
    for (;;) {
      int ready = copier_told ? poll(&pipe_end, 1, 0) : ppoll(&pipe_end, 1, NULL, &waiting);
      if (ready < 0 && errno == EINTR) continue;
      if (ready <= 0) break; /* told, and the pipe is empty */
      ssize_t n = read(ends[0], buffer, sizeof buffer);
      if (n == 0 && !copier_told) {
        /* The pipe ended with no word from denit: the runtime stopped before denit ran. */
        static const char line[] = "denit: the runtime ended before denit ran (above: what it said)\n";
        write_all(*saved, line, sizeof line - 1);
      }
      if (n <= 0 || write_all(*saved, buffer, (size_t)n) != 0) break;
    }
    _exit(0);
  }
  close(ends[0]);
  if (dup2(ends[1], STDERR_FILENO) < 0) return -1;
  close(ends[1]);
  return copier;
}

int main(int argc, char **argv) {
  /* What runs without the runtime: a job's keeper, the bridge and the probe. */
  if (argc > 2 && strcmp(argv[1], "job") == 0 && strcmp(argv[2], "keep") == 0) {
    return keep_main(argc - 2, argv + 2);
  }
  if (argc > 1 && strcmp(argv[1], "bridge") == 0) return bridge_main(argc - 1, argv + 1);
  if (argc > 1 && strcmp(argv[1], "probe") == 0) return probe_main(argc - 1, argv + 1);
  /* Its own directory ("" for a launcher in /): from /proc, else (no /proc mounted) its path. */
  char self[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n > 0) {
    self[n] = '\0';
  } else if (strchr(argv[0], '/') == NULL || realpath(argv[0], self) == NULL) {
    return fail("cannot find itself:", "/proc/self/exe");
  }
  *strrchr(self, '/') = '\0';

  int supervise = 1;
  for (size_t i = 0; argc > 1 && i < COUNT(OTHER_MODES); i++) {
    if (strcmp(argv[1], OTHER_MODES[i]) == 0) supervise = 0;
  }
  if (take_signals(supervise) != 0) return fail("cannot block", "signals");
  char deno[PATH_MAX + 16], bundle[PATH_MAX + 16], cache[PATH_MAX + 16];
  snprintf(deno, sizeof deno, "%s/deno", self);
  snprintf(bundle, sizeof bundle, "%s/denit.js", self);
  snprintf(cache, sizeof cache, "%s/deno-cache", self);
  struct stat cached;
  /* Without a shipped cache, a path under a file: the runtime cannot create one there. */
  int uncached = stat(cache, &cached) != 0 || !S_ISDIR(cached.st_mode);
  if (uncached) snprintf(cache, sizeof cache, "/dev/null/denit-no-cache");
  /* Checked here: once stderr is lent to /dev/null, the runtime could not say it. */
  if (access(deno, X_OK) != 0) {
    /* The launcher alone: an engine's one-file init (docker run --init, podman --init-path). */
    char shown[4 * PATH_MAX];
    const char *why = strerror(errno);
    fprintf(stderr,
            "denit: cannot start the runtime %s: %s; denit is this launcher with the runtime "
            "and bundles beside it: run the image's /denit or DIR/denit of `denit init DIR`, "
            "not the launcher alone\n",
            visible(shown, sizeof shown, deno), why);
    return 125;
  }
  if (access(bundle, R_OK) != 0) return fail("cannot read", bundle);
  struct rlimit files;
  if (getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_max < MIN_OPEN_FILES) {
    fprintf(stderr,
            "denit: the open-file limit is %llu, and the runtime needs %d: raise it (ulimit -n, "
            "docker run --ulimit nofile=1024)\n",
            (unsigned long long)files.rlim_max, MIN_OPEN_FILES);
    return 125;
  }
  /* The runtime reads its working directory first: where it was removed, it could not start. */
  char cwd[PATH_MAX];
  if (getcwd(cwd, sizeof cwd) == NULL && errno == ENOENT) {
    fprintf(stderr, "denit: the working directory was removed, and the runtime cannot start in "
                    "it: start denit in one that exists\n");
    return 125;
  }
  int saved_stderr = -1;
  pid_t relay = -1;
  if (isatty(STDERR_FILENO)) {
    relay = lend_stderr(&saved_stderr);
    if (relay < 0) return fail("cannot lend stderr to", "a pipe");
  }
  if (set_aside(argc, argv, saved_stderr, relay, cache) != 0) {
    if (saved_stderr >= 0) dup2(saved_stderr, STDERR_FILENO);
    return fail("cannot set the environment aside", "(memfd)");
  }
  /*
   * The job service (which denit starts this way): it ends with denit's thread that started it,
   * and its heap is capped (under connection churn V8 would let it grow to about 180 MiB).
   * PID 1's young generation stays at its smallest and V8 favours size: what requests to the
   * health endpoint allocate is collected instead of growing the heap.
   */
  int service = argc > 2 && strcmp(argv[1], "job") == 0 && strcmp(argv[2], "serve") == 0;
  if (service && prctl(PR_SET_PDEATHSIG, SIGTERM) != 0) return fail("cannot set", "PDEATHSIG");
  char **args = calloc(COUNT(RUN) + 4 + (size_t)argc, sizeof *args);
  if (args == NULL) return fail("cannot start", deno);
  size_t at = 0;
  char launcher[PATH_MAX + 16];
  snprintf(launcher, sizeof launcher, "%s/denit", self);
  args[at++] = launcher; /* what ps, docker top and /proc/PID/cmdline show first */
  for (size_t i = 0; i < COUNT(RUN); i++) args[at++] = (char *)RUN[i];
  if (uncached) args[at++] = "--no-code-cache"; /* none could be kept: none is made */
  /* One set of flags that V8 hashes into a code cache (--optimize-for-size) for every mode, so
   * that the one shipped cache serves them all; heap sizes are not hashed. */
  if (service) args[at++] = "--v8-flags=--optimize-for-size,--max-old-space-size=64" V8_EXTRA;
  else if (supervise)
    args[at++] = "--v8-flags=--optimize-for-size,--max-semi-space-size=1" V8_EXTRA;
  else args[at++] = "--v8-flags=--optimize-for-size" V8_EXTRA;
  args[at++] = bundle;
  for (int i = 1; i < argc; i++) args[at++] = argv[i]; /* what ps shows; denit reads the memfd */
  args[at] = NULL;
  execv(deno, args);
  int failure = errno;
  if (saved_stderr >= 0) dup2(saved_stderr, STDERR_FILENO);
  if (failure == ENOENT && missing_loader(deno)) return 125;
  errno = failure;
  return fail("cannot start the runtime", deno);
}
