/*
 * `denit probe [--health-addr ADDR] [--path PATH] [--timeout DURATION]`: asks denit's health
 * endpoint one question and exits 0 for a 2xx answer, 1 for anything else, with one line: a
 * HEALTHCHECK or an exec probe that needs no shell, no curl and no runtime. One GET over a plain
 * TCP connection; the endpoint answers one request a connection and closes, so the answer is
 * read to its end. Addresses and durations are read as denit reads them (src/common/address.ts,
 * duration.ts; tests/probe_test.ts holds both to the same cases).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "launch.h"

#define MAX_ANSWER (64 * 1024)
#define MAX_DURATION_MS 86400000LL

static const char USAGE[] =
    "Usage: denit probe [--health-addr ADDR] [--path PATH] [--timeout DURATION]";

struct request {
  char host[256]; /* "::" for every address */
  int port;
  char path[1024];
  long long timeout_ms;
};

static int usage(const char *message) {
  char shown[2400];
  fprintf(stderr, "denit probe: %s\n%s\n", visible(shown, sizeof shown, message), USAGE);
  return 2;
}

/* Trims blanks at both ends, in place. */
static char *trim(char *text) {
  while (isspace((unsigned char)*text)) text++;
  char *end = text + strlen(text);
  while (end > text && isspace((unsigned char)end[-1])) *--end = '\0';
  return text;
}

/* "HOST:PORT", ":PORT" or "[V6]:PORT"; 0, -1, or -2 for a HOST that is a name (no resolver). */
static int parse_address(const char *given, struct request *r) {
  char text[300];
  snprintf(text, sizeof text, "%s", given);
  char *s = trim(text), *colon = strrchr(s, ':');
  if (colon == NULL || colon[1] == '\0' || strlen(colon + 1) > 5) return -1;
  for (char *c = colon + 1; *c != '\0'; c++) {
    if (!isdigit((unsigned char)*c)) return -1;
  }
  r->port = atoi(colon + 1);
  *colon = '\0';
  if (r->port > 65535) return -1;
  if (s[0] == '[') {
    size_t n = strlen(s);
    if (n < 3 || s[n - 1] != ']') return -1;
    s[n - 1] = '\0';
    s++;
    if (strspn(s, "0123456789abcdefABCDEF:.") != strlen(s)) return -1;
  } else if (strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-") !=
             strlen(s)) {
    return -1;
  }
  if (strcmp(s, "localhost") == 0) s = "127.0.0.1";
  unsigned char ip[sizeof(struct in6_addr)];
  if (*s != '\0' && inet_pton(AF_INET, s, ip) != 1 && inet_pton(AF_INET6, s, ip) != 1) return -2;
  snprintf(r->host, sizeof r->host, "%s", *s == '\0' ? "::" : s);
  return 0;
}

/* A number with ms, s, m or h (bare: seconds); -1 if it is not one, -2 past 24 hours. */
static long long parse_duration(const char *given) {
  char text[64];
  snprintf(text, sizeof text, "%s", given);
  char *s = trim(text), *end;
  if (!isdigit((unsigned char)*s)) return -1;
  double value = strtod(s, &end);
  if (end[-1] == '.') return -1; /* "1." is no number here */
  double unit = strcmp(end, "ms") == 0 ? 1
                : strcmp(end, "") == 0 || strcmp(end, "s") == 0 ? 1000
                : strcmp(end, "m") == 0 ? 60000
                : strcmp(end, "h") == 0 ? 3600000
                                        : -1;
  if (unit < 0 || strchr(s, 'e') != NULL || strchr(s, 'x') != NULL) return -1;
  long long ms = (long long)(value * unit + 0.5);
  return ms > MAX_DURATION_MS ? -2 : ms;
}

/* "1.5s", "300ms", "2m": as denit writes a duration (formatDuration). */
static void format_duration(long long ms, char *out, size_t size) {
  if (ms > 0 && ms % 3600000 == 0) snprintf(out, size, "%lldh", ms / 3600000);
  else if (ms > 0 && ms % 60000 == 0) snprintf(out, size, "%lldm", ms / 60000);
  else if (ms % 1000 == 0) snprintf(out, size, "%llds", ms / 1000);
  else if (ms >= 10000) {
    snprintf(out, size, "%lld.%03lld", ms / 1000, ms % 1000);
    size_t n = strlen(out);
    while (out[n - 1] == '0') out[--n] = '\0';
    snprintf(out + n, size - n, "s");
  } else {
    snprintf(out, size, "%lldms", ms);
  }
}

static long long now_ms(void) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (long long)now.tv_sec * 1000 + now.tv_nsec / 1000000;
}

