/**
 * The job service as a process of its own (`denit job serve`, started and supervised by denit):
 * what survives its death, its caps, its memory under connection churn, the runtime it runs on,
 * and that PID 1 itself never loads gRPC. Real processes, a real gRPC client, real signals.
 */

import * as grpc from "@grpc/grpc-js";
import { SILENT_CONNECTION_MS } from "../src/jobs/serve.ts";
import { MAX_RUN_BYTES } from "../src/jobs/service.ts";
import { readRecords } from "../src/jobs/store.ts";
import { readProcStat } from "../src/common/proc.ts";
import { assertEquals, assertMatch, assertOk, defined } from "./assert.ts";
import {
  cleanup,
  DENIT,
  DENO,
  exists,
  fifoGate,
  freePort,
  inCgroup,
  jobsOptions,
  listeningSocketsOf,
  MEMORY_V1,
  MODES,
  processState,
  ROOT,
  run,
  Running,
  staticFixture,
  statusValue,
  waitUntil,
  WallClock,
} from "./helpers.ts";
import {
  call,
  childrenOf,
  client,
  cmdline,
  collect,
  concat,
  decoder,
  finished,
  type Job,
  type JobsClient,
  type Output,
  output,
  outputMatches,
  rejection,
  Service,
  servicePidOf,
} from "./jobs_client.ts";

const encoder = new TextEncoder();

/** Removes a cgroup once its last processes have left it. */
async function removeCgroup(cgroup: string): Promise<void> {
  await waitUntil(() => {
    try {
      Deno.removeSync(cgroup);
      return true;
    } catch {
      return false; // its last processes are still leaving
    }
  }, "the cgroup removed");
}

/** Job service clients in a process of their own (fixtures/job_clients.ts). */
const JOB_CLIENTS = `${ROOT}fixtures/job_clients.ts`;

/** The host pids of a process's children, over all its threads. */

async function list(c: JobsClient, request: object = {}): Promise<Job[]> {
  const all: Job[] = [];
  let after = "";
  for (;;) {
    const page = await call<{ jobs: Job[]; nextAfterId: string }>((cb) =>
      c.List({ ...request, afterId: after }, cb)
    );
    all.push(...page.jobs);
    if (page.nextAfterId === "") return all;
    after = page.nextAfterId;
  }
}

/** `seq FROM TO`'s output. */
function numbers(from: number, to: number): string {
  let text = "";
  for (let n = from; n <= to; n++) text += `${n}\n`;
  return text;
}

/**
 * Follows a job's stdout through every failure of the connection: on an error it calls again
 * from the offset it has, until the stream ends. Resolves to all of the job's stdout.
 */
