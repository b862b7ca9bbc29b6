/**
 * Lifecycle controls against the real denit, as PID 1 and as a subreaper: --shutdown-delay,
 * --timeout, --user, --ready-when (tcp, http, file, notify with redis-server and a plain
 * datagram sender) and --wait-descendants. Waits are on events (lines, /proc, HTTP answers);
 * the timing assertions check the documented bounds.
 */

import { assertEquals, assertMatch, assertOk } from "./assert.ts";
import {
  DENIT,
  denitArgv,
  denitForAnyUser,
  denitPid,
  DENO,
  ECHO,
  exists,
  fifoGate,
  freePort,
  hostPid,
  type Mode,
  MODES,
  PIDNS,
  processState,
  rawHttp,
  run,
  Running,
  waitUntil,
} from "./helpers.ts";
import { resolveUser } from "../src/common/accounts.ts";

/** One GET over HTTP/1.0: status and body. */
async function get(port: number, path: string): Promise<{ status: number; body: string }> {
  const text = await rawHttp(port, `GET ${path} HTTP/1.0\r\n\r\n`, { timeoutMs: 3000 });
  const status = Number(/^HTTP\/1\.\d (\d{3})/.exec(text)?.[1] ?? "0");
  return { status, body: text.slice(text.indexOf("\r\n\r\n") + 4) };
}

/** Polls an async condition until it holds (bounded). */
async function eventually(
  predicate: () => Promise<boolean>,
  what: string,
  timeoutMs = 10_000,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  const attempt = async () => {
    try {
      return await predicate();
    } catch {
      return false; // not listening yet, or a reset: try again
    }
  };
  while (!(await attempt())) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms: ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

/** denit -s with the health endpoint on 127.0.0.1:`port`, then `args`. */
function withHealth(port: number, args: readonly string[]): Running {
  return new Running([...DENIT, "-s", "--health-addr", `127.0.0.1:${port}`, ...args]);
}

const readyz = async (port: number) => (await get(port, "/readyz")).status;
const status = async (port: number) =>
  JSON.parse((await get(port, "/status")).body) as Record<string, Record<string, unknown>>;

// ---------------------------------------------------------------- --shutdown-delay

for (const mode of MODES) {
  Deno.test(`${mode}: --shutdown-delay: not ready at once, TERM reaches the child after the delay`, async () => {
    const port = freePort();
    const proc = new Running(denitArgv(mode, [
      "-v",
      "--health-addr",
      `127.0.0.1:${port}`,
      "--shutdown-delay",
      "1500ms",
      "--",
      ...ECHO,
    ]));
    try {
      await proc.waitFor(/^ready /);
      await eventually(async () => await readyz(port) === 200, "ready before the stop");
      const sent = Date.now();
      Deno.kill(denitPid(proc, mode), "SIGTERM");
      // Readiness fails at once, while the child has heard nothing yet.
      await eventually(async () => await readyz(port) === 503, "not ready after TERM", 1000);
      const notReadyAfter = Date.now() - sent;
      assertOk(notReadyAfter < 1000, `readiness failed ${notReadyAfter} ms after TERM`);
      const body = (await get(port, "/readyz")).body;
      assertMatch(body, /shutdown-delay/);
      const doc = await status(port);
      assertEquals(doc.stopping?.cause, "signal");
      assertOk(typeof doc.stopping?.drainingUntil === "string", JSON.stringify(doc));
      assertEquals(doc.settings?.shutdownDelaySeconds, 1.5);
      assertOk(!proc.lines.includes("SIGTERM"), "the child got TERM before the delay");
      await proc.waitFor(/^SIGTERM$/, { timeoutMs: 5000 });
      const forwardedAfter = Date.now() - sent;
      assertOk(forwardedAfter >= 1400, `TERM reached the child after ${forwardedAfter} ms`);
      assertOk(forwardedAfter < 3000, `TERM reached the child after ${forwardedAfter} ms`);
      const result = await proc.status();
      assertEquals(result.code, 0, result.stderr);
      assertMatch(result.stderr, /SIGTERM held for the shutdown delay of 1500ms/);
    } finally {
      await proc.stop();
    }
  });

  Deno.test(`${mode}: --shutdown-delay: a second stop signal during the delay goes through at once`, async () => {
    const proc = new Running(denitArgv(mode, ["--shutdown-delay", "20s", "--", ...ECHO]));
    try {
      await proc.waitFor(/^ready /);
      const first = Date.now();
      Deno.kill(denitPid(proc, mode), "SIGTERM");
      // The first one is held: wait until denit says so, then send the second.
      await waitUntil(() => Date.now() - first > 200, "a moment for the first TERM");
      assertOk(!proc.lines.includes("SIGTERM"), "the first TERM was not held");
      const second = Date.now();
      Deno.kill(denitPid(proc, mode), "SIGTERM");
      await proc.waitFor(/^SIGTERM$/, { timeoutMs: 3000 });
      assertOk(Date.now() - second < 2000, "the second TERM was held too");
      const result = await proc.status();
      assertEquals(result.code, 0, result.stderr);
      assertEquals(proc.lines.filter((l) => l === "SIGTERM").length, 1, proc.lines.join("|"));
    } finally {
      await proc.stop();
    }
  });

  Deno.test(`${mode}: --shutdown-delay + --grace: a child that ignores TERM is gone inside delay + grace + 2 s`, async () => {
    // signal_echo with exit signal NONE catches TERM and carries on: only SIGKILL ends it.
    const proc = new Running(denitArgv(mode, [
      "--shutdown-delay",
      "1s",
      "--grace",
      "1s",
      "--",
      ...ECHO,
      "NONE",
    ]));
    try {
      await proc.waitFor(/^ready /);
      const sent = Date.now();
      Deno.kill(denitPid(proc, mode), "SIGTERM");
      const result = await proc.status(10_000);
      const took = Date.now() - sent;
      assertEquals(result.code, 137, result.stderr);
      assertOk(proc.lines.includes("SIGTERM"), "the child never got TERM");
      assertOk(took >= 1900, `stopped after ${took} ms: the delay or grace was cut short`);
      assertOk(took < 1000 + 1000 + 2000, `stopped after ${took} ms: over the documented sum`);
      assertMatch(result.stderr, /grace period of 1s expired: SIGKILL to/);
    } finally {
      await proc.stop();
    }
  });
}

// ---------------------------------------------------------------- --drain-while

/** denit with a health endpoint, a shutdown delay of `delay` and `--drain-while check`. */
function draining(mode: Mode, port: number, delay: string, check: string): Running {
  return new Running(denitArgv(mode, [
    "-v",
    "--health-addr",
    `127.0.0.1:${port}`,
    "--shutdown-delay",
    delay,
    "--drain-while",
    check,
    "--",
    ...ECHO,
  ]));
}

/** Sends TERM and waits until /readyz says the stop is held; the child has heard nothing. */
async function holdStop(proc: Running, mode: Mode, port: number): Promise<void> {
  await proc.waitFor(/^ready /);
  await eventually(async () => await readyz(port) === 200, "ready before the stop");
  Deno.kill(denitPid(proc, mode), "SIGTERM");
  await eventually(async () => await readyz(port) === 503, "not ready after TERM", 2000);
  assertOk(typeof (await status(port)).stopping?.drainingUntil === "string");
}

/** The check holds for a while (four checks), and the child still has not heard of the stop. */
async function stillHeld(proc: Running): Promise<void> {
  await new Promise((resolve) => setTimeout(resolve, 1000));
  assertOk(!proc.lines.includes("SIGTERM"), "the stop went on while the check held");
}

/**
 * The check stops holding now: TERM reaches the child within 2 s (checks every 250 ms; the rest
 * is slack for a loaded machine, against the 20 s delay), and denit exits 0.
 */
async function endsWithin(proc: Running, release: () => unknown, found: RegExp): Promise<void> {
  const released = Date.now();
  await release();
  await proc.waitFor(/^SIGTERM$/, { timeoutMs: 5000 });
  const after = Date.now() - released;
  assertOk(after < 2000, `TERM reached the child ${after} ms after the work ended`);
  const result = await proc.status();
  assertEquals(result.code, 0, result.stderr);
  assertMatch(result.stderr, /SIGTERM held while .* holds, at most 20s: not ready meanwhile/);
  assertMatch(result.stderr, found);
}

for (const mode of MODES) {
  Deno.test(`${mode}: --drain-while file: the stop waits while the file exists, then goes on at once`, async () => {
    const port = freePort();
    const dir = await Deno.makeTempDir({ prefix: "denit-drain-" });
    await Deno.writeTextFile(`${dir}/busy`, "");
    const proc = draining(mode, port, "20s", `file:${dir}/busy`);
    try {
      await holdStop(proc, mode, port);
      assertEquals((await status(port)).settings?.drainWhile, `file:${dir}/busy`);
      await stillHeld(proc);
      await endsWithin(proc, () => Deno.remove(`${dir}/busy`), /no longer holds \(no such file\)/);
    } finally {
      await proc.stop();
      await Deno.remove(dir, { recursive: true });
    }
  });
}

Deno.test("--drain-while tcp: the stop waits while the port accepts; nothing listening: at once", async () => {
  const port = freePort();
  const app = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const accepted: Deno.Conn[] = [];
  void (async () => {
    for await (const conn of app) accepted.push(conn);
  })();
  const proc = draining("subreaper", port, "20s", `tcp:${app.addr.port}`);
  try {
    await holdStop(proc, "subreaper", port);
    await stillHeld(proc);
    await endsWithin(proc, () => app.close(), /no longer holds \(connection refused\)/);
  } finally {
    await proc.stop();
    for (const conn of accepted) conn.close();
  }
  // No work in progress when the stop comes: it goes on at the first check.
  const idle = draining("subreaper", port, "20s", `tcp:${freePort()}`);
  try {
    await idle.waitFor(/^ready /);
    const sent = Date.now();
    idle.kill("SIGTERM");
    await idle.waitFor(/^SIGTERM$/, { timeoutMs: 5000 });
    assertOk(Date.now() - sent < 2000, `an idle stop was held ${Date.now() - sent} ms`);
    assertEquals((await idle.status()).code, 0);
  } finally {
    await idle.stop();
  }
});

Deno.test("--drain-while http: the stop waits while the URL answers 2xx, goes on at a 503", async () => {
  const port = freePort();
  let busy = true;
  const app = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen: () => {} },
    (request) =>
      new URL(request.url).pathname === "/busy" && busy
        ? new Response("busy")
        : new Response("idle", { status: 503 }),
  );
  const proc = draining("subreaper", port, "20s", `http:${app.addr.port}/busy`);
  try {
    await holdStop(proc, "subreaper", port);
    await stillHeld(proc);
    await endsWithin(proc, () => busy = false, /no longer holds \(HTTP 503\)/);
  } finally {
    await proc.stop();
    await app.shutdown();
  }
});

