/*
 * denit's launcher, /denit in the image built from `make rootfs` (and DEST/denit after
 * `denit init` in that form): it starts `deno run ... denit.js` from its own directory, so
 * that `ENTRYPOINT ["/denit", "--"]` works as with the compiled binary. Two things it does
 * first, that nothing inside the runtime could do early enough:
 *
 * - It blocks the signals denit forwards. A signal that comes while the runtime boots (before
 *   denit's listeners exist; 35-65 ms in a fresh container) is then kept pending by the kernel
 *   instead of being dropped (PID 1) or killing denit (a subreaper), and denit unblocks them
 *   once it listens. `docker run -d` then `docker stop` is a clean stop, not a 10 s SIGKILL.
 * - It keeps the container's environment from steering the runtime: variables the runtime
 *   reads before any script runs (DENO_*, NODE_*, OTEL_*, RUST_*, npm_config_*, LD_*) are moved
 *   into a memfd that denit reads back and gives to the child, byte for byte; the runtime gets
 *   a DENO_DIR that cannot exist, so it writes no cache and prints nothing on a read-only root.
 *
 * - On a terminal (docker run -it), the runtime's stderr is /dev/null while it boots: a runtime
 *   without a writable cache directory says so there, three lines, before denit runs. denit
 *   takes the real stderr back (a descriptor kept open for it) before it writes anything.
 *
 * DENIT_LAUNCH says where the memfd is, where this launcher is and, on a terminal, where the
 * real stderr waits: "FD:PATH" or "FD:PATH:STDERR_FD" (PATH holds no colon: checked).
 * Modes that do not supervise (init, copy, job, bridge, probe) get the signals unblocked.
 * Exit 125 with one line when the runtime cannot be started.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

extern char **environ;

/* The signals denit forwards (src/supervise/signals.ts, action "forward"). */
static const int FORWARDED[] = {
    SIGHUP,  SIGINT,  SIGQUIT, SIGUSR1, SIGUSR2,   SIGALRM,  SIGTERM, SIGSTKFLT, SIGCONT,
    SIGTSTP, SIGURG,  SIGXCPU, SIGXFSZ, SIGVTALRM, SIGWINCH, SIGIO,   SIGPWR,
};

/* First words that select a mode other than supervising (mod.ts dispatches the same way). */
static const char *const OTHER_MODES[] = {"init", "copy", "job", "bridge", "probe"};

/* Variables the runtime acts on before denit runs: moved aside for the child. */
static const char *const PREFIXES[] = {"DENO_", "NODE_", "OTEL_", "RUST_", "npm_config_",
                                       "NPM_CONFIG_", "LD_"};

/* What the launcher sets for the runtime; denit removes them again (DENIT_LAUNCH names the fd). */
static const char *const ADDED[] = {"DENO_DIR", "DENO_DISABLE_NODE_SHIM", "DENO_NO_UPDATE_CHECK",
                                    "DENIT_LAUNCH"};

static int fail(const char *what, const char *detail) {
  fprintf(stderr, "denit: %s %s: %s\n", what, detail, strerror(errno));
  return 125;
}

static int moved(const char *entry) {
  for (size_t i = 0; i < sizeof PREFIXES / sizeof *PREFIXES; i++) {
    if (strncmp(entry, PREFIXES[i], strlen(PREFIXES[i])) == 0) return 1;
  }
  return 0;
}

