/* denit's native half: the launcher (denit.c) and what it runs without the runtime. */
#ifndef DENIT_LAUNCH_H
#define DENIT_LAUNCH_H

#include <stddef.h>

/* write(2) until all of `length` is written (EINTR retried): 0, or -1 with errno. */
int write_all(int fd, const char *data, size_t length);

/* `denit job keep ...` (keep.c): the keeper of one job. */
int keep_main(int argc, char **argv);

#endif
