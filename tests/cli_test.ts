/** Units: command line and environment parsing. */

import { assertEquals, assertMatch, assertThrows } from "./assert.ts";
import { DENIT, run } from "./helpers.ts";
import { type Config, DEFAULT_KILL_AFTER_MS, parseInvocation } from "../src/supervise/cli.ts";
import { parseListenAddress } from "../src/common/address.ts";
import { parseDuration } from "../src/common/duration.ts";
import { UsageError } from "../src/common/errors.ts";
import { parseSignal, signalName } from "../src/common/signals.ts";

function config(args: string[], env: Record<string, string> = {}): Config {
  const invocation = parseInvocation(args, env);
  if (invocation.kind !== "run") throw new Error(`not a run: ${invocation.kind}`);
  return invocation.config;
}

Deno.test("options end at -- or at the first word that is not an option", () => {
  assertEquals(config(["ls", "-l", "--", "x"]).command, ["ls", "-l", "--", "x"]);
  assertEquals(config(["-g", "--", "-v"]).command, ["-v"]);
  assertEquals(config(["-gs", "true"]).group, true);
  assertEquals(config(["-gs", "true"]).subreaper, true);
  assertEquals(config(["-", "x"]).command, ["-", "x"]);
});

Deno.test("defaults", () => {
  const c = config(["true"]);
  assertEquals(c.group, false);
  assertEquals(c.subreaper, false);
  assertEquals(c.graceMs, null);
  assertEquals(c.killAfterMs, DEFAULT_KILL_AFTER_MS);
  assertEquals(c.pdeathsig, null);
  assertEquals(c.logLevel, "warn");
  assertEquals(c.health, null);
  assertEquals([...c.rewrite], []);
});

Deno.test("values: separate, attached and with =", () => {
  assertEquals([...config(["-r", "TERM:QUIT", "true"]).rewrite], [[15, 3]]);
  assertEquals([...config(["-rTERM:QUIT", "true"]).rewrite], [[15, 3]]);
  assertEquals([...config(["--rewrite=15:3", "-r", "hup:0", "true"]).rewrite], [[15, 3], [1, 0]]);
  assertEquals(config(["--grace=1.5s", "true"]).graceMs, 1500);
  assertEquals(config(["-p", "SIGKILL", "true"]).pdeathsig, 9);
  assertEquals([...config(["-e", "1", "-e", "143", "true"]).remapExit], [1, 143]);
});

Deno.test("-v raises the log level, repeatable, capped at debug", () => {
  assertEquals(config(["-v", "true"]).logLevel, "info");
  assertEquals(config(["-vvv", "true"]).logLevel, "debug");
  assertEquals(config(["-v", "true"], { DENIT_LOG_LEVEL: "error" }).logLevel, "warn");
});

Deno.test("every flag has a DENIT_* twin, and flags win", () => {
  const env = {
    DENIT_GROUP: "1",
    DENIT_SUBREAPER: "true",
    DENIT_REWRITE: "TERM:QUIT, USR1:USR2",
    DENIT_REMAP_EXIT: "3 4",
    DENIT_PDEATHSIG: "TERM",
    DENIT_GRACE: "2s",
    DENIT_KILL_AFTER: "0",
    DENIT_LOG_LEVEL: "debug",
    DENIT_HEALTH_ADDR: ":9000",
  };
  const c = config(["true"], env);
  assertEquals(c.group, true);
  assertEquals(c.subreaper, true);
  assertEquals([...c.rewrite], [[15, 3], [10, 12]]);
  assertEquals([...c.remapExit], [3, 4]);
  assertEquals(c.pdeathsig, 15);
  assertEquals(c.graceMs, 2000);
  assertEquals(c.killAfterMs, 0);
  assertEquals(c.logLevel, "debug");
  assertEquals(c.health, { hostname: "::", port: 9000 });
  const flags = config(["-r", "HUP:0", "-e", "9", "-p", "KILL", "--grace", "1s", "true"], env);
  assertEquals([...flags.rewrite], [[1, 0]]);
  assertEquals([...flags.remapExit], [9]);
  assertEquals(flags.pdeathsig, 9);
  assertEquals(flags.graceMs, 1000);
  assertEquals(config(["true"], { DENIT_HEALTH: "1" }).health, { hostname: "::", port: 7623 });
  assertEquals(config(["true"], { DENIT_GROUP: "0" }).group, false);
});

