/** The health endpoint of a real denit process through its child's life. */

import parsePrometheus from "parse-prometheus-text-format";
import { assertEquals, assertMatch, assertOk } from "./assert.ts";
import {
  countFds,
  DENIT,
  ECHO,
  endpointOnLoopback,
  freePort,
  killPid,
  rawHttp,
  run,
  Running,
  statusValue,
  waitUntil,
} from "./helpers.ts";

/** denit with its health endpoint on `address` over a child that prints "ready" and sleeps. */
async function sleeper(
  address: string,
  options: { args?: string[]; env?: Record<string, string> } = {},
): Promise<Running> {
  const proc = new Running([
    ...DENIT,
    "-s",
    "--health-addr",
    address,
    "--",
    "sh",
    "-c",
    "echo ready; exec sleep 30",
    ...(options.args ?? []),
  ], { env: options.env ?? {} });
  await proc.waitFor(/^ready$/);
  return proc;
}

async function get(port: number, path: string, method = "GET", hostname = "127.0.0.1") {
  const response = await fetch(
    `http://${hostname.includes(":") ? `[${hostname}]` : hostname}:${port}${path}`,
    {
      method,
    },
  );
  return { status: response.status, headers: response.headers, body: await response.text() };
}

async function status(port: number): Promise<Record<string, unknown>> {
  return JSON.parse((await get(port, "/status")).body);
}

/** Polls /status until `check` holds (bounded): counters move asynchronously to the probe. */
async function statusUntil(port: number, check: (s: Record<string, unknown>) => boolean) {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const current = await status(port);
    if (check(current)) return current;
    if (Date.now() > deadline) throw new Error(`status never matched: ${JSON.stringify(current)}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

function checkPrometheus(text: string): Map<string, string> {
  const families = parsePrometheus(text) as Array<{
    name: string;
    type: string;
    metrics: Array<{ value: string; labels?: Record<string, string> }>;
  }>;
  const samples = new Map<string, string>();
  for (const family of families) {
    assertOk(family.type !== "UNTYPED", `${family.name} has no # TYPE`);
    if (family.type === "COUNTER") assertMatch(family.name, /_total$/);
    for (const sample of family.metrics) {
      assertOk(Number.isFinite(Number(sample.value)), `${family.name} = ${sample.value}`);
      const labels = Object.entries(sample.labels ?? {}).map(([k, v]) => `${k}="${v}"`).join(",");
      samples.set(labels === "" ? family.name : `${family.name}{${labels}}`, sample.value);
    }
  }
  return samples;
}