/* Waits for `events` on fd until the deadline: 1, 0 at the deadline. */
static int wait_for(int fd, short events, long long deadline) {
  struct pollfd p = {fd, events, 0};
  for (;;) {
    long long left = deadline - now_ms();
    if (left <= 0) return 0;
    int n = poll(&p, 1, (int)left);
    if (n > 0) return 1;
    if (n < 0 && errno != EINTR) return 1; /* the call that follows says what is wrong */
  }
}

/* Connects to one address within the deadline: the socket, or -1 (errno set; ETIMEDOUT). */
static int connect_to(const char *host, int port, long long deadline) {
  struct sockaddr_storage address = {0};
  socklen_t length;
  struct sockaddr_in *v4 = (struct sockaddr_in *)&address;
  struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&address;
  if (inet_pton(AF_INET, host, &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons((unsigned short)port);
    length = sizeof *v4;
  } else if (inet_pton(AF_INET6, host, &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons((unsigned short)port);
    length = sizeof *v6;
  } else {
    errno = EADDRNOTAVAIL;
    return -1;
  }
  int fd = socket(address.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return -1;
  if (connect(fd, (struct sockaddr *)&address, length) != 0 && errno != EINPROGRESS) {
    int failure = errno;
    close(fd);
    errno = failure;
    return -1;
  }
  if (!wait_for(fd, POLLOUT, deadline)) {
    close(fd);
    errno = ETIMEDOUT;
    return -1;
  }
  int failure = 0;
  socklen_t size = sizeof failure;
  getsockopt(fd, SOL_SOCKET, SO_ERROR, &failure, &size);
  if (failure != 0) {
    close(fd);
    errno = failure;
    return -1;
  }
  return fd;
}

/* The question and its answer: the exit code; `line` says what happened. */
static int ask(const struct request *r, char *line, size_t size) {
  /* A wildcard address is reached on loopback: IPv4 first (a "::" listener takes it too). */
  const char *targets[2] = {r->host, NULL};
  if (strcmp(r->host, "::") == 0) targets[0] = "127.0.0.1", targets[1] = "::1";
  else if (strcmp(r->host, "0.0.0.0") == 0) targets[0] = "127.0.0.1";
  else if (strcmp(r->host, "localhost") == 0) targets[0] = "127.0.0.1", targets[1] = "::1";
  int v6 = strchr(targets[0], ':') != NULL;
  char url[1400], timeout[32];
  snprintf(url, sizeof url, "http://%s%s%s:%d%s", v6 ? "[" : "", targets[0], v6 ? "]" : "",
           r->port, r->path);
  format_duration(r->timeout_ms, timeout, sizeof timeout);
  long long started = now_ms(), deadline = started + r->timeout_ms;
  int fd = connect_to(targets[0], r->port, deadline), first = errno;
  if (fd < 0 && targets[1] != NULL) fd = connect_to(targets[1], r->port, deadline);
  if (fd < 0) {
    /* The first failure is the one to tell: a host without IPv6 fails ::1 for another reason. */
    if (first == ETIMEDOUT) snprintf(line, size, "%s: no answer within %s", url, timeout);
    else if (first == ECONNREFUSED) snprintf(line, size, "%s: connection refused", url);
    else snprintf(line, size, "%s: %s", url, strerror(first));
    return 1;
  }
  char question[1400];
  int n = snprintf(question, sizeof question,
                   "GET %s HTTP/1.1\r\nhost: %s%s%s:%d\r\nuser-agent: denit-probe\r\n"
                   "connection: close\r\n\r\n",
                   r->path, v6 ? "[" : "", targets[0], v6 ? "]" : "", r->port);
  static char answer[MAX_ANSWER + 1];
  size_t got = 0;
  int done = write_all(fd, question, (size_t)n) != 0;
  while (!done && got < MAX_ANSWER) {
    if (!wait_for(fd, POLLIN, deadline)) {
      close(fd);
      snprintf(line, size, "%s: no answer within %s", url, timeout);
      return 1;
    }
    ssize_t m = read(fd, answer + got, MAX_ANSWER - got);
    if (m < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (m <= 0) break;
    got += (size_t)m;
  }
  close(fd);
  answer[got] = '\0';
  int status = 0, at = 0;
  if (sscanf(answer, "HTTP/1.%*[01] %3d%n", &status, &at) != 1 || at != 12) {
    snprintf(line, size, "%s: the answer is not HTTP/1.1", url);
    return 1;
  }
  char *reason = answer + 9, *eol = strpbrk(reason, "\r\n");
  if (eol != NULL) *eol = '\0';
  char *body = eol == NULL ? NULL : strstr(eol + 1, "\r\n\r\n");
  body = body == NULL ? (char *)"" : body + 4;
  body[strcspn(body, "\n")] = '\0';
  body = trim(body);
  if (strlen(body) > 200) body[200] = '\0';
  snprintf(line, size, "%s: %s in %lld ms%s%s", url, trim(reason), now_ms() - started,
           *body == '\0' ? "" : ": ", body);
  return status >= 200 && status < 300 ? 0 : 1;
}

int probe_main(int argc, char **argv) {
  struct request r = {.host = "::", .port = 7623, .path = "/healthz", .timeout_ms = 5000};
  const char *addr = NULL, *addr_from = "DENIT_HEALTH_ADDR", *path = NULL, *timeout = NULL;
  char message[600];
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i], *value = NULL;
    size_t n = strcspn(arg, "=");
    if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
      printf("%s\n\nSends GET PATH (default /healthz) to denit's health endpoint and exits 0 "
             "when it\nanswers 2xx, 1 otherwise (refused, timed out, or another status), with "
             "one line\nsaying what it got; 2 for a usage error. For HEALTHCHECK CMD [\"/denit\", "
             "\"probe\"] and\nexec probes in images without a shell.\n\n"
             "  --health-addr ADDR   where the endpoint listens      DENIT_HEALTH_ADDR=ADDR\n"
             "                       (default :7623; a wildcard host is reached on loopback)\n"
             "  --path PATH          the path to ask (/healthz, /readyz, /livez)\n"
             "  --timeout DURATION   for the connection and the answer (default 5s)\n",
             USAGE);
      return 0;
    }
    if (arg[0] != '-') {
      snprintf(message, sizeof message,
               "Unexpected argument \"%s\": probe takes options only", arg);
      return usage(message);
    }
    const char *names[] = {"--health-addr", "--path", "--timeout"};
    int which = -1;
    for (int k = 0; k < 3; k++) {
      if (strlen(names[k]) == n && strncmp(arg, names[k], n) == 0) which = k;
    }
    if (which < 0) {
      snprintf(message, sizeof message, "Unknown option \"%.*s\"", (int)n, arg);
      return usage(message);
    }
    if (arg[n] == '=') value = arg + n + 1;
    else if (i + 1 < argc) value = argv[++i];
    else {
      snprintf(message, sizeof message, "Option \"%s\" needs a value", arg);
      return usage(message);
    }
    if (which == 0) addr = value, addr_from = "--health-addr";
    else if (which == 1) path = value;
    else timeout = value;
  }
  if (addr == NULL) addr = getenv("DENIT_HEALTH_ADDR");
  char check[1100];
  int parsed = addr != NULL && (snprintf(check, sizeof check, "%s", addr), *trim(check) != '\0')
                   ? parse_address(addr, &r)
                   : 0;
  if (parsed != 0) {
    snprintf(message, sizeof message,
             parsed == -2 ? "Invalid address \"%s\": HOST must be an IP address such as 127.0.0.1 "
                            "or ::1, or localhost (the probe resolves no names) (from %s)"
                          : "Invalid address \"%s\": use HOST:PORT, :PORT or [V6]:PORT (from %s)",
             addr, addr_from);
    return usage(message);
  }
  if (path != NULL && (snprintf(check, sizeof check, "%s", path), *trim(check) != '\0')) {
    const char *p = trim(check);
    int ok = p[0] == '/';
    for (const char *c = p; ok && *c != '\0'; c++) ok = *c >= 0x21 && *c <= 0x7e;
    if (!ok) {
      snprintf(message, sizeof message,
               "Invalid path \"%s\": use an absolute path like /healthz (from --path)", path);
      return usage(message);
    }
    snprintf(r.path, sizeof r.path, "%s", p);
  }
  if (timeout != NULL && (snprintf(check, sizeof check, "%s", timeout), *trim(check) != '\0')) {
    long long ms = parse_duration(timeout);
    if (ms == -1) {
      snprintf(message, sizeof message,
               "Invalid duration \"%s\": use a number with ms, s, m or h, like \"10s\" (a bare "
               "number is seconds) (from --timeout)",
               timeout);
    } else if (ms == -2) {
      snprintf(message, sizeof message, "Invalid duration \"%s\": at most 24h (from --timeout)",
               timeout);
    } else if (ms == 0) {
      snprintf(message, sizeof message,
               "Invalid timeout \"%s\": it must be above 0 (from --timeout)", timeout);
    }
    if (ms <= 0) return usage(message);
    r.timeout_ms = ms;
  }
  char line[2000];
  int code = ask(&r, line, sizeof line);
  fprintf(code == 0 ? stdout : stderr, "denit probe: %s\n", line);
  return code;
}