Deno.test("lifecycle controls: flags, DENIT_* twins, defaults that change nothing", () => {
  const plain = config(["true"]);
  assertEquals(
    [plain.shutdownDelayMs, plain.timeoutMs, plain.user, plain.readyWhen, plain.waitDescendants],
    [0, null, null, null, false],
  );
  const env = {
    DENIT_SHUTDOWN_DELAY: "5s",
    DENIT_TIMEOUT: "1h",
    DENIT_USER: "1001:123",
    DENIT_READY_WHEN: "http:8080/healthz",
    DENIT_HEALTH: "1",
    DENIT_WAIT_DESCENDANTS: "yes",
  };
  const c = config(["true"], env);
  assertEquals(c.shutdownDelayMs, 5000);
  assertEquals(c.timeoutMs, 3_600_000);
  assertEquals(c.user, "1001:123");
  assertEquals(c.readyWhen, { kind: "http", port: 8080, path: "/healthz" });
  assertEquals(c.waitDescendants, true);
  const flags = config([
    "--shutdown-delay",
    "1s",
    "--timeout=30s",
    "-u",
    "nobody",
    "--ready-when",
    "notify",
    "true",
  ], env);
  assertEquals([flags.shutdownDelayMs, flags.timeoutMs, flags.user], [1000, 30_000, "nobody"]);
  assertEquals(flags.readyWhen, { kind: "notify" });
  assertEquals(config(["--ready-when", "tcp:5432", "--health", "x"]).readyWhen, {
    kind: "tcp",
    port: 5432,
  });
  assertEquals(config(["--ready-when", "file:/tmp/up", "--health", "x"]).readyWhen, {
    kind: "file",
    path: "/tmp/up",
  });
  assertEquals(config(["--ready-when", "http:80", "--health", "x"]).readyWhen, {
    kind: "http",
    port: 80,
    path: "/",
  });
  for (
    const args of [
      ["--ready-when", "tcp:1", "x"],
      ["--health", "--ready-when", "tcp:0", "x"],
      ["--health", "--ready-when", "http:80/a b", "x"],
      ["--health", "--ready-when", "file:", "x"],
      ["--timeout", "soon", "x"],
      ["--shutdown-delay", "-1s", "x"],
    ]
  ) {
    assertThrows(() => parseInvocation(args, {}), UsageError, /^[A-Z][^\n]*[^.]$/);
  }
});

Deno.test("diagnosis options: --termination-log, -w, --log-format and their twins", () => {
  const plain = config(["true"]);
  assertEquals([plain.terminationLog, plain.warnReaped, plain.logFormat], [null, false, "text"]);
  const env = {
    DENIT_TERMINATION_LOG: "/tmp/why",
    DENIT_WARN_REAPED: "1",
    DENIT_LOG_FORMAT: "JSON",
  };
  const c = config(["true"], env);
  assertEquals([c.terminationLog, c.warnReaped, c.logFormat], ["/tmp/why", true, "json"]);
  const flags = config(["-w", "--log-format", "text", "--termination-log=/x", "true"]);
  assertEquals([flags.terminationLog, flags.warnReaped, flags.logFormat], ["/x", true, "text"]);
  assertThrows(() => parseInvocation(["--log-format", "xml", "x"], {}), UsageError, /text or json/);
});

Deno.test("help and version win over everything else", () => {
  assertEquals(parseInvocation(["-v", "-h"], {}).kind, "help");
  assertEquals(parseInvocation(["--version"], {}).kind, "version");
  assertEquals(parseInvocation(["-h", "--", "x"], {}).kind, "help");
});

