/**
 * The health endpoint against hostile clients (loopback only, bounded in count and time):
 * nothing a client sends may delay a signal or a probe for long, or hold descriptors.
 */

import { assertEquals, assertOk } from "./assert.ts";
import {
  cleanup,
  countFds,
  DENIT,
  endpointOnLoopback,
  fifoGate,
  FIXTURES,
  freePort,
  processState,
  ROOT,
  run,
  Running,
  waitUntil,
} from "./helpers.ts";

const HOSTILE = ["python3", `${FIXTURES}/hostile_http.py`];

/** The bench's C probe, built for the test (signal round trips timed in C). */
async function probe(): Promise<string> {
  const out = `${await Deno.makeTempDir({ prefix: "denit-probe-" })}/probe`;
  const built = await run(["gcc", "-O2", "-o", out, `${ROOT}bench/probe.c`]);
  assertEquals(built.code, 0, built.stderr);
  return out;
}

/** One /healthz request's round trip, in ms (Infinity when it fails or takes over 5 s). */
async function probeMs(port: number): Promise<number> {
  const started = performance.now();
  try {
    const response = await fetch(`http://127.0.0.1:${port}/healthz`, {
      signal: AbortSignal.timeout(5000),
    });
    await response.text();
    return response.status === 200 ? performance.now() - started : Infinity;
  } catch {
    return Infinity; // refused, reset or too slow: the probe failed
  }
}

