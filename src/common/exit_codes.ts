/** denit's exit codes; the README's table is checked against this object by a test. */
export const ExitCode = {
  /** `--help`, `--version`, a successful `denit copy`/`init`, or a child remapped by `-e`. */
  OK: 0,
  /** copy/init: a file could not be copied; job: the service refused; probe: not 2xx. */
  FAILED: 1,
  /** Usage error: one line naming the problem, then a pointer to `--help`. */
  USAGE: 2,
  /** `--timeout`: the child's deadline passed (as coreutils `timeout` exits). */
  TIMED_OUT: 124,
  /** denit itself failed before or around the child (libc, health address, internal error). */
  INTERNAL: 125,
  /** The command was found but could not be executed (permission, format). */
  NOT_EXECUTABLE: 126,
  NOT_FOUND: 127,
  /** The child died of signal N: denit exits with SIGNAL_BASE + N. */
  SIGNAL_BASE: 128,
} as const;
