/** `denit probe` against a real denit's health endpoint, and against listeners that misbehave. */

import { assertEquals, assertMatch, assertOk } from "./assert.ts";
import { DENIT, endpointOnLoopback, freePort, run } from "./helpers.ts";

async function probe(args: readonly string[], env: Record<string, string> = {}) {
  return await run([...DENIT, "probe", ...args], { env, timeoutMs: 15_000 });
}

Deno.test("probe: 200 from /healthz and /readyz exits 0 with one line on stdout", async () => {
  const { port, proc } = await endpointOnLoopback();
  try {
    for (const path of ["/healthz", "/readyz", "/livez"]) {
      const result = await probe(["--health-addr", `127.0.0.1:${port}`, "--path", path]);
      assertEquals(result.code, 0, result.stderr);
      assertMatch(
        result.stdout,
        new RegExp(
          `^denit probe: http://127\\.0\\.0\\.1:${port}${path}: 200 OK in \\d+ ms: \\w+\\n$`,
        ),
      );
      assertEquals(result.stderr, "");
    }
  } finally {
    await proc.stop();
  }
});

Deno.test("probe: DENIT_HEALTH_ADDR, a wildcard host on loopback, and [::1]", async () => {
  const { port, proc } = await endpointOnLoopback({ host: "" });
  try {
    // The same variable denit reads: an image that sets it needs no probe arguments.
    const fromEnv = await probe([], { DENIT_HEALTH_ADDR: `:${port}` });
    assertEquals(fromEnv.code, 0, fromEnv.stderr);
    assertMatch(fromEnv.stdout, new RegExp(`http://127\\.0\\.0\\.1:${port}/healthz: 200 OK`));
    const v6 = await probe(["--health-addr", `[::1]:${port}`]);
    assertEquals(v6.code, 0, v6.stderr);
    assertMatch(v6.stdout, new RegExp(`http://\\[::1\\]:${port}/healthz: 200 OK`));
  } finally {
    await proc.stop();
  }
});

Deno.test("probe: a 503 (draining) or 404 exits 1 and says what the endpoint said", async () => {
  const { port, proc } = await endpointOnLoopback({ args: ["--shutdown-delay", "30s"] });
  try {
    const missing = await probe(["--health-addr", `127.0.0.1:${port}`, "--path", "/nope"]);
    assertEquals(missing.code, 1);
    assertMatch(
      missing.stderr,
      /^denit probe: http:\/\/\S+\/nope: 404 Not Found in \d+ ms: not found\n$/,
    );
    proc.kill("SIGTERM"); // held for the delay: /readyz fails at once, the child runs on
    let result = await probe(["--health-addr", `127.0.0.1:${port}`, "--path", "/readyz"]);
    const deadline = Date.now() + 5000;
    while (result.code === 0 && Date.now() < deadline) {
      result = await probe(["--health-addr", `127.0.0.1:${port}`, "--path", "/readyz"]);
    }
    assertEquals(result.code, 1, result.stdout);
    assertMatch(result.stderr, /: 503 Service Unavailable in \d+ ms: stopping: .*--shutdown-delay/);
    assertEquals(result.stdout, "");
    // Liveness is not readiness: /healthz still answers 200 while draining.
    assertEquals((await probe(["--health-addr", `127.0.0.1:${port}`])).code, 0);
  } finally {
    await proc.stop(); // a second TERM during the delay goes through at once
  }
});

Deno.test("probe: refused, and a listener that never answers, each exit 1 in time", async () => {
  const port = freePort();
  const refused = await probe(["--health-addr", `127.0.0.1:${port}`]);
  assertEquals(refused.code, 1);
  assertMatch(
    refused.stderr,
    /^denit probe: http:\/\/127\.0\.0\.1:\d+\/healthz: connection refused\n$/,
  );
  // Accepts (the kernel does, from the backlog) and never answers.
  const silent = Deno.listen({ hostname: "127.0.0.1", port });
  try {
    const started = performance.now();
    const result = await probe(["--health-addr", `127.0.0.1:${port}`, "--timeout", "300ms"]);
    const took = performance.now() - started;
    assertEquals(result.code, 1);
    assertMatch(result.stderr, /: no answer within 300ms\n$/);
    assertOk(took >= 300 && took < 5000, `took ${took.toFixed(0)} ms`);
  } finally {
    silent.close();
  }
  // Something that is not HTTP at all.
  const other = Deno.listen({ hostname: "127.0.0.1", port });
  const serve = (async () => {
    const conn = await other.accept();
    await conn.write(new TextEncoder().encode("SSH-2.0-OpenSSH\r\n"));
    conn.close();
  })();
  try {
    const result = await probe(["--health-addr", `127.0.0.1:${port}`]);
    assertEquals(result.code, 1);
    assertMatch(result.stderr, /: the answer is not HTTP\/1\.1\n$/);
  } finally {
    await serve;
    other.close();
  }
});

Deno.test("probe: bad options are one line, the usage and exit 2", async () => {
  const cases: Array<[string[], RegExp]> = [
    [["--path", "healthz"], /Invalid path "healthz": use an absolute path/],
    [["--timeout", "0"], /Invalid timeout "0": it must be above 0 \(from --timeout\)/],
    [["--timeout", "soon"], /Invalid duration "soon"/],
    [["--health-addr", "nowhere"], /Invalid address "nowhere"/],
    [["--health-addr", "example:7623"], /"example:7623": HOST must be an IP address such as/],
    [["extra"], /Unexpected argument "extra": probe takes options only/],
    [["--bogus"], /--bogus/],
    // A value's control characters stay on the line.
    [["--path", "/a\nb"], /Invalid path "\/a\\x0ab": use an absolute path/],
    [["--health-addr", "x\ny\x1b"], /Invalid address "x\\x0ay\\x1b"/],
  ];
  for (const [args, pattern] of cases) {
    const result = await probe(args);
    assertEquals(result.code, 2, args.join(" "));
    const lines = result.stderr.trimEnd().split("\n");
    assertEquals(lines.length, 2, result.stderr);
    assertMatch(lines[0] ?? "", /^denit probe: /);
    assertMatch(lines[0] ?? "", pattern);
    assertMatch(lines[1] ?? "", /^Usage: denit probe /);
  }
  const bad = await probe([], { DENIT_HEALTH_ADDR: "x" });
  assertEquals(bad.code, 2);
  assertMatch(bad.stderr, /Invalid address "x".*\(from DENIT_HEALTH_ADDR\)/);
  const help = await probe(["--help"]);
  assertEquals(help.code, 0);
  assertMatch(help.stdout, /^Usage: denit probe/);
});