Deno.test("bad input is a UsageError with a one-line message", () => {
  const cases: Array<[string[], Record<string, string>]> = [
    [[], {}],
    [["--nope"], {}],
    [["--grace"], {}],
    [["--grace", "1d", "x"], {}],
    [["-e", "-1", "x"], {}],
    [["x"], { DENIT_SUBREAPER: "2" }],
    [["x"], { DENIT_REWRITE: "TERM" }],
  ];
  for (const [args, env] of cases) {
    assertThrows(() => parseInvocation(args, env), UsageError, /^[A-Z][^\n]*[^.]$/);
  }
  // The spool is trusted part by part from /: a relative one would be checked in the wrong place.
  assertThrows(
    () => parseInvocation(["x"], { DENIT_JOBS_SPOOL: "spool", DENIT_JOBS_SOCKET: "/run/j.sock" }),
    UsageError,
    /^Invalid spool "spool": use an absolute path, like \/tmp\/denit-jobs \(from DENIT_JOBS_SPOOL\)$/,
  );
});

Deno.test("durations", () => {
  assertEquals(parseDuration("500ms"), 500);
  assertEquals(parseDuration("10s"), 10_000);
  assertEquals(parseDuration("2"), 2000);
  assertEquals(parseDuration("1.5m"), 90_000);
  assertEquals(parseDuration("0"), 0);
  assertEquals(parseDuration("24h"), 86_400_000);
  assertEquals(parseDuration("1.5h"), 5_400_000);
  assertThrows(() => parseDuration("10 minutes"), RangeError, /use a number with ms, s, m or h/);
  assertThrows(() => parseDuration("25h"), RangeError, /at most 24h/);
  assertThrows(() => parseDuration("1441m"), RangeError, /at most 24h/);
  assertEquals(parseDuration("1ms"), 1);
  for (const below of ["0.4ms", "0.0001s", "0.9ms"]) {
    assertThrows(() => parseDuration(below), RangeError, /the shortest is 1ms/);
  }
});