static int write_all(int fd, const char *data, size_t length) {
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

/*
 * The memfd holds "NAME=VALUE\0" for every moved entry, an empty entry, then "NAME\0" for every
 * variable the launcher added. The entries stay in environ's order.
 */
static int set_aside(const char *self, int saved_stderr) {
  int fd = memfd_create("denit-environment", 0); /* inherited: denit closes it */
  if (fd < 0) return -1;
  size_t kept = 0;
  for (char **entry = environ; *entry != NULL; entry++) {
    if (moved(*entry)) {
      if (write_all(fd, *entry, strlen(*entry) + 1) != 0) return -1;
    } else {
      environ[kept++] = *entry; /* compacted in place: environ is ours until exec */
    }
  }
  environ[kept] = NULL;
  if (write_all(fd, "", 1) != 0) return -1;
  for (size_t i = 0; i < sizeof ADDED / sizeof *ADDED; i++) {
    if (write_all(fd, ADDED[i], strlen(ADDED[i]) + 1) != 0) return -1;
  }
  char launch[PATH_MAX + 32];
  if (saved_stderr >= 0) {
    snprintf(launch, sizeof launch, "%d:%s:%d", fd, self, saved_stderr);
  } else {
    snprintf(launch, sizeof launch, "%d:%s", fd, self); /* `denit init` copies the launcher */
  }
  /* A path under a file: the runtime cannot create its cache there, and says nothing. */
  if (setenv("DENO_DIR", "/dev/null/denit-no-cache", 1) != 0 ||
      setenv("DENO_DISABLE_NODE_SHIM", "1", 1) != 0 ||
      setenv("DENO_NO_UPDATE_CHECK", "1", 1) != 0 || setenv("DENIT_LAUNCH", launch, 1) != 0) {
    return -1;
  }
  return 0;
}

int main(int argc, char **argv) {
  char self[PATH_MAX], dir[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return fail("cannot find itself:", "/proc/self/exe");
  self[n] = '\0';
  memcpy(dir, self, (size_t)n + 1);
  *strrchr(dir, '/') = '\0'; /* "" for a launcher in / */

  int supervise = 1;
  for (size_t i = 0; argc > 1 && i < sizeof OTHER_MODES / sizeof *OTHER_MODES; i++) {
    if (strcmp(argv[1], OTHER_MODES[i]) == 0) supervise = 0;
  }
  if (supervise) {
    sigset_t set;
    sigemptyset(&set);
    for (size_t i = 0; i < sizeof FORWARDED / sizeof *FORWARDED; i++) sigaddset(&set, FORWARDED[i]);
    if (sigprocmask(SIG_BLOCK, &set, NULL) != 0) return fail("cannot block", "signals");
  }
  if (strchr(self, ':') != NULL) {
    errno = EINVAL;
    return fail("cannot run from a path with a colon:", self);
  }
  char deno[PATH_MAX + 16], bundle[PATH_MAX + 16];
  snprintf(deno, sizeof deno, "%s/deno", dir);
  snprintf(bundle, sizeof bundle, "%s/denit.js", dir);
  /* Checked here: once stderr is lent to /dev/null, the runtime could not say it. */
  if (access(deno, X_OK) != 0) return fail("cannot start the runtime", deno);
  if (access(bundle, R_OK) != 0) return fail("cannot read", bundle);
  int saved_stderr = -1;
  if (supervise && isatty(STDERR_FILENO)) {
    int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
    saved_stderr = dup(STDERR_FILENO); /* inherited by the runtime: denit takes it back */
    if (null < 0 || saved_stderr < 0 || dup2(null, STDERR_FILENO) < 0) {
      return fail("cannot lend stderr to", "/dev/null");
    }
    close(null);
  }
  if (set_aside(self, saved_stderr) != 0) {
    if (saved_stderr >= 0) dup2(saved_stderr, STDERR_FILENO);
    return fail("cannot set the environment aside", "(memfd)");
  }

  static const char *const RUN[] = {"run", "--quiet", "--no-config", "--no-lock",
                                    "--allow-all", "--no-prompt"};
  const size_t fixed = 1 + sizeof RUN / sizeof *RUN + 1;
  char **args = calloc(fixed + (size_t)argc, sizeof *args);
  if (args == NULL) return fail("cannot start", deno);
  size_t at = 0;
  args[at++] = deno;
  for (size_t i = 0; i < sizeof RUN / sizeof *RUN; i++) args[at++] = (char *)RUN[i];
  args[at++] = bundle;
  for (int i = 1; i < argc; i++) args[at++] = argv[i];
  args[at] = NULL;
  execv(deno, args);
  if (saved_stderr >= 0) dup2(saved_stderr, STDERR_FILENO);
  return fail("cannot start the runtime", deno);
}