for (const mode of MODES) {
  Deno.test(`${mode}: --drain-while: never longer than --shutdown-delay; a second stop goes through at once`, async () => {
    const port = freePort();
    const dir = await Deno.makeTempDir({ prefix: "denit-drain-" });
    await Deno.writeTextFile(`${dir}/busy`, "");
    const bounded = draining(mode, port, "1500ms", `file:${dir}/busy`);
    const second = draining(mode, freePort(), "20s", `file:${dir}/busy`);
    try {
      await bounded.waitFor(/^ready /);
      const sent = Date.now();
      Deno.kill(denitPid(bounded, mode), "SIGTERM");
      await bounded.waitFor(/^SIGTERM$/, { timeoutMs: 5000 });
      const after = Date.now() - sent;
      assertOk(after >= 1400 && after < 3000, `the bound let TERM through after ${after} ms`);
      const result = await bounded.status();
      assertEquals(result.code, 0, result.stderr);
      assertOk(!/no longer holds/.test(result.stderr), result.stderr);

      await second.waitFor(/^ready /);
      Deno.kill(denitPid(second, mode), "SIGTERM");
      await stillHeld(second);
      const again = Date.now();
      Deno.kill(denitPid(second, mode), "SIGTERM");
      await second.waitFor(/^SIGTERM$/, { timeoutMs: 3000 });
      assertOk(Date.now() - again < 2000, "the second stop signal was held too");
      assertEquals((await second.status()).code, 0);
      assertEquals(second.lines.filter((l) => l === "SIGTERM").length, 1);
    } finally {
      await Promise.all([bounded.stop(), second.stop()]);
      await Deno.remove(dir, { recursive: true });
    }
  });
}