Deno.test("a duration below a millisecond is refused (exit 2), not read as 0", async () => {
  for (const option of ["--timeout", "--grace"]) {
    const result = await run([...DENIT, "-s", option, "0.4ms", "--", "true"]);
    assertEquals(result.code, 2);
    assertMatch(result.stderr, /^denit: Invalid duration "0\.4ms": the shortest is 1ms \(from --/);
  }
});

Deno.test("listen addresses: host:port, :port, [v6]:port", () => {
  assertEquals(parseListenAddress("127.0.0.1:80"), { hostname: "127.0.0.1", port: 80 });
  assertEquals(parseListenAddress(":7623"), { hostname: "::", port: 7623 });
  assertEquals(parseListenAddress("0.0.0.0:7623"), { hostname: "0.0.0.0", port: 7623 });
  assertEquals(parseListenAddress("[::1]:8080"), { hostname: "::1", port: 8080 });
  assertEquals(parseListenAddress("[::]:0"), { hostname: "::", port: 0 });
  assertEquals(parseListenAddress("localhost:1"), { hostname: "localhost", port: 1 });
  for (const bad of ["7623", "::1:80", "host:", "h:99999", "[::1]", "a b:1"]) {
    assertThrows(() => parseListenAddress(bad), RangeError, /Invalid address/);
  }
});

Deno.test("signal names and numbers", () => {
  assertEquals(parseSignal("TERM"), 15);
  assertEquals(parseSignal("sigterm"), 15);
  assertEquals(parseSignal("SIGWINCH"), 28);
  assertEquals(parseSignal("34"), 34);
  assertEquals(signalName(15), "SIGTERM");
  assertEquals(signalName(40), "SIGRTMIN+6");
  assertEquals(signalName(32), "SIG32");
  assertThrows(() => parseSignal("0"), RangeError);
  assertThrows(() => parseSignal("65"), RangeError);
  assertThrows(() => parseSignal("TERMINATE"), RangeError, /unknown name/);
});

Deno.test("errors name where the value came from: the flag or the variable", () => {
  assertEquals(
    message(["x"], { DENIT_GRACE: "abc" }),
    'Invalid duration "abc": use a number with ms, s, m or h, like "10s" (a bare number is seconds) (from DENIT_GRACE)',
  );
  assertEquals(message(["--grace", "abc", "x"], {}).endsWith("(from --grace)"), true);
  assertEquals(
    message(["x"], { DENIT_HEALTH_ADDR: "nohost" }).endsWith("(from DENIT_HEALTH_ADDR)"),
    true,
  );
  assertEquals(
    message(["x"], { DENIT_GROUP: "maybe" }),
    'Invalid value "maybe": use 1/true/yes/on or 0/false/no/off (from DENIT_GROUP)',
  );
  assertEquals(
    message(["--nofile", "lots", "x"], {}).startsWith('Invalid open-file limit "lots"'),
    true,
  );
});

/** The one-line error an invocation gets, or "no error". */
function message(args: string[], env: Record<string, string>): string {
  try {
    parseInvocation(args, env);
  } catch (err: unknown) {
    return err instanceof UsageError ? err.message : String(err);
  }
  return "no error";
}

Deno.test("a misspelt DENIT_ variable is warned about with the closest known name", () => {
  const c = config(["true"], { DENIT_GRACEE: "1s", DENIT_ZZZZZZZZZZZZZZZZ: "1", DENIT_GROUP: "1" });
  assertEquals(c.warnings, [
    "unknown variable DENIT_GRACEE is ignored; did you mean DENIT_GRACE?",
    "unknown variable DENIT_ZZZZZZZZZZZZZZZZ is ignored",
  ]);
  assertEquals(config(["true"], { DENIT_GROUP: "1" }).warnings, []);
});

Deno.test("tini's variables work as aliases: switching from tini changes only the binary", () => {
  const c = config(["true"], {
    TINI_SUBREAPER: "",
    TINI_KILL_PROCESS_GROUP: "1",
    TINI_VERBOSITY: "3",
  });
  assertEquals([c.subreaper, c.group, c.logLevel], [true, true, "debug"]);
  assertEquals(config(["true"], { TINI_VERBOSITY: "0" }).logLevel, "error");
  // denit's own variable wins over tini's.
  assertEquals(config(["true"], { TINI_VERBOSITY: "3", DENIT_LOG_LEVEL: "warn" }).logLevel, "warn");
});

Deno.test("--nofile: a number, max, or the default", () => {
  assertEquals(config(["true"]).fileLimit, { kind: "default" });
  assertEquals(config(["--nofile", "max", "true"]).fileLimit, { kind: "max" });
  assertEquals(config(["true"], { DENIT_NOFILE: "4096" }).fileLimit, {
    kind: "value",
    value: 4096,
  });
});

Deno.test("--oom-score-adj: -1000 to 1000, or off", () => {
  assertEquals(config(["true"]).oomScoreAdj, null);
  assertEquals(config(["--oom-score-adj", "500", "true"]).oomScoreAdj, 500);
  assertEquals(config(["true"], { DENIT_OOM_SCORE_ADJ: "-1000" }).oomScoreAdj, -1000);
  for (const bad of ["1001", "-1001", "high", "1.5"]) {
    assertEquals(
      message(["--oom-score-adj", bad, "x"], {}),
      `Invalid oom_score_adj "${bad}": use a whole number from -1000 to 1000 (from --oom-score-adj)`,
    );
  }
});

Deno.test("--stop-signal: a signal denit passes on, by name or number, or none", () => {
  assertEquals(config(["true"]).stopSignal, null);
  assertEquals(config(["--stop-signal", "USR1", "true"]).stopSignal, 10);
  assertEquals(config(["true"], { DENIT_STOP_SIGNAL: "SIGQUIT" }).stopSignal, 3);
  assertEquals(config(["--stop-signal=12", "true"], { DENIT_STOP_SIGNAL: "HUP" }).stopSignal, 12);
  assertEquals(
    message(["--stop-signal", "KILL", "x"], {}),
    'Invalid stop signal "KILL": denit never passes SIGKILL on (cannot be caught) (from --stop-signal)',
  );
  assertEquals(
    message(["x"], { DENIT_STOP_SIGNAL: "SIGCHLD" }).replace(/ \(.*\) /, " (…) "),
    'Invalid stop signal "SIGCHLD": denit never passes SIGCHLD on (…) (from DENIT_STOP_SIGNAL)',
  );
  assertEquals(
    message(["--stop-signal", "NOPE", "x"], {}).startsWith("Invalid signal"),
    true,
    message(["--stop-signal", "NOPE", "x"], {}),
  );
});