function followThrough(c: JobsClient, id: string, onBytes: (total: number) => void) {
  const parts: Uint8Array[] = [];
  let received = 0;
  let reconnects = 0;
  const misplaced: string[] = [];
  const done = (async () => {
    for (;;) {
      const ended = await new Promise<boolean>((resolve) => {
        const stream = c.FollowIO({ id, readStdout: received, readStderr: 0 });
        stream.on("data", (m: Output) => {
          if (m.stdout.length === 0) return;
          parts.push(m.stdout);
          received += m.stdout.length;
          // Every message says where its bytes end: a byte twice or a gap shows here.
          if (m.stdoutOffset !== received) {
            misplaced.push(`${m.stdoutOffset} for ${received}`);
          }
          onBytes(received);
        });
        stream.on("error", () => resolve(false));
        stream.on("end", () => resolve(true));
      });
      if (ended) return { text: decoder.decode(concat(parts)), reconnects, misplaced };
      reconnects++;
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  })();
  return done;
}

/** Resolves once the service answers a List (tried every 10 ms, for at most 5 s). */
async function answering(socket: string): Promise<void> {
  const deadline = Date.now() + 15_000;
  for (;;) {
    // A client of its own each time: grpc-js's shared connections wait 1 s after a failure.
    const probe = client(socket, { "grpc.use_local_subchannel_pool": 1 });
    try {
      await call((cb) => probe.List({ limit: 1 }, cb));
      return;
    } catch (err: unknown) {
      if (Date.now() > deadline) throw new Error(`the service does not answer: ${err}`);
      await new Promise((resolve) => setTimeout(resolve, 10));
    } finally {
      probe.close();
    }
  }
}

/** A FIFO that a job blocks on until `open()` is called. */
function gate(path: string): { path: string; open: () => Promise<void> } {
  return {
    path,
    open: async () => {
      const writer = await Deno.open(path, { write: true });
      writer.close();
    },
  };
}

for (const mode of MODES) {
  Deno.test(`${mode}: job service SIGKILLed amid 50 jobs and 10 streams: back at the next connection, no status or byte lost`, async () => {
    const s = await new Service(mode).ready();
    const fifoDir = await Deno.makeTempDir({ prefix: "denit-gates-" });
    try {
      const c = s.client;
      const gates = [];
      for (let i = 0; i < 50; i++) {
        const path = `${fifoDir}/gate-${i}`;
        const made = await run(["mkfifo", path]);
        assertEquals(made.code, 0, made.stderr);
        gates.push(gate(path));
      }
      // Jobs 0-39 print a little, wait on their gate, print more, exit with their own code;
      // jobs 40-49 print 100,000 numbers, wait, then 100,000 more (the streamed ones).
      for (let i = 0; i < 50; i++) {
        const script = i < 40
          ? `echo before ${i}; read x < "$0"; echo after ${i}; exit ${i % 8}`
          : `seq 1 100000; read x < "$0"; seq 100001 200000`;
        await call<Job>((cb) =>
          c.Run({ id: `job-${i}`, argv: ["sh", "-c", script, `${fifoDir}/gate-${i}`] }, cb)
        );
      }
      const streamed = new Map<number, number>();
      const firstHalf = numbers(1, 100000).length;
      const streams = [];
      for (let i = 40; i < 50; i++) {
        streams.push(followThrough(client(s.socket), `job-${i}`, (n) => streamed.set(i, n)));
      }
      await waitUntil(
        () => [...streamed.values()].filter((n) => n >= firstHalf).length === 10,
        "every stream has the first half",
      );
      for (let i = 0; i < 40; i++) await outputMatches(c, `job-${i}`, /^before \d+\n$/);

      const before = servicePidOf(s.pid);
      assertOk(before > 0, "no job service process");
      const killedAt = performance.now();
      Deno.kill(before, "SIGKILL");
      // Jobs 0-19 end while the service is down (denit reaps them; their status waits there);
      // the streamed jobs write their second half into their pipes meanwhile.
      await Promise.all(gates.slice(0, 20).map((g) => g.open()));
      await Promise.all(gates.slice(40).map((g) => g.open()));
      await answering(s.socket);
      const back = performance.now() - killedAt;
      const after = servicePidOf(s.pid);
      assertOk(after > 0 && after !== before, `service ${before} → ${after}`);
      // Started again at the next connection (100 ms after its death at the earliest; about a
      // second when quiet), not after the longest backoff (5 s).
      assertOk(back < 5000, `the service answered again after ${back.toFixed(0)} ms`);
      await Promise.all(gates.slice(20, 40).map((g) => g.open()));
      // The first client's connection waits out grpc-js's backoff: a new one asks from here.
      const again = client(s.socket, { "grpc.use_local_subchannel_pool": 1 });

      for (let i = 0; i < 40; i++) {
        const done = await finished(again, `job-${i}`);
        assertEquals(
          [done.exitCode, done.signal, done.status],
          [i % 8, "", i % 8 === 0 ? "SUCCEEDED" : "FAILED"],
          `job-${i}`,
        );
        assertEquals((await output(again, `job-${i}`)).out, `before ${i}\nafter ${i}\n`);
      }
      const all = numbers(1, 200000);
      let reconnected = 0;
      for (const result of await Promise.all(streams)) {
        assertOk(result.text === all, `a stream got ${result.text.length} of ${all.length} bytes`);
        reconnected += result.reconnects;
        assertEquals(result.misplaced, [], "stdout_offset is not where the bytes end");
      }
      assertOk(reconnected >= 10, `only ${reconnected} reconnects: the streams never broke`);
      for (let i = 40; i < 50; i++) {
        assertEquals((await finished(again, `job-${i}`)).status, "SUCCEEDED");
      }
      again.close();
    } finally {
      const { stderr } = await s.stop();
      await Deno.remove(fifoDir, { recursive: true });
      assertMatch(
        stderr,
        /the job service was killed by SIGKILL; starting it again at the next connection/,
      );
    }
  });
}

Deno.test("job service: started by the first connection, which waits for it; started again only when needed", async () => {
  // Not ready(): that makes the first call.
  const s = new Service("subreaper", ["-v"]);
  let stderr = "";
  try {
    await s.proc.waitFor(/^up$/);
    assertEquals(((await Deno.stat(s.socket)).mode ?? 0) & 0o777, 0o600);
    assertEquals(servicePidOf(s.pid), 0, "a service before any connection");
    // A raw connection, made while no service runs: it waits in denit's backlog, and the
    // service it starts answers on it.
    const raw = await Deno.connect({ transport: "unix", path: s.socket });
    await waitUntil(() => servicePidOf(s.pid) > 0, "the service started by a connection");
    await raw.write(encoder.encode("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"));
    const frame = new Uint8Array(9);
    assertEquals(await raw.read(frame), 9, "no HTTP/2 frame from the service");
    assertEquals(frame[3], 0x4, "the service's first frame is not SETTINGS");
    raw.close();
    const first = servicePidOf(s.pid);
    // Killed while it holds no job: it is started again at the next connection, not before.
    Deno.kill(first, "SIGKILL");
    await waitUntil(() => servicePidOf(s.pid) === 0, "the killed service reaped");
    await new Promise((resolve) => setTimeout(resolve, 500)); // five times the backoff
    assertEquals(servicePidOf(s.pid), 0, "started again without a connection");
    await answering(s.socket);
    const second = servicePidOf(s.pid);
    assertOk(second > 0 && second !== first, `service ${first} → ${second}`);
  } finally {
    stderr = (await s.stop()).stderr;
  }
  assertMatch(stderr, /job socket listening; the job service starts at the first connection/);
  assertMatch(
    stderr,
    /the job service was killed by SIGKILL; starting it again at the next connection, 100 ms from now at the earliest/,
  );
  assertEquals(stderr.match(/job service started/g)?.length, 2, stderr);
});

Deno.test("job service: killed amid a Cancel, the one started again still kills at the grace's end, whatever the wall clock does", async () => {
  // The grace's end is kept in the job's record as a wall-clock time (the service that resumes
  // it is another process); a step back of an hour must not make the job outlive its grace.
  const s = await new Service("subreaper").ready();
  const clock = new WallClock();
  let jobPid = 0;
  try {
    const c = s.client;
    const script = 'trap "" TERM; echo ready; exec sleep 60'; // sleep ignores TERM too
    const job = await call<Job>((cb) => c.Run({ id: "stubborn", argv: ["sh", "-c", script] }, cb));
    jobPid = s.host(job.pid);
    await outputMatches(c, "stubborn", /^ready\n$/);
    const graceMs = 2000;
    // Its connection breaks when the service dies: the answer comes from the next service.
    const cancel = call<Job>((cb) => c.Cancel({ id: "stubborn", graceMs }, cb)).catch(() => null);
    const cancelSaved = () =>
      [...Deno.readDirSync(s.spool)].some((run) =>
        readRecords(`${s.spool}/${run.name}`).some((record) => record.cancel !== null)
      );
    await waitUntil(cancelSaved, "the cancel saved");
    const cancelledAt = performance.now();
    Deno.kill(servicePidOf(s.pid), "SIGKILL");
    clock.step(-3600);
    await waitUntil(() => !exists(jobPid), "the job killed", graceMs + 10_000);
    const took = performance.now() - cancelledAt;
    clock.restore();
    // At most a grace after the next service is up (within 1 s: the test above), not an hour.
    assertOk(took < graceMs + 3000, `the job was killed ${took.toFixed(0)} ms after its cancel`);
    await cancel;
    await answering(s.socket);
    const again = client(s.socket, { "grpc.use_local_subchannel_pool": 1 });
    const done = await finished(again, "stubborn");
    again.close();
    assertEquals([done.status, done.signal], ["CANCELLED", "SIGKILL"]);
  } finally {
    clock.restore();
    if (jobPid > 0) cleanup([jobPid]);
    await s.stop();
  }
});

Deno.test("job service: 100,000 connections and 10,000 List calls leave its memory flat", async () => {
  const s = new Service("subreaper");
  try {
    // Every client runs in a process of its own, whose exit closes its connections (this test's
    // too): this runtime at times keeps a closed connection's socket open for good, which would
    // count here as one the service failed to close.
    const clients = async (mode: "churn" | "list" | "grpc", count: number, ...more: string[]) => {
      const made = await run([
        DENO,
        "run",
        "--allow-all",
        JOB_CLIENTS,
        mode,
        s.socket,
        `${count}`,
        ...more,
      ], {
        env: { DENO_DIR: Deno.env.get("DENO_DIR") ?? `${ROOT}.deno/cache`, NO_COLOR: "1" },
        timeoutMs: 600_000, // bounded, and far above a loaded machine's time
      });
      assertEquals([made.code, made.stdout.trim()], [0, `${count}`], made.stderr);
    };
    await s.proc.waitFor(/^up$/);
    await clients("grpc", 1, "retry"); // denit starts the service for it
    const service = servicePidOf(s.pid);
    const churn = async (count: number) => {
      await clients("churn", count);
      // The service closes what the clients dropped (until then they count against the cap).
      await waitUntil(() => connectionsOf(service, s.socket) === 0, "every connection closed")
        .catch((err: Error) => {
          const left = connectionsOf(service, s.socket);
          throw new Error(`${err.message} (${left} still open)`, { cause: err });
        });
      // And it counted them out (its count of connections lags their closing a little, and
      // a connection over its cap is closed at once: the client fails and tries again).
      await clients("grpc", 1, "retry");
    };
    const calls = (count: number) => clients("list", count, "4");
    // Warm up (the runtime's heap and code settle), then measure what 90,000 and 9,000 more add.
    await churn(10_000);
    await calls(1000);
    const start = statusValue(service, "VmRSS");
    await churn(90_000);
    await calls(9000);
    const end = statusValue(service, "VmRSS");
    const grownMiB = (end - start) / 1024;
    // A leak of 20 KB a connection would be 1.8 GB here.
    assertOk(grownMiB < 24, `the service grew by ${grownMiB.toFixed(1)} MiB`);
    assertEquals(servicePidOf(s.pid), service, "the service was restarted meanwhile");
  } finally {
    const { stderr } = await s.stop();
    assertOk(!/job service (was killed|exited)/.test(stderr), stderr);
  }
});

/** Connections on the job socket that a process holds (the listening socket not counted). */
function connectionsOf(pid: number, socket: string): number {
  const ours = new Set<string>();
  for (const line of Deno.readTextFileSync("/proc/net/unix").split("\n").slice(1)) {
    // Num RefCount Protocol Flags Type St Inode Path; flag 0x10000 marks a listener.
    const fields = line.trim().split(/\s+/);
    const flags = parseInt(fields[3] ?? "0", 16);
    if (fields[7] === socket && (flags & 0x10000) === 0 && fields[6] !== undefined) {
      ours.add(fields[6]);
    }
  }
  let count = 0;
  for (const entry of Deno.readDirSync(`/proc/${pid}/fd`)) {
    try {
      const inode = /^socket:\[(\d+)\]$/.exec(Deno.readLinkSync(`/proc/${pid}/fd/${entry.name}`));
      if (inode?.[1] !== undefined && ours.has(inode[1])) count++;
    } catch {
      // Closed while we looked.
    }
  }
  return count;
}

Deno.test("job service: connections that send nothing or one byte are closed after 5 s; one that spoke is kept", async () => {
  const s = await new Service("subreaper").ready();
  try {
    const service = servicePidOf(s.pid);
    await call((cb) => s.client.List({}, cb)); // the client's connection has spoken
    // 63 more fill the cap of 64: half send nothing, half the first byte of HTTP/2's preface.
    const stalled = await Promise.all(Array.from({ length: 63 }, async (_, i) => {
      const conn = await Deno.connect({ transport: "unix", path: s.socket });
      if (i % 2 === 1) await conn.write(new TextEncoder().encode("P"));
      return conn;
    }));
    const accepted = performance.now();
    // The server's HTTP/2 settings come at once; then its close: end of file, or a reset.
    // Past the bound, this side closes them (and the time says the service did not).
    let closedHere = false;
    const bound = setTimeout(() => {
      closedHere = true;
      for (const conn of stalled) conn.close();
    }, SILENT_CONNECTION_MS + 5000);
    const waited = await Promise.all(stalled.map(async (conn) => {
      const buffer = new Uint8Array(4096);
      while (await conn.read(buffer).catch(() => null) !== null) {
        // what the server sent before closing
      }
      return performance.now() - accepted;
    }));
    clearTimeout(bound);
    if (!closedHere) { for (const conn of stalled) conn.close(); }
    const [first = 0, last = Infinity] = [Math.min(...waited), Math.max(...waited)];
    assertOk(
      first >= SILENT_CONNECTION_MS - 100 && last < SILENT_CONNECTION_MS + 5000,
      `closed after ${first.toFixed(0)} to ${last.toFixed(0)} ms`,
    );
    await waitUntil(() => connectionsOf(service, s.socket) === 1, "the stalled ones gone");
    await call((cb) => s.client.List({}, cb)); // on the connection that was kept
    assertEquals(connectionsOf(service, s.socket), 1, "the client had to connect again");
    const fresh = client(s.socket);
    await call((cb) => fresh.List({}, cb)); // a new client is let in
    fresh.close();
  } finally {
    await s.stop();
  }
});

Deno.test("job service: denit job says it waits for a service that does not answer, and gives up after --wait (125)", async () => {
  const s = await new Service("subreaper").ready();
  const service = servicePidOf(s.pid);
  try {
    Deno.kill(service, "SIGSTOP"); // a service that cannot answer: stopped, its socket open
    // Through a link whose name holds a tab: each message stays one line.
    const link = `${s.socket}.\tlink`;
    await Deno.symlink(s.socket, link);
    const started = performance.now();
    const result = await run([...DENIT, "job", "--socket", link, "--wait", "3s", "list"]);
    const tookMs = performance.now() - started;
    assertEquals([result.code, result.stdout], [125, ""]);
    const shown = `${s.socket}.\\tlink`;
    assertEquals(result.stderr.split("\n"), [
      `denit job: no answer yet from the job service at ${shown}; waiting up to 3s (--wait)`,
      `denit job: the job service at ${shown} did not answer within 3s`,
      "",
    ]);
    // After --wait, not the default 30 s (the margin is for a loaded machine's start-up).
    assertOk(tookMs >= 3000 && tookMs < 25_000, `gave up after ${tookMs.toFixed(0)} ms`);
  } finally {
    Deno.kill(service, "SIGCONT");
    await s.stop();
  }
});

Deno.test("job service: caps on connections (64), streams (128) and running jobs (256)", async () => {
  const s = await new Service("subreaper").ready();
  const held: Deno.UnixConn[] = [];
  const clients: JobsClient[] = [];
  try {
    const c = s.client;
    await call((cb) => c.List({}, cb)); // c's connection is one of the 64
    for (let i = 0; i < 63; i++) {
      held.push(await Deno.connect({ transport: "unix", path: s.socket }));
    }
    // The 65th is closed at once by the service.
    const extra = await Deno.connect({ transport: "unix", path: s.socket });
    const read = await extra.read(new Uint8Array(64)).catch(() => null);
    extra.close();
    assertEquals(read, null, "the 65th connection was kept");
    // Those held still work (c's), and a slot comes back when one closes.
    await call((cb) => c.List({}, cb));
    for (const connection of held.splice(0)) connection.close();
    await waitUntil(
      () => connectionsOf(servicePidOf(s.pid), s.socket) === 1,
      "the held connections closed",
    );

    // 256 running jobs, then a refusal.
    for (let i = 0; i < 256; i++) {
      await call<Job>((cb) =>
        c.Run({ id: `sleep-${i}`, argv: ["sh", "-c", "echo ready; exec sleep 600"] }, cb)
      );
    }
    const refused = await rejection(call((cb) => c.Run({ id: "one-more", argv: ["true"] }, cb)));
    assertEquals(refused.code, grpc.status.RESOURCE_EXHAUSTED);
    assertMatch(refused.details, /256 jobs run already/);

    // 128 streams (16 a connection), then a refusal.
    const streams: grpc.ClientReadableStream<Output>[] = [];
    // Eight connections (grpc-js would share one between clients unless told not to).
    for (let i = 0; i < 8; i++) {
      clients.push(client(s.socket, { "grpc.use_local_subchannel_pool": 1 }));
    }
    for (let i = 0; i < 128; i++) {
      const stream = clients[i % 8]!.FollowIO({ id: `sleep-${i}` });
      stream.on("error", () => {}); // cancelled at the end
      streams.push(stream);
    }
    // Each stream's first message ("ready") says the service took it.
    await Promise.all(
      streams.map((stream) => new Promise((resolve) => stream.once("data", resolve))),
    );
    const over = await rejection(collect(c.FollowIO({ id: "sleep-0" })));
    assertEquals(over.code, grpc.status.RESOURCE_EXHAUSTED);
    assertMatch(over.details, /128 streams are open already/);
    for (const stream of streams) stream.cancel();
    // Cancel one job: a place for a new one.
    await call<Job>((cb) => c.Cancel({ id: "sleep-0", graceMs: 1000 }, cb));
    await call<Job>((cb) => c.Run({ id: "one-more", argv: ["true"] }, cb));
  } finally {
    for (const connection of held) connection.close();
    for (const c of clients) c.close();
    await s.stop();
  }
});

Deno.test("job service: 1,000 jobs with 4.3 KB command lines: List pages, job list and logs work", async () => {
  const s = await new Service("subreaper").ready();
  try {
    const c = s.client;
    const padding = "#".repeat(4300);
    for (let batch = 0; batch < 1000; batch += 50) {
      await Promise.all(Array.from({ length: 50 }, (_, k) =>
        call<Job>((cb) =>
          c.Run({
            id: `big-${batch + k}`,
            argv: ["sh", "-c", `echo ${batch + k} # ${padding}`],
          }, cb)
        )));
    }
    await finished(c, "big-999");
    const jobs = await list(c);
    assertEquals(jobs.length, 1000);
    assertEquals(new Set(jobs.map((job) => job.id)).size, 1000);
    const listed = await run([...DENIT, "job", "--socket", s.socket, "list"]);
    assertEquals(listed.code, 0, listed.stderr);
    assertEquals(listed.stdout.split("\n").filter((line) => /^big-\d+\s/.test(line)).length, 1000);
    const logs = await run([...DENIT, "job", "--socket", s.socket, "logs", "big-500"]);
    assertEquals([logs.code, logs.stdout], [0, "500\n"], logs.stderr);
  } finally {
    await s.stop();
  }
});

Deno.test("job service: Runs past the caps are refused, ten at the caps run; PID 1 never sees them", async () => {
  const s = await new Service("subreaper").ready();
  try {
    const c = s.client;
    const anonBefore = statusValue(s.pid, "RssAnon");
    // 1.5 MB on the wire: past what the service decodes at all.
    const huge = ["true", ...Array.from({ length: 393_000 }, () => "xy")];
    const tooBig = await rejection(call((cb) => c.Run({ id: "huge", argv: huge }, cb)));
    assertEquals(tooBig.code, grpc.status.RESOURCE_EXHAUSTED, tooBig.details);
    // 65,000 empty arguments: 130 KB on the wire, past the entry cap.
    const wide = ["true", ...Array.from({ length: 65_000 }, () => "")];
    for (let i = 0; i < 10; i++) {
      const refused = await rejection(call((cb) => c.Run({ id: `wide-${i}`, argv: wide }, cb)));
      assertEquals(refused.code, grpc.status.INVALID_ARGUMENT);
      assertMatch(refused.details, /^argv and env hold 65001 entries: at most 4096 a job$/);
    }
    // 128 KiB in one argument: past the byte cap.
    const long = ["true", "x".repeat(MAX_RUN_BYTES)];
    const refused = await rejection(call((cb) => c.Run({ id: "long", argv: long }, cb)));
    assertMatch(refused.details, /at most 131072 \(128 KiB\) a job/);
    // Ten Runs at the entry cap (4,096 entries: 4,095 empty arguments) run.
    const most = ["sh", "-c", 'echo "$#"', "sh", ...Array.from({ length: 4_092 }, () => "")];
    for (let i = 0; i < 10; i++) {
      await call<Job>((cb) => c.Run({ id: `most-${i}`, argv: most }, cb));
    }
    for (let i = 0; i < 10; i++) {
      assertEquals((await finished(c, `most-${i}`)).status, "SUCCEEDED");
      assertEquals((await output(c, `most-${i}`)).out, "4092\n");
    }
    const serviceAnon = statusValue(servicePidOf(s.pid), "RssAnon");
    assertOk(serviceAnon < 96 * 1024, `the service holds ${serviceAnon} KiB`);
    // denit's own memory took none of it in (it was never sent on).
    const grown = statusValue(s.pid, "RssAnon") - anonBefore;
    assertOk(grown < 2048, `PID 1's RssAnon grew ${grown} KiB`);
    await call<Job>((cb) => c.Run({ id: "small", argv: ["true"] }, cb));
    assertEquals((await finished(c, "small")).status, "SUCCEEDED");
  } finally {
    await s.stop();
  }
});

for (const mode of MODES) {
  Deno.test(`${mode}: job service: Cancel of a job whose own process exited ends what its group left`, async () => {
    const s = await new Service(mode).ready();
    try {
      const c = s.client;
      // The job's own process exits 0 and leaves a process in its group that ignores TERM.
      await call<Job>((cb) =>
        c.Run({
          id: "leaves",
          argv: ["sh", "-c", "(trap '' TERM; exec sleep 600) & echo $!; exit 0"],
        }, cb)
      );
      const text = await outputMatches(c, "leaves", /^\d+\n/);
      const left = s.host(Number(text.trim()));
      await waitUntil(
        () => cmdline(left)[0] === "sleep",
        "the leftover runs sleep",
      );
      const started = performance.now();
      const cancelled = await call<Job>((cb) => c.Cancel({ id: "leaves", graceMs: 300 }, cb));
      const took = performance.now() - started;
      // The job's own end stands (it exited 0 by itself), and nothing of its group is left.
      assertEquals([cancelled.status, cancelled.exitCode], ["SUCCEEDED", 0]);
      assertOk(!exists(left), `the leftover ${left} is still there after Cancel returned`);
      assertOk(took >= 300, `Cancel returned after ${took.toFixed(0)} ms, before the grace`);
    } finally {
      await s.stop();
    }
  });
}

Deno.test("job service: Cancel racing a job's own exit says CANCELLED only for a job it killed", async () => {
  const s = await new Service("subreaper").ready();
  try {
    const c = s.client;
    const outcomes = { cancelled: 0, finished: 0 };
    for (let batch = 0; batch < 300; batch += 10) {
      await Promise.all(Array.from({ length: 10 }, async (_, k) => {
        const id = `race-${batch + k}`;
        // Jobs of 0 to 199 ms: some end before the Cancel reaches them, some after (on a
        // loaded machine a Cancel may take tens of milliseconds to arrive).
        const ms = String(((batch + k) * 7) % 200).padStart(3, "0");
        await call<Job>((cb) => c.Run({ id, argv: ["sleep", `0.${ms}`] }, cb));
        const job = await call<Job>((cb) => c.Cancel({ id, graceMs: 1000 }, cb));
        if (job.status === "CANCELLED") {
          outcomes.cancelled++;
          assertEquals(job.signal, "SIGTERM", `${id}: CANCELLED but not killed by TERM`);
        } else {
          outcomes.finished++;
          assertEquals([job.status, job.exitCode, job.signal], ["SUCCEEDED", 0, ""], id);
        }
      }));
    }
    assertEquals(outcomes.cancelled + outcomes.finished, 300);
    // Both sides of the race were run (else the test proves nothing).
    assertOk(outcomes.cancelled > 0 && outcomes.finished > 0, JSON.stringify(outcomes));
  } finally {
    await s.stop();
  }
});

Deno.test("job service: Cancel ends the whole job: what it started with setsid, a stopped process by TERM, and with its keeper killed", async () => {
  // Verbose: a failure shows denit's own lines (below), which say what the service saw.
  const s = await new Service("subreaper", ["-v", "-v"]).ready();
  const started: number[] = [];
  let failed = true;
  try {
    const c = s.client;
    // A job that leaves its group and session: its keeper still knows it (a descendant).
    const escapes = "setsid sleep 301 & echo $!; exec sleep 1000";
    const job = await call<Job>((cb) => c.Run({ id: "escapes", argv: ["sh", "-c", escapes] }, cb));
    const escaped = Number((await outputMatches(c, "escapes", /^\d+\n$/)).trim());
    started.push(job.pid, escaped);
    // Out of the job's group by then (setsid(1) runs sleep after setsid(2)): the group's signal
    // cannot reach it.
    await waitUntil(() => cmdline(escaped)[0] === "sleep", "the escaped process runs sleep");
    let done = await call<Job>((cb) => c.Cancel({ id: "escapes", graceMs: 60_000 }, cb));
    assertEquals([done.status, done.signal], ["CANCELLED", "SIGTERM"]);
    assertOk(!exists(escaped), "the setsid process outlived the Cancel");

    // A stopped job gets TERM with CONT, so its handler runs (no KILL after a minute's grace).
    const stops = 'trap "echo stopping; exit 3" TERM; echo up; while :; do sleep 0.05; done';
    const stopped = await call<Job>((cb) =>
      c.Run({ id: "stopped", argv: ["sh", "-c", stops] }, cb)
    );
    started.push(stopped.pid);
    await outputMatches(c, "stopped", /^up\n$/);
    Deno.kill(stopped.pid, "SIGSTOP");
    await waitUntil(() => processState(stopped.pid) === "T", "the job stopped");
    done = await call<Job>((cb) => c.Cancel({ id: "stopped", graceMs: 60_000 }, cb));
    assertEquals([done.status, done.exitCode, done.signal], ["CANCELLED", 3, ""]);

    // With its keeper killed, the service ends the job's group itself; denit, stopped, leaves
    // the keeper a zombie meanwhile (a keeper's pid that still reads as alive, with its start
    // time), and the job a zombie once killed.
    const orphan = await call<Job>((cb) => c.Run({ id: "orphan", argv: ["sleep", "1000"] }, cb));
    started.push(orphan.pid);
    const keeper = statusValue(orphan.pid, "PPid");
    Deno.kill(s.pid, "SIGSTOP");
    let cancelled: Promise<Job>;
    try {
      Deno.kill(keeper, "SIGKILL");
      await waitUntil(() => processState(keeper) === "Z", "the keeper a zombie");
      // A grace longer than the call's deadline: the Cancel ends when the job does, at its TERM.
      cancelled = call<Job>((cb) => c.Cancel({ id: "orphan", graceMs: 60_000 }, cb));
      await waitUntil(() => ["Z", ""].includes(processState(orphan.pid)), "the job ended");
    } finally {
      Deno.kill(s.pid, "SIGCONT");
    }
    done = await cancelled;
    assertEquals(done.status === "RUNNING", false, JSON.stringify(done));

    // A keeper killed amid the grace it was asked for: the service ends the rest of it with KILL,
    // what the job started with setsid included (it ignores TERM; its parent, the job, lives).
    const deaf = `trap "echo TERM ignored" TERM; setsid sh -c 'trap "" TERM; exec sleep 302' & ` +
      'echo "up $!"; while :; do sleep 0.05; done';
    const stubborn = await call<Job>((cb) =>
      c.Run({ id: "stubborn", argv: ["sh", "-c", deaf] }, cb)
    );
    const apart = Number(
      /^up (\d+)\n$/.exec(await outputMatches(c, "stubborn", /^up \d+\n$/))?.[1],
    );
    started.push(stubborn.pid, apart);
    const asked = call<Job>((cb) => c.Cancel({ id: "stubborn", graceMs: 2000 }, cb));
    await outputMatches(c, "stubborn", /TERM ignored\n$/);
    Deno.kill(statusValue(stubborn.pid, "PPid"), "SIGKILL");
    done = await asked;
    assertEquals(done.status === "RUNNING", false, JSON.stringify(done));
    assertOk(
      !exists(stubborn.pid) || processState(stubborn.pid) === "Z",
      "the job outlived the Cancel of its dead keeper",
    );
    assertOk(
      !exists(apart) || processState(apart) === "Z",
      "what the job started with setsid outlived the Cancel of its dead keeper",
    );
    assertOk(
      !exists(orphan.pid) || processState(orphan.pid) === "Z",
      "the job outlived the Cancel",
    );
    failed = false;
  } finally {
    cleanup(started);
    const { stderr } = await s.stop();
    // deno-lint-ignore no-console -- a failed test's evidence
    if (failed) console.error(`denit's log:\n${stderr.split("\n").slice(-60).join("\n")}`);
  }
});

Deno.test("job service: a Run while the main child drains after a stop signal is refused (UNAVAILABLE)", async () => {
  const dir = await Deno.makeTempDir({ prefix: "denit-drain-" });
  const fifo = `${dir}/drain`;
  const made = await run(["mkfifo", fifo]);
  assertEquals(made.code, 0, made.stderr);
  // The main child drains after TERM until the test opens its FIFO ($0).
  const s = await new Service("subreaper", [], [
    "sh",
    "-c",
    'trap "echo draining" TERM; echo up; sleep 600 & wait $!; read x < "$0"; kill $!; exit 0',
    fifo,
  ]).ready();
  try {
    const c = s.client;
    await call<Job>((cb) => c.Run({ id: "before", argv: ["sleep", "600"] }, cb));
    Deno.kill(s.pid, "SIGTERM");
    await s.proc.waitFor(/^draining$/);
    const refused = await rejection(call((cb) => c.Run({ id: "late", argv: ["true"] }, cb)));
    assertEquals(refused.code, grpc.status.UNAVAILABLE);
    assertMatch(refused.details, /denit is stopping: no new jobs/);
    const jobs = await list(c);
    assertEquals(jobs.map((job) => job.id), ["before"]);
    await gate(fifo).open();
    const { code, stderr } = await s.proc.status();
    assertEquals(code, 0, stderr);
  } finally {
    await s.stop();
    await Deno.remove(dir, { recursive: true });
  }
});

for (const service of ["alive", "killed"]) {
  Deno.test(`job service (${service}): --drain-while jobs holds a stop until the running jobs ended, then the child gets it`, async () => {
    const { dir, path: fifo, open } = await fifoGate("denit-drain-");
    const s = await new Service("subreaper", [
      "-v",
      "--shutdown-delay",
      "10m",
      "--drain-while",
      "jobs",
    ], [
      "sh",
      "-c",
      'trap "echo got TERM; kill $!; exit 0" TERM; echo up; sleep 600 & wait $!',
    ]).ready();
    try {
      const c = s.client;
      await call<Job>((cb) => c.Run({ id: "work", argv: ["sh", "-c", 'read x < "$0"', fifo] }, cb));
      Deno.kill(s.pid, "SIGTERM");
      // The stop is under way once new jobs are refused; the running one holds it.
      for (let attempt = 0;; attempt++) {
        try {
          await call<Job>((cb) => c.Run({ id: `late-${attempt}`, argv: ["true"] }, cb));
        } catch (err: unknown) {
          assertEquals((err as grpc.ServiceError).code, grpc.status.UNAVAILABLE, String(err));
          break;
        }
        assertOk(attempt < 1000, "new jobs still taken long after the stop");
      }
      // The running jobs are the keepers': a dead service's word is not needed.
      if (service === "killed") Deno.kill(servicePidOf(s.pid), "SIGKILL");
      await new Promise((resolve) => setTimeout(resolve, 1000));
      assertOk(!s.proc.lines.includes("got TERM"), "the stop went on while a job ran");
      await open();
      // Once the job ended (the delay is 10 minutes).
      await s.proc.waitFor(/^got TERM$/, { timeoutMs: 60_000 });
      const { code, stderr } = await s.proc.status();
      assertEquals(code, 0, stderr);
      assertMatch(stderr, /SIGTERM held while jobs holds, at most 10m/);
      assertMatch(stderr, /jobs no longer holds \(0 jobs running\): the stop goes on/);
    } finally {
      await s.stop();
      await Deno.remove(dir, { recursive: true });
    }
  });
}

Deno.test("job service: --kill-orphans spares the service and a keeper whose service died; a real orphan goes", async () => {
  const { dir, path: fifo, open } = await fifoGate("denit-orphans-");
  const s = await new Service("subreaper", ["--kill-orphans=0"], [
    "sh",
    "-c",
    `echo up; read x < "$0"; (setsid sleep 600 & echo "orphan $!"); exec sleep 600`,
    fifo,
  ]).ready();
  let jobPid = 0;
  try {
    const c = s.client;
    jobPid = (await call<Job>((cb) => c.Run({ id: "kept", argv: ["sleep", "60"] }, cb))).pid;
    const keeper = statusValue(jobPid, "PPid");
    Deno.kill(servicePidOf(s.pid), "SIGKILL");
    // The keeper is denit's now, as is the service started again at the next connection.
    await waitUntil(() => statusValue(keeper, "PPid") === s.pid, "the keeper reparented to denit");
    await answering(s.socket);
    // A scan that stops this orphan sees the keeper too (it came first).
    await open();
    const orphan = Number(s.proc.line(await s.proc.waitFor(/^orphan \d+$/)).split(" ")[1]);
    await waitUntil(() => !exists(orphan) || processState(orphan) === "Z", "the orphan stopped");
    assertOk(exists(keeper) && processState(keeper) !== "Z", "the keeper was stopped");
    assertOk(exists(servicePidOf(s.pid)), "the service was stopped");
    assertOk(exists(jobPid) && processState(jobPid) !== "Z", "the job was stopped");
  } finally {
    if (jobPid > 0) cleanup([jobPid]);
    await s.stop();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("job service: --wait-descendants sends a signal on to what the child left and to jobs, never to the service or a keeper; TERM ends the wait", async () => {
  const { dir, path: fifo, open } = await fifoGate("denit-wait-jobs-");
  // The daemon says it is up once the child that started it is gone (its pid is $1).
  const daemon = `while kill -0 $1 2>/dev/null; do sleep 0.01; done; ` +
    `trap 'echo daemon got HUP' HUP; echo daemon up; while :; do sleep 0.05; done`;
  const s = await new Service("pid1", ["--wait-descendants"], [
    "sh",
    "-c",
    `echo up; sh -c "$1" daemon $$ & read x < "$0"; exit 0`,
    fifo,
    daemon,
  ]).ready();
  let result: { code: number; stderr: string } | null = null;
  try {
    const service = servicePidOf(s.pid);
    assertOk(service > 0, "no job service");
    const trap = "trap 'echo job got HUP' HUP; echo job up; while :; do sleep 0.05; done";
    const job = await call<Job>((cb) => s.client.Run({ id: "kept", argv: ["sh", "-c", trap] }, cb));
    const keeper = statusValue(s.host(job.pid), "PPid");
    await outputMatches(s.client, "kept", /job up/);
    await open();
    await s.proc.waitFor(/^daemon up$/);
    // HUP ends the service and a keeper (no handler of their own): sent to them, they would be
    // gone now, and the job's output and status with its keeper.
    Deno.kill(s.pid, "SIGHUP");
    await s.proc.waitFor(/^daemon got HUP$/);
    await outputMatches(s.client, "kept", /job got HUP/);
    assertOk(exists(keeper) && processState(keeper) !== "Z", "the keeper got the signal");
    await answering(s.socket);
    assertEquals(servicePidOf(s.pid), service, "the service was started again");
    assertOk(processState(service) !== "Z", "the service got the signal");
    // TERM ends the daemon; the service, never waited for, is stopped after it.
    result = await s.stop();
    assertEquals(result.code, 143, result.stderr);
  } finally {
    if (result === null) await s.stop();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("job service: --wait-descendants waits for a running job, not for the service: the child's code", async () => {
  const child = await fifoGate("denit-wait-jobs-");
  const s = await new Service("pid1", ["--wait-descendants"], [
    "sh",
    "-c",
    `echo up; read x < "$0"; exit 3`,
    child.path,
  ]).ready();
  try {
    const service = servicePidOf(s.pid);
    const [main] = childrenOf(s.pid).filter((pid) => pid !== service);
    // The job ends when the test says so (a file, not a FIFO: a job killed early opens nothing).
    const go = `${child.dir}/go`;
    const argv = ["sh", "-c", `while [ ! -e "$0" ]; do sleep 0.01; done; echo job done`, go];
    await call<Job>((cb) => s.client.Run({ id: "late", argv }, cb));
    await child.open();
    await waitUntil(() => !exists(defined(main)), "the child ended and was reaped");
    assertOk(exists(s.pid) && processState(s.pid) !== "Z", "denit did not wait for the job");
    await Deno.writeTextFile(go, "");
    const result = await s.proc.status();
    assertEquals(result.code, 3, result.stderr);
    const [run] = await Array.fromAsync(Deno.readDir(s.spool));
    const state = await Deno.readTextFile(`${s.spool}/${defined(run).name}/1.state`);
    assertMatch(state, / exit=0 signal=0 /);
  } finally {
    await s.stop();
    await Deno.remove(child.dir, { recursive: true });
  }
});

Deno.test("job service: at denit's stop a job's SIGTERM handler runs to its end: output and status recorded", async () => {
  const s = await new Service("pid1").ready();
  try {
    const trap = "trap 'echo stopping; echo stopped; exit 7' TERM; echo up; " +
      "while :; do sleep 0.05; done";
    await call<Job>((cb) => s.client.Run({ id: "graceful", argv: ["sh", "-c", trap] }, cb));
    await outputMatches(s.client, "graceful", /up/);
    Deno.kill(s.pid, "SIGTERM");
    const result = await s.proc.status();
    assertEquals(result.code, 143, result.stderr);
    // Its keeper stayed for it (a keeper gone first: the job's next write ends it, SIGPIPE).
    const [run] = await Array.fromAsync(Deno.readDir(s.spool));
    const at = `${s.spool}/${defined(run).name}`;
    assertEquals(await Deno.readTextFile(`${at}/1.out`), "up\nstopping\nstopped\n");
    assertMatch(await Deno.readTextFile(`${at}/1.state`), / exit=7 signal=0 /);
  } finally {
    await s.stop();
  }
});

Deno.test("job service: neither PID 1 nor -s, denit still adopts the jobs' keepers, so its stop ends their jobs", async () => {
  const { dir, path: fifo, open } = await fifoGate("denit-jobs-adopt-");
  const proc = new Running([
    ...DENIT,
    ...jobsOptions(dir),
    "--",
    "sh",
    "-c",
    `echo up; read x < "$0"; exit 0`,
    fifo,
  ]);
  let job = 0;
  try {
    await proc.waitFor(/^up$/);
    const c = client(`${dir}/jobs.sock`);
    job = (await call<Job>((cb) => c.Run({ id: "adopted", argv: ["sleep", "60"] }, cb))).pid;
    c.close();
    const keeper = statusValue(job, "PPid");
    await waitUntil(
      () => statusValue(keeper, "PPid") === proc.child.pid,
      "the keeper came to denit",
    );
    await open();
    const result = await proc.status();
    assertEquals(result.code, 0, result.stderr);
    assertOk(!exists(job) && !exists(keeper), "the job outlived denit");
  } finally {
    if (job > 0) cleanup([job]);
    await proc.stop();
    await Deno.remove(dir, { recursive: true });
  }
});

/** The container's open-file soft limit in the environment test (the hard one stays). */
const FILE_LIMIT = 1000;

/** What denit gives the main child alone: as another user, its HOME; with a notify socket, that. */
const CHILD_ONLY = [
  { name: "plain", extra: [] as string[], variables: [] as RegExp[] },
  {
    name: "--user and --ready-when notify",
    extra: ["--user", "nobody", "--health-addr", "", "--ready-when", "notify"],
    variables: [/^HOME=\/nonexistent$/, /^NOTIFY_SOCKET=@/],
  },
];

for (const { name, extra, variables } of CHILD_ONLY) {
  Deno.test(`job service (${name}): a job starts with the container's environment byte for byte, its open-file limit and only descriptors 0-2`, async () => {
    const dir = await Deno.makeTempDir({ prefix: "denit-env-" });
    await Deno.chmod(dir, 0o777); // the main child may run as nobody
    try {
      // A C program hands denit an environment no shell or Deno can write: a value that is not
      // UTF-8, an entry without '=', and what the launcher moves out of the runtime's way; and
      // an open-file soft limit under the hard one, which the runtime raises for itself.
      const given = [
        "ODD=\\xff\\xfe=x",
        "JUSTANAME",
        "PATH=/usr/bin:/bin",
        "LD_LIBRARY_PATH=/opt/x",
        "DENO_DIR=/nonexistent/cache",
        "NODE_OPTIONS=--no-warnings",
        "GLIBC_TUNABLES=glibc.malloc.tcache_count=7",
        "FOO=bar",
      ];
      const source = `${dir}/execenv.c`;
      await Deno.writeTextFile(
        source,
        `#include <sys/resource.h>
#include <unistd.h>
int main(int argc, char **argv) {
  (void)argc;
  struct rlimit files;
  getrlimit(RLIMIT_NOFILE, &files);
  files.rlim_cur = ${FILE_LIMIT};
  if (setrlimit(RLIMIT_NOFILE, &files) != 0) return 126;
  char *env[] = {${given.map((e) => `"${e}"`).join(", ")}, 0};
  execve(argv[1], argv + 1, env);
  return 127;
}
`,
      );
      const built = await run(["gcc", "-o", `${dir}/execenv`, source]);
      assertEquals(built.code, 0, built.stderr);
      const mainChild = [
        "sh",
        "-c",
        `cat /proc/$$/environ > ${dir}/main.env; ulimit -Sn > ${dir}/main.nofile; echo up; ` +
        "exec sleep 120",
      ];
      const flags = extra.map((flag) => flag === "" ? `127.0.0.1:${freePort()}` : flag);
      const s = new Service("subreaper", flags, mainChild, [`${dir}/execenv`]);
      const proc = s.proc;
      let jobPid = 0;
      try {
        await proc.waitFor(/^up$/);
        const c = client(s.socket);
        await call<Job>((cb) => c.Run({ id: "env", argv: ["/bin/cat", "/proc/self/environ"] }, cb));
        await finished(c, "env");
        const bytes = concat(
          (await collect(c.FollowIO({ id: "env" }))).map((m) => m.stdout),
        );
        const hex = (b: Uint8Array) => [...b].map((x) => x.toString(16).padStart(2, "0")).join("");
        const sorted = (entries: Uint8Array[]) => entries.map(hex).sort();
        const expected = given.map((e) =>
          e.startsWith("ODD=")
            ? new Uint8Array([...encoder.encode("ODD="), 0xff, 0xfe, 0x3d, 0x78])
            : encoder.encode(e)
        );
        const main = splitNul(await Deno.readFile(`${dir}/main.env`));
        const own = main.filter((entry) => variables.some((v) => v.test(decoder.decode(entry))));
        assertEquals(own.length, variables.length, "the main child's own variables");
        const shared = main.filter((entry) => !own.includes(entry));
        assertEquals(sorted(shared), sorted(expected), "the main child's environment");
        assertEquals(sorted(splitNul(bytes)), sorted(expected), "the job's environment");
        // A job holds 0, 1 and 2, and neither it nor its keeper holds the job socket.
        jobPid = (await call<Job>((cb) => c.Run({ id: "fds", argv: ["sleep", "60"] }, cb))).pid;
        await waitUntil(() => cmdline(jobPid)[0] === "sleep", "the job's exec");
        assertEquals(
          (await Array.fromAsync(Deno.readDir(`/proc/${jobPid}/fd`))).map((e) => e.name).sort(),
          [
            "0",
            "1",
            "2",
          ],
        );
        assertEquals(listeningSocketsOf(statusValue(jobPid, "PPid")), 0, "the keeper's sockets");
        // The container's open-file soft limit, as the main child has it.
        const limits = await Deno.readTextFile(`/proc/${jobPid}/limits`);
        const soft = /^Max open files\s+(\d+)/m.exec(limits)?.[1];
        assertEquals(soft, `${FILE_LIMIT}`, "the job's open-file soft limit");
        const mainLimit = (await Deno.readTextFile(`${dir}/main.nofile`)).trim();
        assertEquals(mainLimit, `${FILE_LIMIT}`, "the main child's open-file soft limit");
        c.close();
      } finally {
        if (jobPid > 0) cleanup([jobPid]);
        await s.stop();
      }
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  });
}

function splitNul(bytes: Uint8Array): Uint8Array[] {
  const parts: Uint8Array[] = [];
  let start = 0;
  for (let i = 0; i < bytes.length; i++) {
    if (bytes[i] !== 0) continue;
    parts.push(bytes.subarray(start, i));
    start = i + 1;
  }
  return parts;
}

Deno.test("job service: PID 1's process never opens gRPC, npm or the service's bundle", async () => {
  // The bundle PID 1 runs has none of it in it.
  const bundle = await Deno.readTextFile(`${ROOT}dist/denit.js`);
  for (const word of ["@grpc", "protobufjs", "grpc-js", 'from "node:', 'require("node:']) {
    assertOk(!bundle.includes(word), `dist/denit.js contains ${word}`);
  }
  // And the process does not open it: every file denit's own threads open, traced.
  const dir = await Deno.makeTempDir({ prefix: "denit-strace-" });
  try {
    const trace = `${dir}/trace`;
    const proc = new Running([
      "strace",
      "-f",
      "-qq",
      "-e",
      "trace=openat,execve",
      "-o",
      trace,
      ...DENIT,
      ...jobsOptions(dir),
      "--",
      "sh",
      "-c",
      "echo up; exec sleep 120",
    ]);
    await proc.waitFor(/^up$/);
    const c = client(`${dir}/jobs.sock`);
    await call<Job>((cb) => c.Run({ id: "one", argv: ["true"] }, cb));
    await finished(c, "one");
    c.close();
    const denit = childrenOf(proc.child.pid)[0] ?? 0;
    Deno.kill(denit, "SIGTERM");
    await proc.status();
    const lines = (await Deno.readTextFile(trace)).split("\n");
    // Processes that exec'd after the first (the service, the child, the job) are not denit.
    const firstPid = lines[0]?.split(" ")[0];
    const others = new Set(
      lines.filter((line) => / execve\(/.test(line) && line.split(" ")[0] !== firstPid)
        .map((line) => line.split(" ")[0]),
    );
    const opened = lines.filter((line) => / openat\(/.test(line) && !others.has(line.split(" ")[0]))
      .map((line) => /openat\([^,]+, "([^"]*)"/.exec(line)?.[1] ?? "");
    assertOk(opened.length > 0, "strace saw no openat of denit's");
    for (const path of opened) {
      assertOk(
        !/denit-jobs\.js|grpc|\/npm\/|node_modules|protobuf/.test(path),
        `denit's process opened ${path}`,
      );
    }
    assertOk(others.size >= 2, `only ${others.size} other processes traced`);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("job service: its runtime opens no inspector on SIGUSR1 (blocked for it), and goes on", async () => {
  const s = await new Service("subreaper").ready();
  try {
    const service = servicePidOf(s.pid);
    const blocked = BigInt(`0x${
      /^SigBlk:\s+([0-9a-f]+)/m.exec(
        await Deno.readTextFile(`/proc/${service}/status`),
      )?.[1] ?? "0"
    }`);
    assertOk((blocked & (1n << 9n)) !== 0n, "SIGUSR1 is not blocked in the service");
    Deno.kill(service, "SIGUSR1");
    await call((cb) => s.client.List({}, cb));
    // An inspector would listen within milliseconds of the signal: watch for half a second.
    const deadline = Date.now() + 500;
    while (Date.now() < deadline) {
      assertEquals(listeningSocketsOf(service), 0, "the service listens on TCP");
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    assertEquals(servicePidOf(s.pid), service);
  } finally {
    await s.stop();
  }
});

Deno.test("job service: PID 1's private memory with --jobs-socket within 1 MiB of without", async () => {
  const anon = async (args: readonly string[]): Promise<number> => {
    const dir = await Deno.makeTempDir({ prefix: "denit-anon-" });
    const proc = new Running([
      ...DENIT,
      ...args.map((arg) => arg.replace("DIR", dir)),
      "--",
      "sh",
      "-c",
      "echo up; exec sleep 120",
    ]);
    try {
      await proc.waitFor(/^up$/);
      if (args.length > 0) {
        // The first call starts the service: PID 1 is measured with it running.
        const c = client(`${dir}/jobs.sock`);
        await call((cb) => c.List({}, cb));
        assertOk(exists(servicePidOf(proc.child.pid)), "no service after a call");
        c.close();
      }
      return statusValue(proc.child.pid, "RssAnon");
    } finally {
      Deno.kill(proc.child.pid, "SIGTERM");
      await proc.status();
      await Deno.remove(dir, { recursive: true });
    }
  };
  const without: number[] = [];
  const withJobs: number[] = [];
  for (let i = 0; i < 3; i++) {
    without.push(await anon([]));
    withJobs.push(await anon(["--jobs-socket", "DIR/jobs.sock", "--jobs-spool", "DIR/spool"]));
  }
  const median = (values: number[]) => values.sort((a, b) => a - b)[1] ?? 0;
  const delta = median(withJobs) - median(without);
  assertOk(delta < 1024, `RssAnon ${median(withJobs)} KiB with jobs, ${median(without)} without`);
});

Deno.test("the job socket: bound 0600, a connection that waits is seen, and close ends a wait", async () => {
  const { UnixListener } = await import("../src/sys/listener.ts");
  const dir = await Deno.makeTempDir({ prefix: "denit-listener-" });
  const listener = UnixListener.bind(`${dir}/s.sock`);
  try {
    assertEquals(((await Deno.stat(`${dir}/s.sock`)).mode ?? 0) & 0o777, 0o600);
    const connection = await Deno.connect({ transport: "unix", path: `${dir}/s.sock` });
    assertEquals(await listener.connectionWaits(), true);
    connection.close();
    const other = UnixListener.bind(`${dir}/t.sock`);
    const waiting = other.connectionWaits();
    other.close();
    let bound: ReturnType<typeof setTimeout> | undefined;
    const late = new Promise<string>((resolve) => {
      bound = setTimeout(() => resolve("still waiting after 5 s"), 5000);
    });
    assertEquals(await Promise.race([waiting, late]), false);
    clearTimeout(bound);
    let refused = "";
    try {
      UnixListener.bind(`${dir}/s.sock`);
    } catch (err: unknown) {
      refused = String(err);
    }
    assertMatch(refused, /bind: Address already in use/);
  } finally {
    listener.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("job service: 10,000 gRPC connect-call-close cycles, 50 streams that drop, GOAWAY at every moment: it never crashes, no other stream is cut", async () => {
  const s = await new Service("subreaper").ready();
  try {
    const service = servicePidOf(s.pid);
    const c = s.client;
    // A job that prints a numbered line every 20 ms, followed all along by a client of its own.
    const script = "i=0; while :; do i=$((i+1)); echo $i; sleep 0.02; done";
    await call<Job>((cb) => c.Run({ id: "ticker", argv: ["sh", "-c", script] }, cb));
    const watcher = client(s.socket, { "grpc.use_local_subchannel_pool": 1 });
    let text = "";
    let cut: string | null = null;
    // A deadline past the whole test (the helper's default of 30 s would end it first).
    const followed = watcher.FollowIO({ id: "ticker" }, { deadline: Date.now() + 600_000 });
    followed.on("data", (m: Output) => text += decoder.decode(m.stdout));
    followed.on("error", (err: Error) => cut = err.message);
    followed.on("end", () => cut = "ended");
    const clients = async (mode: string, count: number, ...more: string[]) => {
      const made = await run([
        DENO,
        "run",
        "--allow-all",
        JOB_CLIENTS,
        mode,
        s.socket,
        `${count}`,
        ...more,
      ], {
        env: { DENO_DIR: Deno.env.get("DENO_DIR") ?? `${ROOT}.deno/cache`, NO_COLOR: "1" },
        timeoutMs: 600_000, // bounded, and far above a loaded machine's time
      });
      assertEquals([made.code, made.stdout.trim()], [0, `${count}`], made.stderr);
    };
    // 10,000 cycles: four processes of 2,500 one after another each (50 s on a quiet machine).
    await Promise.all(Array.from({ length: 4 }, () => clients("grpc", 2500)));
    await clients("streams", 50, "ticker");
    await clients("goaway", 2000);
    assertEquals(servicePidOf(s.pid), service, "the service died and was started again");
    // The README's budget for the service under connection churn (its heap is capped).
    const anon = statusValue(service, "RssAnon");
    assertOk(anon < 96 * 1024, `the service's RssAnon: ${anon} KiB`);
    assertEquals(cut, null, `the watcher's stream was cut: ${cut}`);
    // Every line, in order, with none missing: the stream went on through it all.
    const lines = text.trim().split("\n").map(Number);
    assertOk(lines.length > 10, `only ${lines.length} lines`);
    assertEquals(lines, lines.map((_, i) => i + 1));
    followed.cancel();
    watcher.close();
  } finally {
    const { stderr } = await s.stop();
    assertOk(!/job service (was killed|exited)/.test(stderr), stderr);
  }
});

Deno.test("job service: a job that arms a parent-death signal lives on: its parent is its keeper, which outlives it and the service", async () => {
  const s = await new Service("subreaper").ready();
  let jobPid = 0;
  try {
    const c = s.client;
    const job = await call<Job>((cb) =>
      c.Run({
        id: "pdeath",
        argv: ["setpriv", "--pdeathsig", "TERM", "--", "sh", "-c", "echo armed; exec sleep 60"],
      }, cb)
    );
    jobPid = job.pid;
    await outputMatches(c, "pdeath", /^armed\n$/);
    // prctl(2)'s "parent" is the creating thread: the keeper has one, for the job's whole life.
    const keeper = statusValue(jobPid, "PPid");
    assertEquals(statusValue(keeper, "Threads"), 1);
    assertEquals(cmdline(keeper).slice(1, 3), ["job", "keep"]);
    Deno.kill(servicePidOf(s.pid), "SIGKILL");
    await waitUntil(() => servicePidOf(s.pid) === 0, "the service reaped");
    await answering(s.socket);
    const again = client(s.socket, { "grpc.use_local_subchannel_pool": 1 });
    const [listed] = await list(again);
    assertEquals([listed?.id, listed?.status], ["pdeath", "RUNNING"]);
    assertOk(exists(jobPid) && processState(jobPid) !== "Z", "the job died with the service");
    const cancelled = await call<Job>((cb) => again.Cancel({ id: "pdeath", graceMs: 1000 }, cb));
    assertEquals([cancelled.status, cancelled.signal], ["CANCELLED", "SIGTERM"]);
    again.close();
  } finally {
    if (jobPid > 0) cleanup([jobPid]);
    await s.stop();
  }
});

/** True when the v1 pids controller is mounted (and this test may make a cgroup in it). */
const PIDS_V1 = (() => {
  try {
    return Deno.statSync("/sys/fs/cgroup/pids/cgroup.procs").isFile;
  } catch {
    return false; // not mounted: the test that needs it says so
  }
})();

Deno.test({
  name:
    "job service: Cancel ends a fork-bombing job at its pids limit within seconds, and the service answers meanwhile",
  ignore: !PIDS_V1, // needs the v1 pids controller (and root)
  fn: async () => {
    const cgroup = `/sys/fs/cgroup/pids/denit-bomb-${crypto.randomUUID().slice(0, 8)}`;
    await Deno.mkdir(cgroup);
    const s = await new Service("subreaper").ready();
    try {
      await Deno.writeTextFile(`${cgroup}/pids.max`, "100");
      const c = s.client;
      // The job joins the cgroup, then forks for ever: every process forks in a loop.
      const bomb = `echo $$ > ${cgroup}/cgroup.procs && exec sh -c ` +
        `'b() { while :; do b & done; }; b' 2>/dev/null`;
      await call<Job>((cb) => c.Run({ id: "bomb", argv: ["sh", "-c", bomb] }, cb));
      const current = () => Number(Deno.readTextFileSync(`${cgroup}/pids.current`).trim());
      await waitUntil(() => current() >= 95, "the bomb at its limit");
      await call((cb) => c.List({}, cb)); // the service answers while the bomb runs
      const started = performance.now();
      // Its own first process may have ended already (a shell that cannot fork exits): the
      // status is whatever it is; what counts is that the whole group is gone, and soon.
      const cancelled = await call<Job>((cb) => c.Cancel({ id: "bomb", graceMs: 300 }, cb));
      const took = performance.now() - started;
      assertOk(cancelled.status !== "RUNNING", cancelled.status);
      // The grace, then KILLs until none is left: seconds, not the default grace's 10 s.
      assertOk(took < 300 + 9000, `Cancel took ${took.toFixed(0)} ms`);
      assertEquals(current(), 0);
      await call((cb) => c.List({}, cb));
    } finally {
      await s.stop();
      await removeCgroup(cgroup);
    }
  },
});

Deno.test("job service: a job whose keeper died before it recorded the end is recorded as 125, not left running", async () => {
  const s = await new Service("subreaper").ready();
  let keeper = 0;
  try {
    const c = s.client;
    const job = await call<Job>((cb) => c.Run({ id: "kept", argv: ["sleep", "600"] }, cb));
    const pid = s.host(job.pid);
    keeper = Number(readProcStat(pid).field(4));
    // The keeper cannot record what it does not see: stopped, then killed after its job.
    Deno.kill(keeper, "SIGSTOP");
    Deno.kill(pid, "SIGKILL");
    await waitUntil(
      () => readProcStat(pid).field(3) === "Z",
      "the job a zombie of its stopped keeper",
    );
    Deno.kill(keeper, "SIGKILL");
    const done = await finished(c, "kept");
    assertEquals([done.status, done.exitCode, done.signal], ["FAILED", 125, ""]);
    const list = await call<{ jobs: Job[] }>((cb) => c.List({ ids: ["kept"] }, cb));
    assertEquals(list.jobs.map((j) => j.status), ["FAILED"]);
  } finally {
    await s.stop();
  }
});

Deno.test({
  name: "job service: a job the OOM killer ends says cause=oom, and the service lives on",
  ignore: MEMORY_V1 === null, // needs a v1 memory cgroup of its own (and root)
  fn: async () => {
    // denit, its service and the jobs' keepers in a memory cgroup of 256 MiB; the job
    // allocates until the kernel's OOM killer ends it (its keeper makes it the first pick).
    const cgroup = `${MEMORY_V1}/denit-job-oom-${crypto.randomUUID().slice(0, 8)}`;
    await Deno.mkdir(cgroup);
    await Deno.writeTextFile(`${cgroup}/memory.limit_in_bytes`, String(256 * 1024 * 1024));
    await Deno.writeTextFile(`${cgroup}/memory.swappiness`, "0").catch(() => {});
    const s = await new Service("subreaper", [], [], inCgroup(cgroup)).ready();
    try {
      const job = (...args: string[]) => run([...DENIT, "job", "--socket", s.socket, ...args]);
      const ran = await job("run", "--id", "hog", "-f", "--", staticFixture("hog"));
      assertEquals([ran.code, ran.stdout], [137, "allocating\n"], ran.stderr);
      const follow = await job("follow", "hog");
      assertEquals(follow.code, 137, follow.stderr);
      assertMatch(follow.stdout, /^hog failed pid=\d+ signal=SIGKILL cause=oom\n$/);
      // A job killed by a plain SIGKILL is not an OOM kill.
      await job("run", "--id", "plain", "--", "sleep", "60");
      const listed = await call<{ jobs: Job[] }>((cb) => s.client.List({ ids: ["plain"] }, cb));
      Deno.kill(defined(listed.jobs[0], "the job").pid, "SIGKILL");
      const killed = await job("follow", "plain");
      // Follow may find it running still (its keeper has not recorded the end yet): no cause.
      assertMatch(
        killed.stdout,
        /^(plain running pid=\d+\n)?plain failed pid=\d+ signal=SIGKILL\n$/,
      );
      assertOk(exists(servicePidOf(s.pid)), "the service is gone");
    } finally {
      await s.stop();
      await removeCgroup(cgroup);
    }
  },
});

Deno.test({
  name:
    "job service: every job's end is seen when the kernel drops directory events (a full queue)",
  ignore: Deno.uid() !== 0, // lowers the kernel's inotify queue for the service it starts
  fn: async () => {
    const limit = "/proc/sys/fs/inotify/max_queued_events";
    const saved = await Deno.readTextFile(limit);
    let s: Service | null = null;
    try {
      // The service's watch takes the limit when it starts: a queue of 16 events.
      await Deno.writeTextFile(limit, "16");
      s = await new Service("subreaper").ready();
    } finally {
      await Deno.writeTextFile(limit, saved);
    }
    let timer: ReturnType<typeof setTimeout> | undefined;
    try {
      const c = s.client;
      const ids = Array.from({ length: 100 }, (_, i) => `short-${i}`);
      await Promise.all(
        ids.map((id) => call<Job>((cb) => c.Run({ id, argv: ["sleep", "1"] }, cb))),
      );
      // Followed while they run (each stream has said RUNNING); then the service is stopped
      // while they end: their events wait in its queue, which overflows, and are dropped.
      const follows = ids.map((id) => {
        const first = Promise.withResolvers<void>();
        const end = new Promise<Job>((resolve, reject) => {
          let last: Job | null = null;
          const stream = c.Follow({ id });
          stream.on("data", (job: Job) => (last = job, first.resolve()));
          stream.on("error", reject);
          stream.on("end", () => last === null ? reject(new Error(id)) : resolve(last));
        });
        return { first: first.promise, end };
      });
      await Promise.all(follows.map((f) => f.first));
      const service = servicePidOf(s.pid);
      Deno.kill(service, "SIGSTOP");
      const keepers = () => childrenOf(s.pid).filter((pid) => cmdline(pid).includes("keep"));
      try {
        await waitUntil(() => keepers().length === 0, "every keeper done", 10_000);
      } finally {
        Deno.kill(service, "SIGCONT");
      }
      const deadline = new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error("a job's end was never seen")), 15_000);
      });
      const ends = await Promise.race([Promise.all(follows.map((f) => f.end)), deadline]);
      assertEquals(new Set(ends.map((job) => job.status)), new Set(["SUCCEEDED"]));
    } finally {
      clearTimeout(timer);
      await s.stop();
    }
  },
});

/** Whether a thread of `pid` is blocked in write(2) on its stderr (/proc/PID/task/TID/syscall). */
function writingStderr(pid: number): boolean {
  const write = Deno.build.arch === "aarch64" ? 64 : 1;
  try {
    for (const task of Deno.readDirSync(`/proc/${pid}/task`)) {
      const call = Deno.readTextFileSync(`/proc/${pid}/task/${task.name}/syscall`);
      if (call.startsWith(`${write} 0x2 `)) return true;
    }
  } catch {
    // Gone meanwhile.
  }
  return false;
}

Deno.test("job service: its last line before it exits reaches a stderr that drains slowly (a spool made untrusted)", async () => {
  const dir = await Deno.makeTempDir({ prefix: "denit-service-line-" });
  // The child fills the stderr pipe that denit and the service share (64 KiB): lines then wait.
  const script = "head -c 65536 /dev/zero >&2; echo up; exec sleep 30";
  const proc = new Deno.Command(DENIT[0] ?? "", {
    args: [...DENIT.slice(1), "-s", ...jobsOptions(dir), "--", "sh", "-c", script],
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  // Bounded: were the pipe full before the child's 64 KiB, the child would wait for a reader.
  const guard = setTimeout(() => proc.kill("SIGKILL"), 30_000);
  const stdout = proc.stdout.pipeThrough(new TextDecoderStream()).getReader();
  try {
    for (let seen = ""; !seen.includes("up\n");) {
      const { value, done } = await stdout.read();
      if (done) throw new Error(`denit ended before its child said up: ${seen}`);
      seen += value;
    }
    await Deno.chmod(`${dir}/spool`, 0o777);
    const client = run([...DENIT, "job", "--socket", `${dir}/jobs.sock`, "--wait", "1s", "list"]);
    // The service refuses the spool and says why: it waits on the full pipe before it exits.
    await waitUntil(() => {
      const service = servicePidOf(proc.pid);
      return service > 0 && writingStderr(service);
    }, "the service's line waiting for stderr");
    const stderr = new Response(proc.stderr).text();
    assertEquals((await client).code, 125);
    proc.kill("SIGTERM");
    assertEquals((await proc.status).code, 143);
    assertMatch(
      (await stderr).replaceAll("\0", ""),
      /denit-jobs\[\d+\] error: cannot serve jobs: job spool: ".*" is writable by other users/,
    );
  } finally {
    clearTimeout(guard);
    await stdout.cancel();
    try {
      proc.kill("SIGKILL");
    } catch {
      // Ended already.
    }
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("job service: GRPC_TRACE and GRPC_VERBOSITY in the container's environment reach the jobs, not denit's log", async () => {
  // The container sets them for a gRPC program of its own; denit's log stays JSON lines.
  const env = ["env", "GRPC_TRACE=all", "GRPC_VERBOSITY=DEBUG"];
  const s = await new Service("subreaper", ["--log-format", "json"], [], env).ready();
  let stderr = "";
  try {
    const c = s.client;
    await call<Job>((cb) => c.Run({ id: "trace", argv: ["sh", "-c", 'echo "$GRPC_TRACE"'] }, cb));
    await finished(c, "trace");
    const out = concat((await collect(c.FollowIO({ id: "trace" }))).map((m) => m.stdout));
    assertEquals(decoder.decode(out), "all\n", "the job's GRPC_TRACE");
  } finally {
    stderr = (await s.stop()).stderr;
  }
  for (const line of stderr.split("\n").filter((l) => l !== "")) {
    assertOk(line.startsWith("{"), `not one of denit's JSON lines: ${line}`);
    JSON.parse(line);
  }
});
