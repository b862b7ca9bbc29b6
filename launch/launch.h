/* denit's native half: the launcher (denit.c) and what it runs without the runtime. */
#ifndef DENIT_LAUNCH_H
#define DENIT_LAUNCH_H

#include <stddef.h>

/* write(2) until all of `length` is written (EINTR retried): 0, or -1 with errno. */
int write_all(int fd, const char *data, size_t length);

/* `text` into `out` with control characters as \xNN (cut to fit): a value stays on its line. */
const char *visible(char *out, size_t size, const char *text);

/* Where `denit bridge` (and `denit job`) look for the job service unless told. */
#define DEFAULT_JOBS_SOCKET "/run/denit/jobs.sock"

/* `denit job keep ...` (keep.c): the keeper of one job. */
int keep_main(int argc, char **argv);

/* `denit bridge [SOCKET]` (bridge.c): stdin and stdout joined to the job service's socket. */
int bridge_main(int argc, char **argv);

/* `denit probe ...` (probe.c): one question to the health endpoint. */
int probe_main(int argc, char **argv);

#endif