/** Waits until something accepts connections on the port. */
async function listening(port: number): Promise<void> {
  const deadline = Date.now() + 15_000;
  for (;;) {
    try {
      (await Deno.connect({ hostname: "127.0.0.1", port })).close();
      return;
    } catch {
      if (Date.now() > deadline) throw new Error(`nothing listens on ${port}`);
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
  }
}

/**
 * /healthz round trips, one every 100 ms, while `busy` runs; a probe still under way when
 * `busy` ended (denit may be exiting) does not count.
 */
async function probesWhile(port: number, busy: Promise<unknown>): Promise<number[]> {
  const times: number[] = [];
  let done = false;
  void busy.finally(() => done = true);
  while (!done) {
    const ms = await probeMs(port);
    if (!done) times.push(ms);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  // denit closes its endpoint as it exits, a moment before its run is seen to end: a refused
  // last probe is that moment, not a slow answer (a failure before the end still counts).
  if (times.at(-1) === Infinity) times.pop();
  return times;
}

Deno.test("64 connections of 8 KiB heads: signals still forwarded, probes answered", async () => {
  const port = freePort();
  const bin = await probe();
  // The probe starts denit over its own child and times 300 SIGUSR1 round trips through it.
  const measuring = run([
    bin,
    "siglat",
    "300",
    ...DENIT,
    "-s",
    "--health-addr",
    `127.0.0.1:${port}`,
    "--",
  ], {
    timeoutMs: 60_000,
  });
  await listening(port); // the probe then waits 200 ms before its first signal
  const attack = run([...HOSTILE, "spaces", String(port), "64", "2"], { timeoutMs: 30_000 });
  const probes = await probesWhile(port, Promise.race([attack, measuring]));
  const attacked = await attack;
  const result = await measuring;
  await Deno.remove(bin.slice(0, bin.lastIndexOf("/")), { recursive: true });
  assertEquals(result.code, 0, result.stderr);
  const figures = JSON.parse(result.stdout.trim());
  assertEquals(figures.lost, 0);
  // The endpoint shares the supervisor's thread: every signal still arrives and every probe is
  // answered (how fast is make bench's: bench/RESULTS.md).
  assertOk(Number(attacked.stdout.split(" ")[1]) > 100, `only ${attacked.stdout} answers`);
  assertOk(probes.length >= 3 && probes.every((ms) => ms < Infinity), `probes (ms): ${probes}`);
});

/** Starts the hostile client; resolves once it says all its connections are open. */
async function hostile(args: string[]): Promise<{ done: Promise<string>; pid: number }> {
  const child = new Deno.Command(HOSTILE[0] ?? "python3", {
    args: [...HOSTILE.slice(1), ...args],
    stdout: "piped",
    stderr: "inherit",
  }).spawn();
  const lines = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
  let text = "";
  while (!text.includes("\n")) {
    const chunk = await lines.read();
    if (chunk.done) throw new Error(`the hostile client ended: ${text}`);
    text += chunk.value;
  }
  const done = (async () => {
    for (;;) {
      const chunk = await lines.read();
      if (chunk.done) break;
      text += chunk.value;
    }
    await child.status;
    return text;
  })();
  return { done, pid: child.pid };
}

for (const kind of ["pipeline", "idle", "slowloris"]) {
  Deno.test(`2,000 ${kind} clients held: every probe answered, descriptors at the cap`, async () => {
    const { port, proc } = await endpointOnLoopback();
    try {
      const baseline = countFds(proc.child.pid);
      // Descriptors sampled every few ms from before the burst: it is where they would pile up.
      let peak = 0;
      const sampler = setInterval(() => peak = Math.max(peak, countFds(proc.child.pid)), 2);
      // Held 3 s, never reopened: pipelining and never reading, idle, or one byte every 100 ms.
      const attack = await hostile(["hold", kind, String(port), "2000", "3", "until=1744"]);
      // The first probe lands behind the tail of the burst of 2,000 connects, which the endpoint
      // is still accepting (and answering: ~50-150 ms on a quiet machine; figures belong in
      // make bench, not here): each probe, that one too, must be answered.
      const first = await probeMs(port);
      await new Promise((resolve) => setTimeout(resolve, 250));
      const probes: number[] = [];
      let done = false;
      void attack.done.finally(() => done = true);
      while (!done) {
        probes.push(await probeMs(port));
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      assertOk(first < Infinity, "the probe behind the burst was not answered");
      const closed = Number((await attack.done).match(/done (\d+)/)?.[1]);
      clearInterval(sampler);
      // The endpoint answers one request per connection and closes the oldest at its cap of
      // 256: the rest of the 2,000 were closed (a pipelining client is answered once, then closed).
      assertOk(closed >= 2000 - 256, `only ${closed} of 2,000 connections closed by denit`);
      assertOk(peak <= baseline + 256 + 8, `denit held ${peak} descriptors (baseline ${baseline})`);
      assertOk(probes.length >= 20, `only ${probes.length} probes`);
      assertOk(probes.every((ms) => ms < Infinity), `probes (ms): ${probes.map(Math.round)}`);
    } finally {
      await proc.stop();
    }
  });
}

Deno.test("at an open-file limit of 64, idle clients leave denit the descriptors to stop leftovers", async () => {
  // The endpoint holds fewer connections under a low limit: a flood that took every descriptor
  // would leave denit unable to read /proc, and the leftover below would never get its TERM.
  const port = freePort();
  const gate = await fifoGate("denit-room-");
  const child = `sleep 600 & echo "leftover $!"; cat "${gate.path}"; exit 0`;
  const limit = ["prlimit", "--nofile=64:64"];
  const flags = ["-s", "--kill-after", "60s", "--health-addr", `127.0.0.1:${port}`];
  const proc = new Running([...limit, ...DENIT, ...flags, "--", "sh", "-c", child]);
  let leftover = 0;
  try {
    leftover = Number(proc.line(await proc.waitFor(/^leftover \d+$/)).split(" ")[1]);
    await listening(port);
    const attack = await hostile(["hold", "idle", String(port), "200", "5", "reopen"]);
    await gate.open();
    await waitUntil(() => ["", "Z"].includes(processState(leftover)), "the leftover's TERM");
    const status = await proc.status();
    assertEquals(status.code, 0, status.stderr);
    await attack.done;
  } finally {
    cleanup(leftover > 0 ? [leftover] : []);
    await proc.stop();
    await Deno.remove(gate.dir, { recursive: true });
  }
});

Deno.test("connections reset before accept do not stall the endpoint", async () => {
  const { port, proc } = await endpointOnLoopback();
  try {
    const attack = run([...HOSTILE, "resets", String(port), "5000"], { timeoutMs: 60_000 });
    const probes = await probesWhile(port, attack);
    const result = await attack;
    assertEquals(result.code, 0, result.stderr);
    // A 10 ms pause after each reset made 5,000 of them take over 50 s: the probes meanwhile
    // were answered all the same; what is measured is that they are.
    assertOk(probes.every((ms) => ms < Infinity), `probes (ms): ${probes}`);
  } finally {
    await proc.stop();
  }
});