Deno.test("--drain-while: refused without --shutdown-delay, for jobs without the job service, and for notify", async () => {
  const cases: [string[], RegExp][] = [
    [["--drain-while", "file:/x"], /--drain-while" needs --shutdown-delay/],
    [["--shutdown-delay", "5s", "--drain-while", "jobs"], /needs the job service/],
    [["--shutdown-delay", "5s", "--drain-while", "notify"], /use tcp:PORT, .* or jobs/],
  ];
  for (const [args, message] of cases) {
    const result = await run([...DENIT, ...args, "--", "true"]);
    assertEquals(result.code, 2, result.stderr);
    assertMatch(result.stderr, message);
  }
});

// ---------------------------------------------------------------- --stop-signal

for (const mode of MODES) {
  Deno.test(`${mode}: --stop-signal USR1: held by the delay, not ready, SIGKILL after --grace`, async () => {
    // A pod's stopSignal (ContainerStopSignals) or docker --stop-signal: USR1 is the stop.
    const port = freePort();
    const proc = new Running(denitArgv(mode, [
      "-v",
      "--health-addr",
      `127.0.0.1:${port}`,
      "--stop-signal",
      "USR1",
      "--shutdown-delay",
      "1s",
      "--grace",
      "1s",
      "--",
      ...ECHO,
      "NONE",
    ]));
    try {
      await proc.waitFor(/^ready /);
      await eventually(async () => await readyz(port) === 200, "ready before the stop");
      assertEquals((await status(port)).settings?.stopSignal, "SIGUSR1");
      const sent = Date.now();
      Deno.kill(denitPid(proc, mode), "SIGUSR1");
      await eventually(async () => await readyz(port) === 503, "not ready after USR1", 1000);
      assertMatch((await get(port, "/readyz")).body, /shutdown-delay/);
      assertOk(!proc.lines.includes("SIGUSR1"), "the child got USR1 before the delay");
      await proc.waitFor(/^SIGUSR1$/, { timeoutMs: 5000 });
      assertOk(Date.now() - sent >= 900, `USR1 reached the child after ${Date.now() - sent} ms`);
      const result = await proc.status(10_000);
      const took = Date.now() - sent;
      assertEquals(result.code, 137, result.stderr);
      assertOk(took >= 1900 && took < 4000, `stopped after ${took} ms: not delay + grace`);
      assertMatch(result.stderr, /SIGUSR1 held for the shutdown delay of 1s/);
      assertMatch(result.stderr, /grace period of 1s expired: SIGKILL to/);
    } finally {
      await proc.stop();
    }
  });
}

Deno.test("without --stop-signal, USR1 is passed on and stops nothing", async () => {
  const port = freePort();
  const proc = withHealth(port, ["--grace", "200ms", "--", ...ECHO, "NONE"]);
  try {
    await proc.waitFor(/^ready /);
    await eventually(async () => await readyz(port) === 200, "ready");
    proc.kill("SIGUSR1");
    await proc.waitFor(/^SIGUSR1$/);
    assertEquals(await readyz(port), 200);
    assertEquals((await status(port)).settings?.stopSignal, null);
    assertEquals((await status(port)).state as unknown, "running");
  } finally {
    proc.kill("SIGINT"); // signal_echo carries on: --grace ends it
    await proc.status();
  }
});

// ---------------------------------------------------------------- --timeout

for (const mode of MODES) {
  Deno.test(`${mode}: --timeout: TERM at the deadline, exit 124, one warn line`, async () => {
    const started = Date.now();
    const result = await run(
      denitArgv(mode, ["--timeout", "700ms", "--grace", "5s", "--", ...ECHO]),
      { timeoutMs: 15_000 },
    );
    const took = Date.now() - started;
    assertEquals(result.code, 124, result.stderr);
    assertOk(result.stdout.includes("SIGTERM"), "the child did not get TERM");
    assertOk(took >= 700 && took < 5000, `took ${took} ms`);
    const warns = result.stderr.split("\n").filter((l) => /warn: deadline/.test(l));
    assertEquals(warns.length, 1, result.stderr);
    assertMatch(warns[0] ?? "", /deadline of 700ms passed \(--timeout\).*exit code 124/);
  });

  Deno.test(`${mode}: --timeout: a child that ignores TERM gets KILL after --grace; -g reaches its group`, async () => {
    const result = await run(
      denitArgv(mode, [
        "-g",
        "--timeout",
        "500ms",
        "--grace",
        "700ms",
        "--",
        "sh",
        "-c",
        `trap 'echo group got TERM' TERM; while :; do sleep 0.1; done`,
      ]),
      { timeoutMs: 15_000 },
    );
    assertEquals(result.code, 124, result.stderr);
    assertOk(result.stdout.includes("group got TERM"), result.stdout);
    assertMatch(result.stderr, /grace period of 700ms expired: SIGKILL to/);
  });

  Deno.test(`${mode}: --timeout without --grace: TERM at the deadline, KILL after --kill-after`, async () => {
    const started = Date.now();
    const result = await run(
      denitArgv(mode, ["--timeout", "300ms", "--kill-after", "500ms", "--", ...ECHO, "NONE"]),
    );
    const took = Date.now() - started;
    assertEquals(result.code, 124, result.stderr);
    assertOk(result.stdout.includes("SIGTERM"), "the child got no TERM first");
    assertOk(took >= 800 && took < 5000, `took ${took} ms`);
    const warns = result.stderr.split("\n").filter((l) =>
      /warn:/.test(l) && !/subreaper|cause=/.test(l)
    );
    assertMatch(
      warns[0] ?? "",
      /deadline of 300ms passed \(--timeout\): SIGTERM, SIGKILL after 500ms/,
    );
    assertMatch(
      warns[1] ?? "",
      /still running 500ms after the deadline of 300ms \(--timeout\): SIGKILL to .*exit code 124/,
    );
  });

  Deno.test(`${mode}: --timeout racing the child's own end: the child's code, never 124`, async () => {
    // denit is stopped across the deadline while the child ends: when it runs again, the
    // deadline's timer and the child's status are both due. The child's status decides.
    for (let i = 0; i < 5; i++) {
      const proc = new Running(
        denitArgv(mode, ["--timeout", "300ms", "--", "sh", "-c", "echo ready; sleep 0.05; exit 3"]),
      );
      try {
        await proc.waitFor(/^ready$/);
        const denit = denitPid(proc, mode);
        Deno.kill(denit, "SIGSTOP");
        await new Promise((resolve) => setTimeout(resolve, 450));
        Deno.kill(denit, "SIGCONT");
        const result = await proc.status();
        assertEquals(result.code, 3, result.stderr);
      } finally {
        await proc.stop();
      }
    }
  });

  Deno.test(`${mode}: --rewrite TERM:0 changes nothing: no grace, no SIGKILL, still ready`, async () => {
    const port = freePort();
    const proc = new Running(denitArgv(mode, [
      "-r",
      "TERM:0",
      "--grace",
      "300ms",
      "--health-addr",
      `127.0.0.1:${port}`,
      "--",
      ...ECHO,
      "SIGUSR1",
      "5",
    ]));
    try {
      await proc.waitFor(/^ready /);
      await eventually(async () => await readyz(port) === 200, "ready");
      Deno.kill(denitPid(proc, mode), "SIGTERM");
      // Well past the grace period: the child is untouched, and still ready.
      await new Promise((resolve) => setTimeout(resolve, 800));
      assertEquals(await readyz(port), 200);
      assertEquals((await status(port)).state as unknown, "running");
      Deno.kill(denitPid(proc, mode), "SIGUSR1");
      const result = await proc.status();
      assertEquals(result.code, 5, result.stderr);
      assertOk(!proc.lines.includes("SIGTERM"), proc.lines.join("|"));
    } finally {
      await proc.stop();
    }
  });

  Deno.test(`${mode}: --shutdown-delay: an INT during the delay does not replace the held TERM`, async () => {
    // Both reach the child at once (the kernel delivers INT first then: lower number).
    const proc = new Running(
      denitArgv(mode, ["--shutdown-delay", "20s", "--", ...ECHO, "SIGUSR2"]),
    );
    try {
      await proc.waitFor(/^ready /);
      const denit = denitPid(proc, mode);
      Deno.kill(denit, "SIGTERM");
      await new Promise((resolve) => setTimeout(resolve, 200));
      assertOk(!proc.lines.includes("SIGTERM"), "the first TERM was not held");
      Deno.kill(denit, "SIGINT");
      await proc.waitFor(/^SIGINT$/);
      await proc.waitFor(/^SIGTERM$/);
      assertEquals(proc.lines.slice(1).sort(), ["SIGINT", "SIGTERM"]);
      Deno.kill(denit, "SIGUSR2");
      assertEquals((await proc.status()).code, 0);
    } finally {
      await proc.stop();
    }
  });
}

Deno.test("zero and empty: --timeout 0 and --grace 0 are off, empty variables are unset", async () => {
  const child = ["--", "sh", "-c", "trap 'echo term' TERM; echo ready; sleep 0.6; echo done"];
  // --timeout 0: no deadline (coreutils). The child ends by itself, with its code.
  const none = await run([...DENIT, "-s", "--timeout", "0", ...child]);
  assertEquals([none.code, none.stdout], [0, "ready\ndone\n"], none.stderr);
  // --grace 0: no SIGKILL after a stop signal; the child (which ignores TERM) ends by itself.
  const proc = new Running([...DENIT, "-s", "--grace", "0", ...child]);
  try {
    await proc.waitFor(/^ready$/);
    proc.kill("SIGTERM");
    const result = await proc.status();
    assertEquals([result.code, proc.lines], [0, ["ready", "term", "done"]], result.stderr);
  } finally {
    await proc.stop();
  }
  // Empty variables count as unset: no error, no job service, no grace, no warning.
  const empty = await run([...DENIT, "-s", "--", "sh", "-c", "exit 4"], {
    env: { DENIT_GRACE: "", DENIT_JOBS_SOCKET: "", DENIT_TIMEOUT: " ", DENIT_USER: "" },
  });
  assertEquals([empty.code, empty.stderr], [4, ""]);
  // And an empty flag value is the same as none.
  const flag = await run([...DENIT, "-s", "--grace", "", "--", "sh", "-c", "exit 5"]);
  assertEquals([flag.code, flag.stderr], [5, ""]);
});

Deno.test("--timeout: a child that ends first keeps its own exit code; /status shows the deadline", async () => {
  const port = freePort();
  const proc = withHealth(port, [
    "--timeout",
    "1h",
    "--",
    ...ECHO,
    "SIGUSR1",
    "7",
  ]);
  try {
    await proc.waitFor(/^ready /);
    const doc = await status(port);
    const deadline = Date.parse(String(doc.child?.deadlineAt));
    const started = Date.parse(String(doc.child?.startedAt));
    assertEquals(deadline - started, 3_600_000, JSON.stringify(doc));
    assertEquals(doc.settings?.timeoutSeconds, 3600);
    proc.kill("SIGUSR1");
    const result = await proc.status();
    assertEquals(result.code, 7, result.stderr);
  } finally {
    await proc.stop();
  }
});

// ---------------------------------------------------------------- --user

Deno.test("--user: names from /etc/passwd and /etc/group, supplementary groups, numbers without entries", () => {
  const root = Deno.makeTempDirSync({ prefix: "denit-user-" });
  try {
    Deno.mkdirSync(`${root}/etc`);
    Deno.writeTextFileSync(
      `${root}/etc/passwd`,
      "root:x:0:0:root:/root:/bin/sh\nrunner:x:1001:1001::/home/runner:/bin/bash\n",
    );
    Deno.writeTextFileSync(
      `${root}/etc/group`,
      "root:x:0:\nrunner:x:1001:\ndocker:x:123:runner\nsudo:x:27:other\n",
    );
    const runner = resolveUser("runner", root);
    assertEquals([runner.uid, runner.gid, runner.groups, runner.home], [
      1001,
      1001,
      [1001, 123],
      "/home/runner",
    ]);
    const arc = resolveUser("runner:docker", root);
    assertEquals([arc.uid, arc.gid, arc.groups], [1001, 123, [123]]);
    const numbers = resolveUser("1001:123", root);
    assertEquals([numbers.uid, numbers.gid, numbers.home], [1001, 123, "/home/runner"]);
    const unknown = resolveUser("4242", root);
    assertEquals([unknown.uid, unknown.gid, unknown.groups, unknown.home], [4242, 0, [0], "/"]);
    for (
      const [spec, message] of [
        ["nobody-here", /Unknown user "nobody-here"/],
        ["runner:nogroup", /Unknown group "nogroup"/],
        ["a:b:c", /Invalid user/],
        ["4294967295", /out of range/],
      ] as const
    ) {
      let thrown = "";
      try {
        resolveUser(spec, root);
      } catch (err: unknown) {
        thrown = String(err);
      }
      assertMatch(thrown, message);
    }
  } finally {
    Deno.removeSync(root, { recursive: true });
  }
});

for (const mode of MODES) {
  Deno.test(`${mode}: --user nobody: all ids changed, no way back, HOME set, denit still root`, async () => {
    const proc = new Running(denitArgv(mode, [
      "--user",
      "nobody",
      "--",
      "sh",
      "-c",
      `grep -E '^(Uid|Gid|Groups|CapEff):' /proc/self/status; echo "home $HOME"; ` +
      `trap 'echo got TERM; exit 5' TERM; echo ready; sleep 30 & wait`,
    ]));
    try {
      await proc.waitFor(/^ready$/);
      const out = proc.lines.join("\n");
      assertMatch(out, /^Uid:\s+65534\s+65534\s+65534\s+65534$/m);
      assertMatch(out, /^Gid:\s+65534\s+65534\s+65534\s+65534$/m);
      assertMatch(out, /^Groups:\s+65534\s*$/m);
      assertMatch(out, /^CapEff:\s+0+$/m);
      assertMatch(out, /^home \/nonexistent$/m);
      // denit itself stays root: it can signal the child and everything it starts.
      const denit = denitPid(proc, mode);
      const own = await Deno.readTextFile(`/proc/${denit}/status`);
      assertMatch(own, /^Uid:\s+0\s+0\s+0\s+0$/m);
      Deno.kill(denitPid(proc, mode), "SIGTERM");
      const result = await proc.status();
      assertEquals(result.code, 5, result.stderr);
      assertOk(proc.lines.includes("got TERM"));
    } finally {
      await proc.stop();
    }
  });
}

Deno.test("--user with an unknown user: one line, exit 2, nothing started", async () => {
  const marker = await Deno.makeTempFile();
  await Deno.remove(marker);
  const result = await run([...DENIT, "--user", "no-such-user", "--", "touch", marker]);
  assertEquals(result.code, 2);
  assertEquals(result.stderr, 'denit: Unknown user "no-such-user": not in /etc/passwd\n');
  assertOk(!fileExists(marker), "the command ran");
  const group = await run([...DENIT, "-u", "nobody:no-such-group", "--", "touch", marker]);
  assertEquals(group.code, 2);
  assertEquals(group.stderr, 'denit: Unknown group "no-such-group": not in /etc/group\n');
  assertOk(!fileExists(marker), "the command ran");
});

Deno.test("--user when denit is not root: one line that says so, exit 2, nothing started", async () => {
  const dir = await Deno.makeTempDir();
  try {
    await Deno.chmod(dir, 0o755);
    const marker = `${dir}/marker`;
    const asNobody = [
      ...["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"],
      ...await denitForAnyUser(dir),
    ];
    const result = await run([...asNobody, "-s", "--user", "1000", "--", "touch", marker]);
    assertEquals(result.code, 2);
    assertEquals(
      result.stderr,
      'denit: Cannot run the child as "1000": denit runs as uid 65534, and only root can change ' +
        "users (start denit as root, or drop --user)\n",
    );
    assertOk(!fileExists(marker), "the command ran");
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

function fileExists(path: string): boolean {
  try {
    Deno.statSync(path);
    return true;
  } catch {
    return false;
  }
}

for (const mode of MODES) {
  Deno.test(`${mode}: --user: a child that arms a parent-death signal is not sent it`, async () => {
    // prctl(PR_SET_PDEATHSIG) names the thread that spawned the child as its parent: denit
    // keeps that thread until the child ends (before, it ended at once: exit 143).
    const script = "echo armed; sleep 1; echo alive";
    const argv = ["--user", "nobody", "--", "setpriv", "--pdeathsig", "TERM", "sh", "-c", script];
    const result = await run(denitArgv(mode, argv), { timeoutMs: 10_000 });
    assertEquals([result.code, result.stdout], [0, "armed\nalive\n"], result.stderr);
  });
}

Deno.test("--user 1001:123 (ARC's runner) works with numbers that have no entries", async () => {
  const result = await run([
    ...DENIT,
    "-s",
    "-u",
    "54321:123",
    "--",
    "sh",
    "-c",
    `grep -E '^(Uid|Gid|Groups):' /proc/self/status; echo "home \${HOME:-unset}"`,
  ], { env: { HOME: "/root" } });
  assertEquals(result.code, 0, result.stderr);
  assertMatch(result.stdout, /^Uid:\s+54321\s+54321\s+54321\s+54321$/m);
  assertMatch(result.stdout, /^Gid:\s+123\s+123\s+123\s+123$/m);
  assertMatch(result.stdout, /^Groups:\s+123\s*$/m);
  // No passwd entry: HOME=/, as Docker's --user UID gives it.
  assertMatch(result.stdout, /^home \/$/m);
});

// ---------------------------------------------------------------- --ready-when

/** A child that listens on `port` after `afterMs`, until it gets USR1 (then it closes it). */
function delayedListener(port: number, afterMs: number, http: boolean): string[] {
  const script = `
import socket, signal, sys, time, threading
time.sleep(${afterMs / 1000})
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", ${port})); s.listen(16)
print("listening", flush=True)
closed = threading.Event()
signal.signal(signal.SIGUSR1, lambda *a: closed.set())
signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
s.settimeout(0.05)
while not closed.is_set():
    try:
        c, _ = s.accept()
    except socket.timeout:
        continue
    if ${http ? "True" : "False"}:
        req = c.recv(4096).decode()
        path = req.split(" ")[1] if " " in req else "/"
        code = "200 OK" if path == "/healthy" else "404 Not Found"
        c.sendall(("HTTP/1.0 " + code + "\\r\\nContent-Length: 0\\r\\n\\r\\n").encode())
    c.close()
s.close()
print("closed", flush=True)
signal.pause()
`;
  return ["python3", "-c", script];
}

for (const mode of MODES) {
  Deno.test(`${mode}: --ready-when tcp: 503 until the port accepts, again when it closes`, async () => {
    const health = freePort();
    const app = freePort();
    const proc = new Running(denitArgv(mode, [
      "--health-addr",
      `127.0.0.1:${health}`,
      "--ready-when",
      `tcp:${app}`,
      "--",
      ...delayedListener(app, 1200, false),
    ]));
    try {
      await eventually(async () => (await status(health)).state === "running" as unknown, "start");
      const early = await get(health, "/readyz");
      assertEquals(early.status, 503, early.body);
      assertMatch(early.body, new RegExp(`not ready: tcp:${app}`));
      await proc.waitFor(/^listening$/);
      await eventually(async () => await readyz(health) === 200, "ready once listening", 3000);
      const doc = await status(health);
      assertEquals(doc.readiness?.check, `tcp:${app}`);
      assertEquals(doc.readiness?.lastResult, "connected");
      assertEquals(doc.readiness?.ready, true);
      assertOk(typeof doc.readiness?.checkedAt === "string");
      Deno.kill(denitPid(proc, mode), "SIGUSR1"); // denit forwards it: the app closes its port
      await proc.waitFor(/^closed$/);
      await eventually(async () => await readyz(health) === 503, "not ready once closed", 3000);
      assertEquals((await status(health)).readiness?.lastResult, "connection refused");
    } finally {
      await proc.stop();
    }
  });
}

Deno.test("--ready-when http: 2xx is ready, 404 is not", async () => {
  const health = freePort();
  const other = freePort();
  const app = freePort();
  const good = withHealth(health, [
    "--ready-when",
    `http:${app}/healthy`,
    "--",
    ...delayedListener(app, 0, true),
  ]);
  const bad = withHealth(other, [
    "--ready-when",
    `http:${app}/missing`,
    "--",
    "sleep",
    "30",
  ]);
  try {
    await good.waitFor(/^listening$/);
    await eventually(async () => await readyz(health) === 200, "http 200 makes it ready", 3000);
    assertEquals((await status(health)).readiness?.lastResult, "HTTP 200");
    await eventually(
      async () => (await status(other)).readiness?.lastResult === "HTTP 404",
      "the 404 seen",
      3000,
    );
    assertEquals(await readyz(other), 503);
  } finally {
    await Promise.all([good.stop(), bad.stop()]);
  }
});

Deno.test("--ready-when http: a server that never answers times out, and signals still flow", async () => {
  const health = freePort();
  const silent = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const held: Deno.Conn[] = [];
  void (async () => {
    for await (const conn of silent) held.push(conn); // accepts, never answers
  })();
  const proc = withHealth(health, [
    "--ready-when",
    `http:${silent.addr.port}/`,
    "--",
    ...ECHO,
    "SIGTERM",
  ]);
  try {
    await proc.waitFor(/^ready /);
    await eventually(
      async () => /no answer in 1000 ms/.test(String((await status(health)).readiness?.lastResult)),
      "the check timed out",
      5000,
    );
    // A check that hangs lives on the health thread: forwarding is not held up by it.
    for (let i = 0; i < 5; i++) {
      const from = proc.lines.length;
      const sent = performance.now();
      proc.kill("SIGUSR1");
      await proc.waitFor(/^SIGUSR1$/, { from, timeoutMs: 3000 });
      const latency = performance.now() - sent;
      assertOk(latency < 500, `USR1 took ${latency.toFixed(0)} ms while a check hung`);
    }
    assertEquals(await readyz(health), 503);
  } finally {
    await proc.stop();
    silent.close();
    for (const conn of held) conn.close();
  }
});

Deno.test("--ready-when file: ready while the file exists", async () => {
  const health = freePort();
  const dir = await Deno.makeTempDir({ prefix: "denit-ready-" });
  const proc = withHealth(health, [
    "--ready-when",
    `file:${dir}/ready`,
    "--",
    "sleep",
    "30",
  ]);
  try {
    await eventually(
      async () => (await status(health)).readiness?.lastResult === "no such file",
      "first check",
    );
    assertEquals(await readyz(health), 503);
    await Deno.writeTextFile(`${dir}/ready`, "");
    await eventually(async () => await readyz(health) === 200, "ready with the file", 3000);
    await Deno.remove(`${dir}/ready`);
    await eventually(async () => await readyz(health) === 503, "not ready without it", 3000);
  } finally {
    await proc.stop();
    await Deno.remove(dir, { recursive: true });
  }
});

const HAS_REDIS = (() => {
  try {
    return new Deno.Command("redis-server", { args: ["--version"], stdout: "null" }).outputSync()
      .success;
  } catch {
    return false;
  }
})();

for (const mode of MODES) {
  Deno.test({
    name: `${mode}: --ready-when notify: redis-server --supervised systemd says READY=1`,
    ignore: !HAS_REDIS,
    fn: async () => {
      const health = freePort();
      const port = freePort();
      const proc = new Running(denitArgv(mode, [
        "--health-addr",
        `127.0.0.1:${health}`,
        "--ready-when",
        "notify",
        "--",
        "redis-server",
        "--port",
        String(port),
        "--save",
        "",
        "--appendonly",
        "no",
        "--supervised",
        "systemd",
        "--dir",
        "/tmp",
      ]));
      try {
        await eventually(async () => await readyz(health) === 200, "redis ready", 10_000);
        const doc = await status(health);
        assertEquals(doc.readiness?.check, "notify");
        assertMatch(String(doc.readiness?.lastResult), /READY=1/);
        assertEquals(doc.readiness?.status, "Ready to accept connections");
        // Redis answers on its port: READY=1 meant what it says.
        const pong = await rawHttp(port, "PING\r\n", { until: (t) => t.includes("\r\n") });
        assertEquals(pong, "+PONG\r\n");
        Deno.kill(denitPid(proc, mode), "SIGTERM");
        const result = await proc.status();
        assertEquals(result.code, 0, result.stderr);
      } finally {
        await proc.stop();
      }
    },
  });
}

Deno.test("--ready-when notify: a plain datagram sender: STATUS, READY=1, STOPPING=1", async () => {
  const health = freePort();
  // The child sends what it reads on stdin... simpler: it sends on USR1, USR2 and HUP.
  const script = `
import os, signal, socket
name = os.environ["NOTIFY_SOCKET"]
address = "\\0" + name[1:] if name.startswith("@") else name
def send(text):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM); s.sendto(text.encode(), address); s.close()
    print("sent", text.replace("\\n", " "), flush=True)
signal.signal(signal.SIGUSR1, lambda *a: send("READY=1\\nSTATUS=serving"))
signal.signal(signal.SIGUSR2, lambda *a: send("STOPPING=1"))
send("STATUS=warming up")
while True:
    signal.pause()
`;
  const proc = withHealth(health, [
    "--ready-when",
    "notify",
    "--",
    "python3",
    "-c",
    script,
  ]);
  try {
    await proc.waitFor(/^sent STATUS=warming up$/);
    await eventually(
      async () => (await status(health)).readiness?.status === "warming up",
      "STATUS shown",
    );
    assertEquals(await readyz(health), 503);
    proc.kill("SIGUSR1");
    await eventually(async () => await readyz(health) === 200, "READY=1 makes it ready", 3000);
    assertEquals((await status(health)).readiness?.status, "serving");
    proc.kill("SIGUSR2");
    await eventually(async () => await readyz(health) === 503, "STOPPING=1 makes it unready", 3000);
  } finally {
    await proc.stop();
  }
});

for (const mode of MODES) {
  Deno.test(`${mode}: --ready-when notify: only the child's process tree is believed`, async () => {
    const health = freePort();
    // The child says its socket, and on USR1 a grandchild of denit (the child's own fork)
    // sends READY=1, and lives until /readyz says it was believed (a sender that is gone when
    // denit reads its message cannot be checked: README, Readiness).
    const script = `
import os, signal, socket, time, urllib.request
name = os.environ["NOTIFY_SOCKET"]
def ready():
    try:
        return urllib.request.urlopen("http://127.0.0.1:${health}/readyz", timeout=1).status == 200
    except Exception:
        return False
def send():
    if os.fork() == 0:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        s.sendto(b"READY=1", "\\0" + name[1:])
        deadline = time.time() + 5
        while not ready() and time.time() < deadline:
            time.sleep(0.02)
        os._exit(0)
    os.wait()
    print("sent", flush=True)
signal.signal(signal.SIGUSR1, lambda *a: send())
print("socket", name, flush=True)
while True:
    signal.pause()
`;
    const proc = new Running(denitArgv(mode, [
      "--health-addr",
      `127.0.0.1:${health}`,
      "--ready-when",
      "notify",
      "--",
      "python3",
      "-c",
      script,
    ]));
    try {
      const name = proc.line(await proc.waitFor(/^socket @/)).slice("socket @".length);
      // Another user, outside denit's process tree (as PID 1: outside its PID namespace too).
      const sender = `import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.sendto(b"READY=1", "\\0" + sys.argv[1])`;
      const outside = await run([
        ...["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"],
        ...["/usr/bin/python3", "-c", sender, name],
      ]);
      assertEquals(outside.code, 0, outside.stderr);
      await eventually(
        async () => (await status(health)).readiness?.ignored === 1,
        "the outsider's message ignored",
      );
      assertEquals(await readyz(health), 503);
      Deno.kill(denitPid(proc, mode), "SIGUSR1");
      await proc.waitFor(/^sent$/);
      await eventually(async () => await readyz(health) === 200, "the child's READY=1", 3000);
      Deno.kill(denitPid(proc, mode), "SIGTERM");
      assertEquals((await proc.status()).code, 143);
    } finally {
      await proc.stop();
    }
  });
}

Deno.test("--ready-when: refused without the health endpoint, and for a bad check", async () => {
  const lone = await run([...DENIT, "--ready-when", "tcp:80", "--", "true"]);
  assertEquals(lone.code, 2);
  assertMatch(lone.stderr, /^denit: Option "--ready-when" needs the health endpoint/);
  const bad = await run([...DENIT, "--health", "--ready-when", "udp:53", "--", "true"]);
  assertEquals(bad.code, 2);
  assertMatch(bad.stderr, /Invalid check "udp:53"/);
  const port = await run([...DENIT, "--health", "--ready-when", "tcp:70000", "--", "true"]);
  assertEquals(port.code, 2);
  assertMatch(port.stderr, /a port is 1 to 65535/);
});

Deno.test("without --ready-when, /readyz is 200 as soon as the child runs", async () => {
  const health = freePort();
  const proc = new Running([...DENIT, "-s", "--health-addr", `127.0.0.1:${health}`, "--", ...ECHO]);
  try {
    await proc.waitFor(/^ready /);
    assertEquals(await readyz(health), 200);
    assertEquals((await status(health)).readiness, null);
  } finally {
    await proc.stop();
  }
});

// ---------------------------------------------------------------- --kill-orphans

/**
 * A CI-like child: it leaves a daemon that ignores TERM (setsid, so it left the child's group)
 * and a background process in its own group, says their pids, and ends with 7 once the test
 * opens its FIFO ($0). The daemon ignores TERM from its fork on: a scan may find it the moment its
 * parent is gone.
 */
const CI_STEP = [
  "sh",
  "-c",
  `(trap "" TERM; setsid sleep 600 & echo "daemon $!"); ` +
  `(sleep 600 & echo "member $!"); read x < "$0"; echo "child done"; exit 7`,
];

/** The pid a line "WHAT PID" of the child names, as the host sees it. */
async function pidSaid(proc: Running, mode: Mode, what: string): Promise<number> {
  const line = proc.line(await proc.waitFor(new RegExp(`^${what} \\d+$`)));
  const inner = Number(line.split(" ")[1]);
  return mode === "pid1" ? hostPid(denitPid(proc, mode), inner) : inner;
}

for (const mode of MODES) {
  Deno.test(`${mode}: --kill-orphans: a daemon the child left gets TERM, then KILL after GRACE; the child's group is spared`, async () => {
    const { dir, path: fifo, open } = await fifoGate("denit-orphans-");
    const proc = new Running(denitArgv(mode, ["-w", "--kill-orphans=1s", "--", ...CI_STEP, fifo]));
    try {
      const daemon = await pidSaid(proc, mode, "daemon");
      const member = await pidSaid(proc, mode, "member");
      const seen = Date.now();
      // Found within a scan, TERM ignored, KILL a second later: gone while the child runs.
      await waitUntil(() => !exists(daemon) || processState(daemon) === "Z", "the daemon gone");
      const took = Date.now() - seen;
      assertOk(took >= 900 && took < 4000, `the daemon lasted ${took} ms, not scan + 1 s`);
      assertOk(exists(member), "a process of the child's group was stopped while the child ran");
      assertOk(!proc.lines.includes("child done"));
      await open();
      const result = await proc.status();
      assertEquals(result.code, 7, result.stderr);
      // The pid only: at TERM the daemon may still be the shell or setsid it starts as.
      const inner = (line: string) => /(\d+) \([^)]*\)/.exec(line)?.[1];
      const term = result.stderr.split("\n").filter((l) =>
        /SIGTERM to processes reparented/.test(l)
      );
      const kill = result.stderr.split("\n").filter((l) =>
        /SIGKILL to reparented processes/.test(l)
      );
      assertEquals(term.length, 1, result.stderr);
      assertEquals(kill.length, 1, result.stderr);
      assertMatch(kill[0] ?? "", /still running after 1s: \d+ \(sleep\)/);
      assertEquals(inner(term[0] ?? ""), inner(kill[0] ?? ""));
    } finally {
      await proc.stop();
      await Deno.remove(dir, { recursive: true });
    }
  });
}

/** Every process of session `sid` (its leader's pid), read from /proc. */
function sessionMembers(sid: number): number[] {
  const members: number[] = [];
  for (const entry of Deno.readDirSync("/proc")) {
    if (!/^\d+$/.test(entry.name)) continue;
    try {
      const stat = Deno.readTextFileSync(`/proc/${entry.name}/stat`);
      const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      if (Number(fields[3]) === sid && fields[0] !== "Z") members.push(Number(entry.name));
    } catch {
      // gone
    }
  }
  return members;
}

/**
 * Waits until session `sid` has no process, at three looks 250 ms apart: a generation of a
 * re-forking daemon is born before its parent exits, but a look at /proc can read the parent
 * gone and have listed the directory before the child was born.
 */
async function sessionEnded(sid: number, what: string): Promise<void> {
  const deadline = performance.now() + 15_000;
  for (let empty = 0; empty < 3;) {
    assertOk(performance.now() < deadline, `${what} still runs after 15 s`);
    await waitUntil(() => sessionMembers(sid).length === 0, `${what} ended`);
    for (empty = 1; empty < 3 && sessionMembers(sid).length === 0; empty++) {
      await new Promise((resolve) => setTimeout(resolve, 250));
    }
  }
}

Deno.test("--kill-orphans: a daemon that re-forks to outlive its TERM, and one on denit's own runtime, are ended; each kill is a line at the default level", async () => {
  const { dir, path: fifo, open } = await fifoGate("denit-orphans-");
  // Ignores TERM; every 200 ms forks and exits (a new pid each time, the same session).
  const refork = "import os, signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n" +
    "while True:\n    time.sleep(0.2)\n    if os.fork() > 0: os._exit(0)\n";
  const child = `(trap "" TERM; setsid python3 -c "$1" & echo "refork $!"); ` +
    // It becomes an orphan (its subshell exits) only once it runs the runtime, not setsid.
    `(setsid "$2" eval "setInterval(() => {}, 1000)" & r=$!; ` +
    `until [ "$(cat /proc/$r/comm 2>/dev/null)" = deno ]; do sleep 0.01; done; echo "runtime $r"); ` +
    `read x < "$0"; exit 7`;
  const proc = new Running([
    ...DENIT,
    "-s",
    "--kill-orphans=1s",
    "--",
    "sh",
    "-c",
    child,
    fifo,
    refork,
    DENO,
  ]);
  try {
    const refork = Number(proc.line(await proc.waitFor(/^refork \d+$/)).split(" ")[1]);
    const runtime = Number(proc.line(await proc.waitFor(/^runtime \d+$/)).split(" ")[1]);
    await sessionEnded(refork, "the re-forking daemon");
    await sessionEnded(runtime, "the orphan on the runtime");
    await open();
    const result = await proc.status();
    assertEquals(result.code, 7, result.stderr);
    assertMatch(
      result.stderr,
      /warn: SIGKILL to reparented processes still running after 1s: \d+ \(python3\)/,
    );
    assertMatch(
      result.stderr,
      /warn: SIGTERM to processes reparented to denit \(--kill-orphans\): \d+ \(deno\)/,
    );
  } finally {
    await proc.stop();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("--kill-orphans is off by default: the daemon lives until the child ends", async () => {
  const { dir, path: fifo, open } = await fifoGate("denit-orphans-");
  const proc = new Running(
    denitArgv("subreaper", ["-w", "--kill-after", "200ms", "--", ...CI_STEP, fifo]),
  );
  try {
    const daemon = await pidSaid(proc, "subreaper", "daemon");
    // Three scans' worth of time with --kill-orphans would have ended it.
    await new Promise((resolve) => setTimeout(resolve, 3000));
    assertOk(exists(daemon) && processState(daemon) !== "Z", "the daemon was stopped");
    await open();
    const result = await proc.status();
    assertEquals(result.code, 7, result.stderr);
    assertOk(!/reparented/.test(result.stderr), result.stderr);
    assertMatch(result.stderr, /SIGKILL to leftovers still running after 200ms: .*\(sleep\)/);
  } finally {
    await proc.stop();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("--kill-orphans: refused with a bad duration; DENIT_KILL_ORPHANS sets it", async () => {
  const bad = await run([...DENIT, "--kill-orphans=soon", "--", "true"]);
  assertEquals(bad.code, 2, bad.stderr);
  assertMatch(bad.stderr, /from --kill-orphans/);
  const port = freePort();
  const proc = new Running([...DENIT, "-s", "--health-addr", `127.0.0.1:${port}`, "sleep", "30"], {
    env: { DENIT_KILL_ORPHANS: "2s" },
  });
  try {
    await eventually(async () => (await status(port)).state === "running" as unknown, "start");
    assertEquals((await status(port)).settings?.killOrphansSeconds, 2);
  } finally {
    await proc.stop();
  }
  const plain = withHealth(port, ["--kill-orphans", "--kill-after", "5s", "sleep", "30"]);
  try {
    await eventually(async () => (await status(port)).state === "running" as unknown, "start");
    assertEquals((await status(port)).settings?.killOrphansSeconds, 5);
  } finally {
    await plain.stop();
  }
});

// ---------------------------------------------------------------- --wait-descendants

for (const mode of MODES) {
  Deno.test(`${mode}: --wait-descendants: the child's code once the daemon it left is done`, async () => {
    const dir = await Deno.makeTempDir({ prefix: "denit-wait-" });
    try {
      const started = Date.now();
      const result = await run(denitArgv(mode, [
        "--wait-descendants",
        "--",
        "sh",
        "-c",
        `(sleep 0.8; echo finished > ${dir}/out) & exit 3`,
      ]));
      assertEquals(result.code, 3, result.stderr);
      assertEquals(await Deno.readTextFile(`${dir}/out`), "finished\n");
      assertOk(Date.now() - started >= 800);
      // Without the flag, the orderly end stays: the leftover gets TERM when the child exits.
      const plain = await run(denitArgv(mode, [
        "--",
        "sh",
        "-c",
        `(sleep 0.8; echo finished > ${dir}/plain) & exit 3`,
      ]));
      assertEquals(plain.code, 3, plain.stderr);
      assertOk(!fileExists(`${dir}/plain`), "the leftover was not stopped");
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  });

  Deno.test(`${mode}: --wait-descendants: signals reach the daemon; TERM ends the wait with 143`, async () => {
    // The daemon says it is up once the launcher, denit's child, is gone (its pid is $1).
    const daemon = `while kill -0 $1 2>/dev/null; do sleep 0.01; done; ` +
      `trap 'echo daemon got USR1' USR1; trap 'echo daemon got TERM; exit 0' TERM; ` +
      `echo daemon up; while :; do sleep 0.05; done`;
    const proc = new Running(denitArgv(mode, [
      "--wait-descendants",
      "--",
      "sh",
      "-c",
      `sh -c "$1" daemon $$ & exit 0`,
      "launcher",
      daemon,
    ]));
    try {
      await proc.waitFor(/^daemon up$/);
      Deno.kill(denitPid(proc, mode), "SIGUSR1");
      await proc.waitFor(/^daemon got USR1$/);
      Deno.kill(denitPid(proc, mode), "SIGTERM");
      await proc.waitFor(/^daemon got TERM$/);
      const result = await proc.status();
      assertEquals(result.code, 143, result.stderr);
    } finally {
      await proc.stop();
    }
  });
}

Deno.test({
  name: "pid1: --wait-descendants with --grace: a daemon that ignores TERM is killed after grace",
  ignore: !MODES.includes("pid1"),
  fn: async () => {
    const daemon = `while kill -0 $1 2>/dev/null; do sleep 0.01; done; ` +
      `trap '' TERM; echo daemon up; sleep 30`;
    const proc = new Running([
      ...PIDNS,
      ...DENIT,
      "--wait-descendants",
      "--grace",
      "500ms",
      "--",
      "sh",
      "-c",
      `sh -c "$1" daemon $$ & exit 0`,
      "launcher",
      daemon,
    ]);
    try {
      await proc.waitFor(/^daemon up$/);
      const sent = Date.now();
      Deno.kill(denitPid(proc, "pid1"), "SIGTERM");
      const result = await proc.status();
      const took = Date.now() - sent;
      assertEquals(result.code, 143, result.stderr);
      assertOk(took >= 450 && took < 500 + 2000, `took ${took} ms`);
    } finally {
      await proc.stop();
    }
  },
});
