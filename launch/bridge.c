/*
 * `denit bridge [SOCKET]`: joins stdin and stdout to the job service's Unix socket, so that
 * `docker exec -i C /denit bridge` or `kubectl exec -i POD -- /denit bridge` carries a gRPC
 * connection into a container that has no shell. Each direction is copied until it ends, then
 * half-closed; it exits when both are done. A byte pump: no runtime.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "launch.h"

static const char USAGE[] = "Usage: denit bridge [SOCKET]";

/* Copies what `from` holds to `to`: 1 more may come, 0 at its end (or the other side's). */
static int pump(int from, int to) {
  char buffer[65536];
  ssize_t n = read(from, buffer, sizeof buffer);
  if (n < 0) return errno == EINTR || errno == EAGAIN;
  return n > 0 && write_all(to, buffer, (size_t)n) == 0;
}

int bridge_main(int argc, char **argv) {
  if (argc > 1 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) {
    printf("%s\n\nCopies stdin to the job service's socket (default %s, or\nDENIT_JOBS_SOCKET) and "
           "the socket to stdout, half-closing each side at its end, and\nexits when both "
           "directions are done: 0, or 125 if the socket cannot be reached.\n",
           USAGE, DEFAULT_JOBS_SOCKET);
    return 0;
  }
  if (argc > 2 || (argc == 2 && argv[1][0] == '-')) {
    fprintf(stderr, "denit bridge: one socket path at most\n%s\n", USAGE);
    return 2;
  }
  const char *env = getenv("DENIT_JOBS_SOCKET");
  const char *path = argc == 2 ? argv[1] : env != NULL && *env != '\0' ? env : DEFAULT_JOBS_SOCKET;
  struct sockaddr_un address = {.sun_family = AF_UNIX};
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (strlen(path) >= sizeof address.sun_path) errno = ENAMETOOLONG;
  else strcpy(address.sun_path, path);
  if (fd < 0 || errno == ENAMETOOLONG ||
      connect(fd, (struct sockaddr *)&address, sizeof address) != 0) {
    char shown[1024];
    const char *why = strerror(errno);
    visible(shown, sizeof shown, path);
    fprintf(stderr, "denit bridge: cannot connect to \"%s\": %s\n", shown, why);
    return 125;
  }
  signal(SIGPIPE, SIG_IGN); /* the other side going away is how a bridge usually ends */
  struct pollfd fds[2] = {{0, POLLIN, 0}, {fd, POLLIN, 0}};
  while (fds[0].fd >= 0 || fds[1].fd >= 0) {
    if (poll(fds, 2, -1) < 0 && errno != EINTR) break;
    if (fds[0].fd >= 0 && fds[0].revents != 0 && !pump(0, fd)) {
      shutdown(fd, SHUT_WR);
      fds[0].fd = -1;
    }
    if (fds[1].fd >= 0 && fds[1].revents != 0 && !pump(fd, 1)) {
      close(1);
      fds[1].fd = -1;
    }
  }
  close(fd);
  return 0;
}