Deno.test("health through the child's life: ready, counters, stopping, exited", async () => {
  const port = freePort();
  const dir = await Deno.makeTempDir();
  const child = `(true &); (true &); (true &)
    (trap '' TERM; exec sleep 30) &
    trap 'echo usr1' USR1
    trap 'echo term' TERM
    echo ready
    while [ ! -e ${dir}/stop ]; do sleep 0.02; done
    exit 3`;
  const proc = new Running([
    ...DENIT,
    "-s",
    "--health-addr",
    `127.0.0.1:${port}`,
    "--kill-after",
    "3s",
    "--",
    "sh",
    "-c",
    child,
  ]);
  try {
    await proc.waitFor(/^ready$/);
    const ready = await get(port, "/readyz");
    assertEquals([ready.status, ready.body], [200, "ready\n"]);
    assertEquals(ready.headers.get("cache-control"), "no-store");
    assertEquals((await get(port, "/healthz")).status, 200);
    assertEquals((await get(port, "/livez")).status, 200);
    const reaped = await statusUntil(port, (s) => (s.zombiesReaped as number) >= 3);
    assertEquals(reaped.state, "running");
    assertEquals((reaped.child as { pid: number }).pid > 0, true);
    killPid(proc.child.pid, "SIGUSR1");
    await proc.waitFor(/^usr1$/);
    const forwarded = await status(port);
    assertEquals(forwarded.signalsForwarded, { SIGUSR1: 1 });
    const metrics = checkPrometheus((await get(port, "/metrics")).body);
    assertEquals(metrics.get('denit_signals_forwarded_total{signal="SIGUSR1"}'), "1");
    assertEquals(metrics.get("denit_child_up"), "1");
    assertOk(Number(metrics.get("denit_zombies_reaped_total")) >= 3);
    assertOk(Number(metrics.get("process_resident_memory_bytes")) > 1_000_000);
    assertOk(Number(metrics.get("process_open_fds")) > 2);
    assertEquals(metrics.get("denit_ready"), "1");
    assertEquals(metrics.get("denit_unreaped_zombies"), "0");

    killPid(proc.child.pid, "SIGTERM");
    await proc.waitFor(/^term$/);
    const stopping = await get(port, "/readyz");
    assertEquals([stopping.status, stopping.body], [
      503,
      "stopping: a stop signal was forwarded\n",
    ]);
    assertEquals((await status(port)).state, "stopping");
    assertEquals((await get(port, "/healthz")).status, 200);

    await Deno.writeTextFile(`${dir}/stop`, "");
    // The leftover ignores SIGTERM: for --kill-after, denit lives on with the child exited.
    const exited = await statusUntil(port, (s) => s.state === "exited");
    assertEquals((exited.child as { exitCode: number }).exitCode, 3);
    const notReady = await get(port, "/readyz");
    assertEquals([notReady.status, notReady.body], [503, "child exited\n"]);
    const final = checkPrometheus((await get(port, "/metrics")).body);
    assertEquals(final.get("denit_child_exit_code"), "3");
    assertEquals(final.get('denit_child_exit_info{cause="exited",signal=""}'), "1");
    assertEquals(final.get("denit_ready"), "0");
    const end = await proc.status();
    assertEquals(end.code, 3, end.stderr);
    // Closed with denit: nothing listens any more.
    assertEquals(
      await rawHttp(port, "GET /healthz HTTP/1.0\r\n\r\n").catch(() => "refused"),
      "refused",
    );
  } finally {
    await proc.stop();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("PID 1's private memory with --health within 3 MiB of without, after 20 probes", async () => {
  const anon = async (health: boolean): Promise<number> => {
    const port = freePort();
    const options = health ? ["--health-addr", `127.0.0.1:${port}`] : [];
    const proc = new Running([
      ...DENIT,
      "-s",
      ...options,
      "--",
      "sh",
      "-c",
      "echo ready; exec sleep 30",
    ]);
    try {
      await proc.waitFor(/^ready$/);
      for (let i = 0; health && i < 20; i++) {
        assertEquals((await get(port, "/healthz")).status, 200);
      }
      return statusValue(proc.child.pid, "RssAnon");
    } finally {
      await proc.stop();
    }
  };
  const without: number[] = [];
  const withHealth: number[] = [];
  for (let i = 0; i < 3; i++) {
    without.push(await anon(false));
    withHealth.push(await anon(true));
  }
  const median = (values: number[]) => values.sort((a, b) => a - b)[1] ?? 0;
  const delta = median(withHealth) - median(without);
  assertOk(
    delta <= 3072,
    `RssAnon ${median(withHealth)} KiB with --health, ${median(without)} without`,
  );
});

Deno.test("20,000 fresh connections to /healthz: PID 1's private memory stays within the README's budget", async () => {
  const port = freePort();
  const proc = await sleeper(`127.0.0.1:${port}`);
  try {
    const request = new TextEncoder().encode("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
    const buffer = new Uint8Array(1024);
    // Eight clients at a time, each connection new: one request, the answer, closed.
    await Promise.all(Array.from({ length: 8 }, async () => {
      for (let i = 0; i < 2500; i++) {
        const conn = await Deno.connect({ hostname: "127.0.0.1", port });
        await conn.write(request);
        while ((await conn.read(buffer)) !== null) {
          // to the server's close
        }
        conn.close();
      }
    }));
    const anon = statusValue(proc.child.pid, "RssAnon");
    // The README's budget for --health: 24Mi in all, ~13 MiB of it at rest; after this load
    // 18-21 MiB (twelve runs of this test), so 22 MiB is the line.
    assertOk(anon < 22 * 1024, `RssAnon ${anon} KiB after 20,000 connections`);
    assertEquals((await get(port, "/healthz")).status, 200);
  } finally {
    await proc.stop();
  }
});

Deno.test("/status never shows argv or environment of the child", async () => {
  const port = freePort();
  const proc = await sleeper(`127.0.0.1:${port}`, {
    args: ["s3cret-arg"],
    env: { SECRET_TOKEN: "s3cret-env" },
  });
  try {
    for (const path of ["/status", "/metrics"]) {
      const body = (await get(port, path)).body;
      assertOk(!body.includes("s3cret") && !body.includes("sleep") && !body.includes("/bin"), body);
    }
  } finally {
    await proc.stop();
  }
});

Deno.test("404, 405 with Allow, HEAD without a body, bad requests", async () => {
  const port = freePort();
  const proc = await sleeper(`127.0.0.1:${port}`);
  try {
    assertEquals((await get(port, "/nope")).status, 404);
    const post = await get(port, "/readyz", "POST");
    assertEquals(post.status, 405);
    assertEquals(post.headers.get("allow"), "GET, HEAD");
    const head = await rawHttp(port, "HEAD /status HTTP/1.0\r\n\r\n");
    assertMatch(head, /^HTTP\/1\.1 200 OK\r\n/);
    assertOk(head.endsWith("\r\n\r\n"), "HEAD carried a body");
    assertMatch(await rawHttp(port, "\x00\x01\x02garbage\r\n\r\n"), /^HTTP\/1\.1 400 /);
    const metrics = await get(port, "/metrics");
    assertEquals(metrics.headers.get("content-type"), "text/plain; version=0.0.4; charset=utf-8");
    assertEquals((await get(port, "/healthz")).status, 200);
  } finally {
    await proc.stop();
  }
});

const HAS_IPV6 = (() => {
  try {
    Deno.listen({ hostname: "::1", port: 0 }).close();
    return true;
  } catch {
    return false; // no IPv6 on this machine: the IPv6 tests say so
  }
})();

Deno.test({
  name: "IPv6 loopback works; :PORT answers on IPv6 and IPv4 alike",
  ignore: !HAS_IPV6, // this machine has no ::1
  async fn() {
    const port = freePort();
    const proc = await sleeper(`[::1]:${port}`);
    try {
      assertEquals((await get(port, "/readyz", "GET", "::1")).status, 200);
    } finally {
      await proc.stop();
    }
    // The default (every address) is dual-stack: probes over either family get through.
    const both = freePort();
    const dual = await sleeper(`:${both}`);
    try {
      assertEquals((await get(both, "/healthz", "GET", "::1")).status, 200);
      assertEquals((await get(both, "/healthz", "GET", "127.0.0.1")).status, 200);
    } finally {
      await dual.stop();
    }
  },
});

Deno.test("address in use or unusable: exit 125, one line, the child never starts", async () => {
  const holder = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const dir = await Deno.makeTempDir();
  try {
    for (const address of [`127.0.0.1:${holder.addr.port}`, "192.0.2.1:7623"]) {
      const result = await run([
        ...DENIT,
        "-s",
        "--health-addr",
        address,
        "--",
        "touch",
        `${dir}/ran`,
      ]);
      assertEquals(result.code, 125, address);
      const lines = result.stderr.trimEnd().split("\n");
      assertEquals(lines.length, 1, result.stderr);
      assertMatch(lines[0] ?? "", /^denit\[\d+\] error: Cannot serve health on ".+": /);
      assertOk(!(await Deno.stat(`${dir}/ran`).then(() => true, () => false)), "the child ran");
    }
  } finally {
    holder.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("a flood of 600 idle connections: fds stay bounded and probes still answer", async () => {
  const { port, proc } = await endpointOnLoopback();
  const conns: Deno.Conn[] = [];
  try {
    for (let i = 0; i < 600; i++) conns.push(await Deno.connect({ hostname: "127.0.0.1", port }));
    const probe = await rawHttp(port, "GET /readyz HTTP/1.0\r\n\r\n");
    assertMatch(probe, /^HTTP\/1\.1 200 OK/);
    const fds = countFds(proc.child.pid);
    assertOk(fds < 256 + 64, `denit holds ${fds} descriptors`);
  } finally {
    for (const conn of conns) {
      try {
        conn.close();
      } catch {
        // Closed by denit's eviction already.
      }
    }
    await proc.stop();
  }
});

Deno.test("a full stderr pipe blocks nothing: signals forwarded, /healthz answers, the exit comes; dropped lines are counted once it drains", async () => {
  // denit's stderr is a pipe this test leaves unread; the child fills it first, so that every
  // line denit logs (-v: one per forwarded signal) finds it full.
  const port = freePort();
  const script = 'head -c 200000 /dev/zero >&2 & exec "$@"';
  const proc = new Deno.Command(DENIT[0] ?? "", {
    args: [...DENIT.slice(1), "-s", "-v", "--health-addr", `127.0.0.1:${port}`, "--", "sh", "-c"]
      .concat(script, "sh", ...ECHO),
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const lines: string[] = [];
  const reading = (async () => {
    for await (const chunk of proc.stdout.pipeThrough(new TextDecoderStream())) {
      lines.push(...chunk.split("\n").filter((line) => line !== ""));
    }
  })();
  const seen = async (pattern: RegExp, count: number) =>
    await waitUntil(() => lines.filter((line) => pattern.test(line)).length >= count, `${pattern}`);
  try {
    await seen(/^ready /, 1);
    for (let n = 1; n <= 1000; n++) {
      proc.kill("SIGUSR1");
      await seen(/^SIGUSR1$/, n);
    }
    assertEquals((await get(port, "/healthz")).status, 200);
    // Drained, the lines that waited go out, then one that counts those that did not.
    const stderr = new Response(proc.stderr).text();
    proc.kill("SIGTERM");
    const started = performance.now();
    const status = await proc.status;
    assertOk(performance.now() - started < 2000, "the exit waited on stderr");
    assertEquals(status.code, 0);
    assertMatch(await stderr, /warn: \d+ log lines were dropped while stderr was full dropped=\d+/);
  } finally {
    try {
      proc.kill("SIGKILL");
    } catch {
      // Ended already.
    }
    await proc.status;
    await reading;
  }
});

Deno.test("with port 0 the log names the port the endpoint got, and it answers there", async () => {
  // denit's log lines on the child's stdout, where the test reads lines as they come.
  const proc = new Running([
    "sh",
    "-c",
    'exec "$@" 2>&1',
    "sh",
    ...DENIT,
    "-v",
    "-s",
    "--health-addr",
    "127.0.0.1:0",
    "--",
    "sh",
    "-c",
    "echo ready; exec sleep 30",
  ]);
  try {
    const at = await proc.waitFor(/health endpoint listening/);
    const port = Number(/address=127\.0\.0\.1:(\d+)$/.exec(proc.line(at))?.[1] ?? 0);
    assertOk(port > 0, proc.line(at));
    assertEquals((await get(port, "/healthz")).status, 200);
  } finally {
    await proc.stop();
  }
});
