/**
 * The job service (--jobs-socket), black-box: a real gRPC client (@grpc/grpc-js with the
 * contract loaded from proto/ by @grpc/proto-loader, independently of denit's copy) talks to
 * denit as PID 1 of a PID namespace and as a subreaper; real jobs, real process groups,
 * real spool files. Also `denit job`, `denit bridge` and the service's cost when it is off.
 */

import * as grpc from "@grpc/grpc-js";
import parsePrometheusTextFormat from "parse-prometheus-text-format";
import { assertEquals, assertMatch, assertOk } from "./assert.ts";
import {
  bundleAlone,
  cleanup,
  DENIT,
  denitArgv,
  denitForAnyUser,
  exists,
  freePort,
  listeningSocketsOf,
  MODES,
  processState,
  program,
  rawHttp,
  run,
  Running,
} from "./helpers.ts";
import { descendants } from "../src/supervise/leftovers.ts";
import {
  call,
  client,
  collect,
  concat,
  decoder,
  finished,
  type Job,
  type Output,
  output,
  rejection,
  Service,
  servicePidOf,
  sha256,
} from "./jobs_client.ts";
import {
  Job as StoredJob,
  JOB_OUTPUT_CAP,
  JobTable,
  KEEP_FINISHED_JOBS,
} from "../src/jobs/store.ts";

for (const mode of MODES) {
  Deno.test(`${mode}: jobs: Run, Follow, FollowIO and List; Run is idempotent; 126/127 are results`, async () => {
    const s = await new Service(mode).ready();
    try {
      const socketMode = (await Deno.stat(s.socket)).mode ?? 0;
      assertEquals(socketMode & 0o777, 0o600);
      assertEquals(((await Deno.stat(`${s.dir}/run`)).mode ?? 0) & 0o777, 0o700);
      assertEquals(((await Deno.stat(s.spool)).mode ?? 0) & 0o777, 0o700);
      // A Unix socket only: no TCP listener belongs to denit.
      assertEquals(listeningSocketsOf(s.pid), 0);
      const c = s.client;
      const job = await call<Job>((cb) =>
        c.Run({
          id: "build-1",
          argv: ["sh", "-c", 'echo "out $GREETING $(pwd)"; echo err >&2; exit 3'],
          workDir: "/tmp",
          env: { GREETING: "hello" },
        }, cb)
      );
      assertEquals(job.id, "build-1");
      assertOk(job.pid > 0, `pid ${job.pid}`);
      const done = await finished(c, "build-1");
      assertEquals([done.status, done.exitCode, done.signal], ["FAILED", 3, ""]);
      assertOk(done.finishedAtMs >= done.startedAtMs && done.startedAtMs > 0);
      const { out, err } = await output(c, "build-1");
      assertEquals(out, "out hello /tmp\n");
      assertEquals(err, "err\n");

      // The same id again: the same job, nothing started.
      const again = await call<Job>((cb) =>
        c.Run({ id: "build-1", argv: ["sh", "-c", "echo second; exit 0"] }, cb)
      );
      assertEquals([again.pid, again.status, again.exitCode], [job.pid, "FAILED", 3]);

      const ok = await call<Job>((cb) => c.Run({ id: "ok", argv: ["true"] }, cb));
      assertEquals((await finished(c, ok.id)).status, "SUCCEEDED");
      await call<Job>((cb) => c.Run({ id: "missing", argv: ["no-such-command-here"] }, cb));
      const missing = await finished(c, "missing");
      assertEquals([missing.status, missing.exitCode], ["FAILED", 127]);
      assertMatch((await output(c, "missing")).err, /^denit: .*no-such-command-here.*not found\n$/);
      await Deno.writeTextFile(`${s.dir}/not-executable`, "#!/bin/sh\n", { mode: 0o644 });
      await call<Job>((cb) => c.Run({ id: "denied", argv: [`${s.dir}/not-executable`] }, cb));
      assertEquals((await finished(c, "denied")).exitCode, 126);

      // Follow: the job as it is, then its change, then the end of the stream.
      const gate = `${s.dir}/go`;
      const wait = 'while [ ! -e "$0" ]; do sleep 0.02; done';
      await call<Job>((cb) => c.Run({ id: "gated", argv: ["sh", "-c", wait, gate] }, cb));
      const follow = c.Follow({ id: "gated" });
      const states = collect(follow);
      await new Promise((resolve) => follow.once("data", resolve));
      await Deno.writeTextFile(gate, "");
      const seen = await states;
      assertEquals(seen.map((j) => j.status), ["RUNNING", "SUCCEEDED"]);
      assertEquals([seen[0]?.finishedAtMs, seen[1]?.exitCode], [0, 0]);
      assertOk((seen[1]?.finishedAtMs ?? 0) >= (seen[1]?.startedAtMs ?? Infinity));

      const { jobs } = await call<{ jobs: Job[] }>((cb) => c.List({}, cb));
      assertEquals(jobs.map((j) => [j.id, j.status]), [
        ["build-1", "FAILED"],
        ["ok", "SUCCEEDED"],
        ["missing", "FAILED"],
        ["denied", "FAILED"],
        ["gated", "SUCCEEDED"],
      ]);
    } finally {
      const { code, stderr } = await s.stop();
      assertEquals(code, 143, stderr);
    }
  });

  Deno.test(`${mode}: jobs: Cancel stops a group whose grandchildren ignore TERM; nothing is left`, async () => {
    const s = await new Service(mode).ready();
    const pids: number[] = [];
    try {
      const c = s.client;
      const script = 'trap "" TERM; for i in 1 2; do (trap "" TERM; exec sleep 60) & ' +
        'echo "kid $!"; done; echo ready; wait; wait';
      const job = await call<Job>((cb) =>
        c.Run({ id: "stubborn", argv: ["sh", "-c", script] }, cb)
      );
      pids.push(s.host(job.pid));
      const stream = c.FollowIO({ id: "stubborn", readStdout: 0, readStderr: 0 });
      const ended = collect(stream);
      let text = "";
      await new Promise<void>((resolve) => {
        stream.on("data", (m: Output) => {
          text += decoder.decode(m.stdout);
          if (text.includes("ready\n")) resolve();
        });
      });
      for (const match of text.matchAll(/^kid (\d+)$/gm)) pids.push(s.host(Number(match[1])));
      assertEquals(pids.length, 3, text);
      const started = Date.now();
      const cancelled = await call<Job>((cb) => c.Cancel({ id: "stubborn", graceMs: 300 }, cb));
      const took = Date.now() - started;
      assertEquals([cancelled.status, cancelled.signal], ["CANCELLED", "SIGKILL"]);
      assertOk(took >= 300 && took < 5000, `Cancel took ${took} ms`);
      // Cancel returned once the whole group was reaped: no process, not even a zombie.
      for (const pid of pids) assertOk(!exists(pid), `${pid} is still there`);
      await ended; // the output ends with the group
      const child = (await call<{ jobs: Job[] }>((cb) => c.List({}, cb))).jobs[0];
      assertEquals(child?.status, "CANCELLED");
      // Cancel of a finished job answers at once.
      const twice = await call<Job>((cb) => c.Cancel({ id: "stubborn" }, cb));
      assertEquals(twice.status, "CANCELLED");
    } finally {
      cleanup(pids);
      const { code, stderr } = await s.stop();
      assertEquals(code, 143, stderr);
    }
  });
}

Deno.test("jobs: FollowIO after dropped connections: every byte once (SHA-256), from offsets", async () => {
  const s = await new Service("subreaper").ready();
  try {
    const data = crypto.getRandomValues(new Uint8Array(60_000));
    const file = `${s.dir}/data`;
    await Deno.writeFile(file, data);
    const rounds = 40;
    const expected = new Uint8Array(data.length * rounds);
    for (let i = 0; i < rounds; i++) expected.set(data, i * data.length);
    // Slow enough that the client drops in the middle of it, fast enough to stay short.
    const script = `for i in $(seq ${rounds}); do cat "$1"; cat "$1" >&2; sleep 0.01; done`;
    await call<Job>((cb) =>
      s.client.Run({ id: "stream", argv: ["sh", "-c", script, "sh", file] }, cb)
    );
    const got = { stdout: [] as Uint8Array[], stderr: [] as Uint8Array[] };
    const at = { stdout: 0, stderr: 0 };
    let drops = 0;
    for (;;) {
      const c = client(s.socket);
      const stream = c.FollowIO({ id: "stream", readStdout: at.stdout, readStderr: at.stderr });
      const ended = await new Promise<boolean>((resolve) => {
        let seen = 0;
        stream.on("data", (m: Output) => {
          if (m.stdout.length > 0) got.stdout.push(m.stdout);
          if (m.stderr.length > 0) got.stderr.push(m.stderr);
          at.stdout = m.stdoutOffset;
          at.stderr = m.stderrOffset;
          // Drop the connection after a few messages, three times over.
          if (++seen === 5 && drops < 3) {
            drops++;
            c.close();
            stream.cancel();
          }
        });
        stream.on("error", () => resolve(false));
        stream.on("end", () => resolve(true));
      });
      c.close();
      if (ended) break;
    }
    assertEquals(drops, 3);
    const [want, out, err] = await Promise.all([
      sha256(expected),
      sha256(concat(got.stdout) as Uint8Array<ArrayBuffer>),
      sha256(concat(got.stderr) as Uint8Array<ArrayBuffer>),
    ]);
    assertEquals([out, err], [want, want]);
  } finally {
    await s.stop();
  }
});

Deno.test("jobs: 100 concurrent jobs, each with its own output; none left, fds back", async () => {
  const s = await new Service("subreaper").ready();
  try {
    const c = s.client;
    // Warm up: the first job loads what later ones reuse.
    await call<Job>((cb) => c.Run({ id: "warm", argv: ["true"] }, cb));
    await finished(c, "warm");
    const fdsBefore = await countFds(s.pid);
    const ids = Array.from({ length: 100 }, (_, i) => `job-${i}`);
    const jobs = await Promise.all(
      ids.map((id) =>
        call<Job>((cb) => c.Run({ id, argv: ["sh", "-c", 'sleep 0.3; echo "I am $0"', id] }, cb))
      ),
    );
    assertEquals(new Set(jobs.map((j) => j.pid)).size, 100);
    const ends = await Promise.all(ids.map((id) => finished(c, id)));
    assertOk(ends.every((j) => j.status === "SUCCEEDED"), JSON.stringify(ends.slice(0, 3)));
    const outs = await Promise.all(ids.map((id) => output(c, id)));
    assertEquals(outs.map((o) => o.out), ids.map((id) => `I am ${id}\n`));
    for (const job of jobs) assertOk(!exists(job.pid), `job ${job.pid} still there`);
    const fdsAfter = await countFds(s.pid);
    assertOk(fdsAfter <= fdsBefore + 2, `fds ${fdsBefore} → ${fdsAfter}`);
  } finally {
    await s.stop();
  }
});

async function countFds(pid: number): Promise<number> {
  let n = 0;
  for await (const _ of Deno.readDir(`/proc/${pid}/fd`)) n++;
  return n;
}

function rssKiB(pid: number): number {
  const status = Deno.readTextFileSync(`/proc/${pid}/status`);
  return Number(/^VmRSS:\s+(\d+)/m.exec(status)?.[1] ?? 0);
}

Deno.test("jobs: a job that prints 1 GiB: denit's and the service's memory stay flat, the spool stops at the cap", async () => {
  const s = await new Service("subreaper").ready();
  try {
    const c = s.client;
    await call<Job>((cb) =>
      c.Run({ id: "small", argv: ["sh", "-c", "head -c 1000000 /dev/zero"] }, cb)
    );
    await finished(c, "small");
    await output(c, "small");
    // The service and PID 1: neither holds what a job prints (its keeper moves it).
    const service = servicePidOf(s.pid);
    const rss = () => rssKiB(s.pid) + rssKiB(service);
    const before = rss();
    await call<Job>((cb) =>
      c.Run({ id: "big", argv: ["sh", "-c", "head -c 1073741824 /dev/zero; echo done >&2"] }, cb)
    );
    let peak = before;
    const done = finished(c, "big");
    const sampler = setInterval(() => peak = Math.max(peak, rss()), 20);
    const job = await done;
    clearInterval(sampler);
    assertEquals(job.status, "SUCCEEDED");
    assertEquals(job.stdoutBytes, JOB_OUTPUT_CAP);
    assertOk(job.outputTruncated);
    // Holding the stored output would add its 64 MiB; the service's reading of the keeper's
    // changes (an event per write) makes garbage that its heap's collector lets grow first.
    assertOk(peak - before < 48 * 1024, `RSS ${before} → peak ${peak} KiB`);
    // FollowIO sends the stored part, then says it was cut.
    const messages = await collect(c.FollowIO({ id: "big", readStdout: JOB_OUTPUT_CAP - 10 }));
    assertEquals(messages.at(-1)?.truncated, true);
    assertEquals(messages.reduce((n, m) => n + m.stdout.length, 0), 10);
  } finally {
    await s.stop();
  }
});

Deno.test("jobs: bad input gets a clear status, and the service and the child go on", async () => {
  const s = await new Service("subreaper").ready();
  try {
    const c = s.client;
    const unknown = await rejection(collect(c.Follow({ id: "nope" })));
    assertEquals(unknown.code, grpc.status.NOT_FOUND);
    assertMatch(unknown.details, /no job "nope"/);
    assertEquals(
      (await rejection(collect(c.FollowIO({ id: "nope" })))).code,
      grpc.status.NOT_FOUND,
    );
    assertEquals(
      (await rejection(call((cb) => c.Cancel({ id: "nope" }, cb)))).code,
      grpc.status.NOT_FOUND,
    );
    const badKey = await rejection(
      call((cb) => c.Run({ id: "e", argv: ["true"], env: { "BAD-KEY": "1" } }, cb)),
    );
    assertEquals(badKey.code, grpc.status.INVALID_ARGUMENT);
    assertMatch(badKey.details, /invalid env key "BAD-KEY"/);
    const empty = await rejection(call((cb) => c.Run({ id: "a", argv: [] }, cb)));
    assertEquals(empty.code, grpc.status.INVALID_ARGUMENT);
    const badId = await rejection(call((cb) => c.Run({ id: "", argv: ["true"] }, cb)));
    assertEquals(badId.code, grpc.status.INVALID_ARGUMENT);
    const badDir = await rejection(
      call((cb) => c.Run({ id: "d", argv: ["true"], workDir: "/no/such/dir" }, cb)),
    );
    assertEquals(badDir.code, grpc.status.INVALID_ARGUMENT);
    const relative = await rejection(
      call((cb) => c.Run({ id: "r", argv: ["true"], workDir: "tmp" }, cb)),
    );
    assertEquals([relative.code, relative.details], [
      grpc.status.INVALID_ARGUMENT,
      'work_dir "tmp" is not an absolute path',
    ]);
    // None of the refused runs exists.
    assertEquals((await call<{ jobs: Job[] }>((cb) => c.List({}, cb))).jobs.length, 0);

    // A client that leaves in the middle of a stream.
    await call<Job>((cb) => c.Run({ id: "long", argv: ["sh", "-c", "echo hi; sleep 60"] }, cb));
    const other = client(s.socket);
    const stream = other.FollowIO({ id: "long" });
    stream.on("error", () => {}); // CANCELLED: this client's own doing
    await new Promise((resolve) => stream.once("data", resolve));
    other.close();
    stream.cancel();
    // Garbage on the socket: not HTTP/2.
    const raw = await Deno.connect({ transport: "unix", path: s.socket });
    await raw.write(new TextEncoder().encode("GET / HTTP/1.1\r\n\r\n\0\xff garbage ".repeat(100)));
    const closed = await raw.read(new Uint8Array(4096)).catch(() => null);
    raw.close();
    assertOk(closed === null || typeof closed === "number");
    // The service still answers, the job still runs and still streams.
    const { jobs } = await call<{ jobs: Job[] }>((cb) => c.List({}, cb));
    assertEquals(jobs.map((j) => [j.id, j.status]), [["long", "RUNNING"]]);
    const cancelled = await call<Job>((cb) => c.Cancel({ id: "long", graceMs: 2000 }, cb));
    assertEquals([cancelled.status, cancelled.signal], ["CANCELLED", "SIGTERM"]);
    assertEquals((await output(c, "long")).out, "hi\n");
  } finally {
    const { code, stderr } = await s.stop();
    assertEquals(code, 143, stderr);
  }
});

Deno.test("jobs: signals go to the main child only; its end ends denit and stops the jobs", async () => {
  const dir = await Deno.makeTempDir({ prefix: "denit-jobs-" });
  const socket = `${dir}/jobs.sock`;
  const flag = `${dir}/flag`;
  const main = 'trap "echo main got USR1" USR1; echo up; ' +
    'while [ ! -e "$0" ]; do sleep 0.05; done; exit 5';
  const proc = new Running(
    denitArgv("subreaper", [
      "--jobs-socket",
      socket,
      "--jobs-spool",
      `${dir}/spool`,
      "--kill-after",
      "1s",
      "--",
      "sh",
      "-c",
      main,
      flag,
    ]),
  );
  const c = client(socket);
  let jobPid = 0;
  try {
    await proc.waitFor(/^up$/);
    const script = 'trap "echo job got USR1" USR1; echo started; while :; do sleep 0.05; done';
    const job = await call<Job>((cb) => c.Run({ id: "j", argv: ["sh", "-c", script] }, cb));
    jobPid = job.pid;
    const stream = c.FollowIO({ id: "j" });
    stream.on("error", () => {}); // the service goes away with denit
    await new Promise((resolve) => stream.once("data", resolve));
    Deno.kill(proc.child.pid, "SIGUSR1");
    await proc.waitFor(/^main got USR1$/);
    await Deno.writeTextFile(flag, "");
    const status = await proc.status();
    assertEquals(status.code, 5, status.stderr);
    assertOk(!exists(job.pid), "the job outlived denit");
    // The spool of this run of denit: SPOOL/denit-PID-START/N.out.
    const [run] = await Array.fromAsync(Deno.readDir(`${dir}/spool`), (e) => e.name);
    assertMatch(run ?? "", new RegExp(`^denit-${proc.child.pid}-\\d+$`));
    const spooled = await Deno.readTextFile(`${dir}/spool/${run}/1.out`);
    assertEquals(spooled, "started\n"); // never "job got USR1"
    await assertGone(socket);
  } finally {
    c.close();
    cleanup(jobPid === 0 ? [] : [jobPid]);
    await Deno.remove(dir, { recursive: true });
  }
});

async function assertGone(path: string): Promise<void> {
  try {
    await Deno.lstat(path);
  } catch (err: unknown) {
    if (err instanceof Deno.errors.NotFound) return;
    throw err;
  }
  throw new Error(`${path} is still there`);
}

Deno.test("jobs: /status shows the counts, /metrics the counters by outcome and the running gauge", async () => {
  const port = freePort();
  const s = await new Service("subreaper", ["--health-addr", `127.0.0.1:${port}`]).ready();
  try {
    const c = s.client;
    await call<Job>((cb) => c.Run({ id: "ok", argv: ["true"] }, cb));
    await call<Job>((cb) => c.Run({ id: "bad", argv: ["false"] }, cb));
    await call<Job>((cb) => c.Run({ id: "long", argv: ["sleep", "60"] }, cb));
    await Promise.all([finished(c, "ok"), finished(c, "bad")]);
    await call<Job>((cb) => c.Run({ id: "gone", argv: ["sleep", "60"] }, cb));
    await call<Job>((cb) => c.Cancel({ id: "gone", graceMs: 1000 }, cb));
    const body = async (path: string) => {
      const text = await rawHttp(port, `GET ${path} HTTP/1.0\r\n\r\n`, { timeoutMs: 3000 });
      return text.slice(text.indexOf("\r\n\r\n") + 4);
    };
    // The counts reach denit (and /status) a moment after the calls return: wait for them.
    const expected = { running: 1, started: 4, succeeded: 1, failed: 1, cancelled: 1 };
    let status = JSON.parse(await body("/status"));
    for (const by = Date.now() + 5000; JSON.stringify(status.jobs) !== JSON.stringify(expected);) {
      assertOk(Date.now() < by, JSON.stringify(status.jobs));
      await new Promise((resolve) => setTimeout(resolve, 20));
      status = JSON.parse(await body("/status"));
    }
    const families = parsePrometheusTextFormat(await body("/metrics")) as Array<{
      name: string;
      metrics: Array<{ value: string; labels?: Record<string, string> }>;
    }>;
    const value = (name: string, labels: Record<string, string> = {}) =>
      families.find((f) => f.name === name)?.metrics.find((m) =>
        Object.entries(labels).every(([k, v]) => m.labels?.[k] === v)
      )?.value;
    assertEquals(value("denit_jobs_started_total"), "4");
    assertEquals(value("denit_jobs_running"), "1");
    assertEquals(
      ["succeeded", "failed", "cancelled"].map((outcome) =>
        value("denit_jobs_finished_total", { outcome })
      ),
      ["1", "1", "1"],
    );
  } finally {
    await s.stop();
  }
});

Deno.test("jobs: a job's orphans are reaped by its keeper, not by PID 1, and none is left a zombie", async () => {
  const port = freePort();
  const s = await new Service("pid1", ["--health-addr", `127.0.0.1:${port}`]).ready();
  try {
    const reaped = async () => {
      const text = await rawHttp(port, "GET /metrics HTTP/1.0\r\n\r\n", { timeoutMs: 3000 });
      return Number(/^denit_zombies_reaped_total (\d+)$/m.exec(text)?.[1] ?? NaN);
    };
    const before = await reaped();
    // 200 orphans: each subshell starts a sleep and exits at once, leaving it to the nearest
    // subreaper. The job waits until all of them ended (none of its group left but itself).
    const line = "i=0; while [ $i -lt 200 ]; do (sleep 0.2 &); i=$((i+1)); done; " +
      "while pgrep -g $$ sleep >/dev/null; do sleep 0.05; done";
    await call<Job>((cb) => s.client.Run({ id: "orphans", argv: ["sh", "-c", line] }, cb));
    const job = await finished(s.client, "orphans");
    assertEquals([job.status, job.exitCode], ["SUCCEEDED", 0]);
    const after = await reaped();
    assertOk(after - before < 10, `PID 1 reaped ${after - before} processes for one job`);
    const zombies = descendants(s.pid).filter((pid) => processState(pid) === "Z");
    assertEquals(zombies, []);
  } finally {
    await s.stop();
  }
});

Deno.test("jobs: denit job run -f, follow, logs, cancel and list; clear errors", async () => {
  const s = await new Service("subreaper").ready();
  const job = (...args: string[]) => run([...DENIT, "job", "--socket", s.socket, ...args]);
  try {
    const ran = await job(
      "run",
      "--id",
      "one",
      "-f",
      "--",
      "sh",
      "-c",
      "echo out; echo err >&2; exit 3",
    );
    assertEquals([ran.code, ran.stdout, ran.stderr], [3, "out\n", "err\n"]);
    const logs = await job("logs", "one");
    assertEquals([logs.code, logs.stdout, logs.stderr], [0, "out\n", "err\n"]);
    const follow = await job("follow", "one");
    assertEquals([follow.code, follow.stdout], [
      3,
      "one failed pid=" + /pid=(\d+)/.exec(follow.stdout)?.[1] + " exit=3\n",
    ]);
    const started = await job("run", "--id", "two", "--env", "X=1", "--", "sleep", "60");
    assertEquals(started.code, 0, started.stderr);
    assertMatch(started.stdout, /^two running pid=\d+\n$/);
    const cancel = await job("cancel", "--grace", "2s", "two");
    assertMatch(cancel.stdout, /^two cancelled pid=\d+ signal=SIGTERM\n$/);
    const list = await job("list");
    assertMatch(list.stdout, /^ID\tSTATUS\tEXIT\tPID\tSTARTED\tFINISHED\tCOMMAND\n/);
    assertMatch(
      list.stdout,
      /\none\tfailed\t3\t\d+\t\S+Z\t\S+Z\tsh -c echo out; echo err >&2; exit 3\n/,
    );
    assertMatch(list.stdout, /\ntwo\tcancelled\tSIGTERM\t/);
    // Control characters in a command cannot reach the terminal of whoever lists the jobs.
    const escaped = await job("run", "--id", "esc", "-f", "--", "true", "\x1b]0;x\x07", "a\\b\nc");
    assertEquals(escaped.code, 0, escaped.stderr);
    assertMatch(
      (await job("list")).stdout,
      /\nesc\tsucceeded\t0\t.*\ttrue \\x1b\]0;x\\x07 a\\\\b\\nc\n/,
    );
    // Arguments travel as UTF-8: one that is not is refused, not altered.
    const bytes = await run([
      "sh",
      "-c",
      `exec "$0" job --socket "$1" run -- printf '%s' "$(printf 'a\\377')"`,
      ...DENIT,
      s.socket,
    ]);
    assertEquals([bytes.code, bytes.stderr], [
      2,
      'denit job: "a\\xff" is not UTF-8, which a job\'s arguments and values must be\n',
    ]);
    const unknown = await job("logs", "nope");
    assertEquals(unknown.code, 1);
    assertEquals(unknown.stderr, 'denit job: NOT_FOUND: no job "nope"\n');
    const usage = await job("fr\nob\x1b[1m");
    assertEquals(usage.code, 2);
    assertMatch(usage.stderr, /^denit job: Unknown job command "fr\\nob\\x1b\[1m"\n/);
    // A bad value read when the call is made is a usage error too (exit 2, not 125).
    const env = await job("run", "--env", "NO\nVALUE", "--", "true");
    assertEquals(env.code, 2, env.stderr);
    assertMatch(
      env.stderr,
      /^denit job: Invalid environment entry "NO\\nVALUE": use KEY=VALUE \(from --env\)\nUsage: /,
    );
    // A path gRPC cannot reach (a line break): refused as a usage error, on one line.
    const broken = await run([...DENIT, "job", "--socket", `${s.dir}/a\nb.sock`, "list"]);
    assertEquals([broken.code, broken.stdout], [2, ""]);
    assertMatch(
      broken.stderr,
      /^denit job: Invalid socket path ".*\/a\\nb\.sock": gRPC cannot reach a path with a line break \(from --socket\)\nUsage: /,
    );
    const none = await run([...DENIT, "job", "--socket", `${s.dir}/nothing.sock`, "list"]);
    assertEquals([none.code, none.stdout], [125, ""]);
    assertMatch(
      none.stderr,
      /^denit job: no job service answers at ".*\/nothing.sock" \(ENOENT\): it is the --jobs-socket of a running denit; give its path with --socket or DENIT_JOBS_SOCKET \(from another container: through denit bridge\)\n$/,
    );
    // A command that cannot be run: Run says so, with the shell's codes.
    const missing = await job("run", "--", "/nonexistent");
    assertEquals(missing.code, 127, missing.stderr);
    assertMatch(missing.stdout, /^\S+ failed pid=\d+ exit=127\n$/);
    const notDirectory = await job("run", "--", "/");
    assertEquals(notDirectory.code, 126, notDirectory.stderr);
  } finally {
    await s.stop();
  }
});

/**
 * A local socket whose every connection is carried by a `denit bridge` subprocess over its
 * stdin and stdout, as `kubectl exec -i POD -- /denit bridge` would carry it.
 */
class BridgeFront {
  readonly bridges: Deno.ChildProcess[] = [];
  readonly #listener: Deno.Listener;
  readonly #serving: Promise<void>;

  constructor(readonly path: string, service: string) {
    const listener = Deno.listen({ transport: "unix", path });
    this.#listener = listener;
    this.#serving = (async () => {
      for await (const conn of listener) {
        const bridge = new Deno.Command(DENIT[0] ?? "", {
          args: [...DENIT.slice(1), "bridge", service],
          stdin: "piped",
          stdout: "piped",
          stderr: "null",
        }).spawn();
        this.bridges.push(bridge);
        void conn.readable.pipeTo(bridge.stdin).catch(() => {});
        void bridge.stdout.pipeTo(conn.writable).catch(() => {});
      }
    })().catch(() => {});
  }

  /** Stops accepting and ends every bridge still running (by pid). */
  async close(): Promise<void> {
    this.#listener.close();
    await this.#serving;
    for (const bridge of this.bridges) {
      try {
        bridge.kill("SIGKILL");
      } catch {
        // Ended already.
      }
      await bridge.status;
    }
  }
}

Deno.test("jobs: a gRPC client through denit bridge (stdin/stdout) gets the same service", async () => {
  const s = await new Service("subreaper").ready();
  const front = new BridgeFront(`${s.dir}/front.sock`, s.socket);
  try {
    const c = client(front.path);
    await call<Job>((cb) =>
      c.Run({ id: "bridged", argv: ["sh", "-c", "echo across; exit 4"] }, cb)
    );
    const done = await finished(c, "bridged");
    assertEquals([done.status, done.exitCode], ["FAILED", 4]);
    assertEquals((await output(c, "bridged")).out, "across\n");
    c.close();
    // Every bridge ends, with 0, once its client has gone.
    const statuses = await Promise.all(front.bridges.map((bridge) => bridge.status));
    assertOk(statuses.length >= 1);
    assertEquals(statuses.map((st) => st.code), statuses.map(() => 0));
  } finally {
    await front.close();
    await s.stop();
  }
});

Deno.test("jobs: denit bridge to a socket that is not there: 125 and one line", async () => {
  const result = await run([...DENIT, "bridge", "/nonexistent/a\nb.sock"]);
  assertEquals([result.code, result.stdout], [125, ""]);
  assertEquals(
    result.stderr,
    'denit bridge: cannot connect to "/nonexistent/a\\x0ab.sock": No such file or directory\n',
  );
});

Deno.test("jobs: the service trusts no relative run directory (it is walked from /)", async () => {
  const result = await run([
    ...DENIT,
    "job",
    "serve",
    "--run-dir",
    "spool/run",
    "--listen-fd",
    "0",
  ]);
  assertEquals(result.code, 125);
  assertMatch(
    result.stderr,
    /error: cannot serve jobs: job spool: "spool\/run" is not an absolute path\n$/,
  );
});

Deno.test("jobs: a read-only spool is named in one line (125) before the child runs", async () => {
  // A read-only filesystem, as a volume mounted read-only: new, and holding a spool already.
  const dir = await Deno.makeTempDir({ prefix: "denit-jobs-ro-" });
  const sockets = await Deno.makeTempDir({ prefix: "denit-jobs-ro-socket-" });
  const mount = (...args: string[]) => run(["mount", ...args]);
  try {
    assertEquals((await mount("-t", "tmpfs", "-o", "mode=700", "tmpfs", dir)).code, 0);
    await Deno.mkdir(`${dir}/spool`, { mode: 0o700 });
    assertEquals((await mount("-o", "remount,ro", dir)).code, 0);
    for (const spool of [`${dir}/new`, `${dir}/spool`]) {
      const result = await run([
        ...DENIT,
        "-s",
        "--jobs-socket",
        `${sockets}/jobs.sock`,
        "--jobs-spool",
        spool,
        "--",
        "sh",
        "-c",
        "echo ran",
      ]);
      assertEquals([result.code, result.stdout], [125, ""], result.stderr);
      assertMatch(
        result.stderr,
        new RegExp(
          `^denit\\[\\d+\\] error: Cannot keep jobs in "${spool}": .*Read-only file system.*\\n$`,
        ),
      );
    }
  } finally {
    await run(["umount", dir]);
    await Deno.remove(dir, { recursive: true });
    await Deno.remove(sockets, { recursive: true });
  }
});

Deno.test("jobs: a full spool: the job that filled it ends, recorded and marked; a Run meanwhile gets one line; no restart", async () => {
  const dir = await Deno.makeTempDir({ prefix: "denit-jobs-full-" });
  const sockets = await Deno.makeTempDir({ prefix: "denit-jobs-full-socket-" });
  const socket = `${sockets}/jobs.sock`;
  const mounted = await run(["mount", "-t", "tmpfs", "-o", "size=256k,mode=700", "tmpfs", dir]);
  assertEquals(mounted.code, 0, mounted.stderr);
  const proc = new Running([
    ...DENIT,
    "-s",
    "--jobs-socket",
    socket,
    "--jobs-spool",
    `${dir}/spool`,
    "--",
    "sh",
    "-c",
    "echo up; exec sleep 120",
  ]);
  const job = (...args: string[]) => run([...DENIT, "job", "--socket", socket, ...args]);
  try {
    await proc.waitFor(/^up$/);
    // 589 KB of output into 256 KiB: the disk fills while the job runs.
    const filling = await job("run", "--id", "a", "-f", "--", "sh", "-c", "seq 1 100000; echo end");
    assertEquals(filling.code, 0, filling.stderr);
    assertEquals(
      filling.stderr,
      'denit job: the output of "a" was cut short (the per-job cap, or a full spool)\n',
    );
    const full = await job("run", "--id", "b", "--", "true");
    assertEquals(full.code, 125);
    assertMatch(
      full.stderr,
      /^denit job: UNAVAILABLE: cannot keep the job in the spool: .*No space left on device\n$/,
    );
    assertMatch((await job("list")).stdout, /\na\tsucceeded\t0\t/);
    // Room again: the service that never left takes the next job.
    await Deno.remove(
      `${dir}/spool/${(await Array.fromAsync(Deno.readDir(`${dir}/spool`)))[0]?.name}/1.out`,
    );
    const back = await job("run", "--id", "c", "-f", "--", "echo", "back");
    assertEquals([back.code, back.stdout], [0, "back\n"], back.stderr);
    proc.kill("SIGTERM");
    const status = await proc.status();
    assertOk(!/job service (exited|was killed)/.test(status.stderr), status.stderr);
  } finally {
    await proc.stop();
    await run(["umount", dir]);
    await Deno.remove(dir, { recursive: true });
    await Deno.remove(sockets, { recursive: true });
  }
});

Deno.test({
  name:
    "jobs: a user that is not root and may not make the socket's directory is told the one thing to do",
  ignore: Deno.uid() !== 0,
  fn: async () => {
    const dir = await Deno.makeTempDir({ prefix: "denit-nonroot-" });
    try {
      await Deno.chmod(dir, 0o755); // root's, not writable by uid 65532
      const spool = `${dir}/spool`;
      await Deno.mkdir(spool, { mode: 0o700 });
      await Deno.chown(spool, 65532, 65532);
      const asUser = ["setpriv", "--reuid", "65532", "--regid", "65532", "--clear-groups"];
      const denied = await run([
        ...asUser,
        ...await denitForAnyUser(dir), // a checkout in a private directory is not uid 65532's
        "-s",
        "--jobs-socket",
        `${dir}/run/jobs.sock`,
        "--jobs-spool",
        spool,
        "--",
        "sh",
        "-c",
        "echo ran",
      ]);
      assertEquals([denied.code, denied.stdout], [125, ""], denied.stderr);
      assertMatch(
        denied.stderr,
        /Cannot serve jobs on ".*\/run\/jobs.sock": .*Permission denied.*; as uid 65532, give denit a directory of its own there \(docker run --tmpfs .*\/run:uid=65532,mode=0700\) or choose a place it owns\n$/,
      );
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});

Deno.test("jobs: a socket path that is taken, or not a socket, fails before the child runs", async () => {
  const dir = await Deno.makeTempDir({ prefix: "denit-jobs-" });
  try {
    await Deno.writeTextFile(`${dir}/file`, "");
    const child = ["--", "sh", "-c", "echo ran"];
    const file = await run([...DENIT, "-s", "--jobs-socket", `${dir}/file`, ...child]);
    assertEquals([file.code, file.stdout], [125, ""], file.stderr);
    assertMatch(
      file.stderr,
      /Cannot serve jobs on ".*\/file": ".*\/file" exists and is not a socket\n/,
    );
    const long = await run([
      ...DENIT,
      "-s",
      "--jobs-socket",
      `${dir}/${"x".repeat(120)}`,
      ...child,
    ]);
    assertEquals([long.code, long.stdout], [2, ""]);
    assertMatch(long.stderr, /a Unix socket's path holds at most 107 \(from --jobs-socket\)/);
    const s = await new Service("subreaper").ready();
    try {
      const taken = await run([...DENIT, "-s", "--jobs-socket", s.socket, ...child]);
      assertEquals([taken.code, taken.stdout], [125, ""]);
      assertMatch(taken.stderr, /another process serves/);
    } finally {
      await s.stop();
    }
    // A socket left by a run that was killed is replaced.
    const stale = `${dir}/stale.sock`;
    Deno.listen({ transport: "unix", path: stale }).close();
    const reused = await run([
      ...DENIT,
      "-s",
      "--jobs-socket",
      stale,
      "--jobs-spool",
      `${dir}/spool`,
      ...child,
    ]);
    assertEquals([reused.code, reused.stdout], [0, "ran\n"], reused.stderr);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

/** Runs denit with the job service on `socket` and `spool`; it must refuse before the child runs. */
async function refused(socket: string, spool: string, reason: RegExp): Promise<void> {
  const r = await run([
    ...DENIT,
    "-s",
    "--jobs-socket",
    socket,
    "--jobs-spool",
    spool,
    "--",
    "sh",
    "-c",
    "echo ran",
  ]);
  assertEquals([r.code, r.stdout], [125, ""], r.stderr);
  assertEquals(r.stderr.split("\n").length, 2, r.stderr);
  assertMatch(r.stderr, reason);
}

Deno.test("jobs: a spool or socket directory that another user could change is refused", async () => {
  const dir = await Deno.makeTempDir({ prefix: "denit-trust-" });
  const nobody = 65534;
  try {
    const socket = `${dir}/run/jobs.sock`;
    // Left by another user (an app run with --user, say): refused whatever its mode.
    await Deno.mkdir(`${dir}/theirs`, { mode: 0o700 });
    await Deno.chown(`${dir}/theirs`, nobody, nobody);
    await refused(
      socket,
      `${dir}/theirs`,
      /job spool: ".*\/theirs" belongs to uid 65534, not to denit's user \(uid 0\) or root\n/,
    );
    // Ours but writable by others, or below a directory others may write (not sticky).
    await Deno.mkdir(`${dir}/open`);
    await Deno.chmod(`${dir}/open`, 0o777);
    await refused(socket, `${dir}/open`, /".*\/open" is writable by other users \(mode 0777\)/);
    await refused(socket, `${dir}/open/spool`, /".*\/open" is writable by other users/);
    // A link another user owns (they may point it anywhere), even to a good directory.
    await Deno.mkdir(`${dir}/good`, { mode: 0o700 });
    await Deno.symlink(`${dir}/good`, `${dir}/link`);
    assertEquals((await run(["chown", "-h", `${nobody}:${nobody}`, `${dir}/link`])).code, 0);
    await refused(socket, `${dir}/link/spool`, /".*\/link" belongs to uid 65534/);
    // The socket's directory too.
    await refused(`${dir}/theirs/jobs.sock`, `${dir}/spool`, /socket directory: ".*\/theirs"/);
    // A sticky directory such as /tmp may be on the way; a link of root's is followed.
    await Deno.mkdir(`${dir}/sticky`);
    await Deno.chmod(`${dir}/sticky`, 0o1777);
    await Deno.symlink(`${dir}/sticky`, `${dir}/rootlink`);
    const ok = await run([
      ...DENIT,
      "-s",
      "--jobs-socket",
      `${dir}/rootlink/run/jobs.sock`,
      "--jobs-spool",
      `${dir}/rootlink/spool`,
      "--",
      "sh",
      "-c",
      "echo ran",
    ]);
    assertEquals([ok.code, ok.stdout, ok.stderr], [0, "ran\n", ""]);
    assertEquals(((await Deno.stat(`${dir}/sticky/spool`)).mode ?? 0) & 0o7777, 0o700);
    // ... but not as the place itself: anyone may make names in it.
    const sticky = /socket directory: ".*\/sticky" is writable by other users \(mode 1777\)/;
    await refused(`${dir}/sticky/jobs.sock`, `${dir}/spool`, sticky);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("jobs: the service writes no spool file through a link", async () => {
  const s = await new Service("subreaper").ready();
  const victim = `${s.dir}/victim`;
  try {
    await Deno.writeTextFile(victim, "untouched");
    const [run] = (await Array.fromAsync(Deno.readDir(s.spool))).map((e) => `${s.spool}/${e.name}`);
    assertOk(run !== undefined, "no run directory");
    await Deno.symlink(victim, `${run}/1.json.new`);
    await Deno.symlink(victim, `${run}/2.out`);
    const first = await rejection(call((cb) => s.client.Run({ id: "a", argv: ["true"] }, cb)));
    assertMatch(first.details, /1\.json\.new.*: Too many levels of symbolic links/);
    assertEquals(await Deno.readTextFile(victim), "untouched");
    // The next job runs; its keeper stores nothing through the link planted for its output,
    // and the job says its output was not kept.
    await Deno.remove(`${run}/1.json.new`);
    await call<Job>((cb) => s.client.Run({ id: "b", argv: ["echo", "lost"] }, cb));
    const b = await finished(s.client, "b");
    assertEquals([b.status, b.outputTruncated], ["SUCCEEDED", true]);
    assertEquals(await Deno.readTextFile(victim), "untouched");
  } finally {
    const { code, stderr } = await s.stop();
    assertEquals(code, 143, stderr);
  }
});

Deno.test({
  name: "jobs: off, nothing of it loads: the bundle runs without dist/denit-jobs.js beside it",
  fn: async () => {
    const dir = await Deno.makeTempDir({ prefix: "denit-alone-" });
    try {
      const alone = await bundleAlone(dir);
      const off = await run([...alone, "-s", "--", "sh", "-c", "echo ran"]);
      assertEquals([off.code, off.stdout, off.stderr], [0, "ran\n", ""]);
      const on = await run([...alone, "-s", "--jobs-socket", `${dir}/j.sock`, "--", "true"]);
      assertEquals(on.code, 125, on.stderr);
      assertMatch(on.stderr, /Cannot serve jobs on/);
      // `denit job` loads that half at once: one line names it, exit 125.
      const list = await run([...alone, "job", "list"]);
      assertEquals([list.code, list.stdout], [125, ""], list.stderr);
      assertMatch(
        list.stderr,
        new RegExp(
          `^denit: cannot load ${dir}/denit-jobs\\.js, denit's code for the job service .*\\n$`,
        ),
      );
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});

Deno.test("jobs: finished jobs are forgotten oldest first beyond 1,000, running ones never", async () => {
  const dir = await Deno.makeTempDir({ prefix: "denit-jobs-table-" });
  try {
    // Files as a keeper writes them (launch/keep.c): the state, the output.
    const kept = (seq: number, state: string) => {
      Deno.writeTextFileSync(`${dir}/${seq}.state`, `pid=${seq} keeper=0 since=0 ${state}\n`);
      Deno.writeTextFileSync(`${dir}/${seq}.out`, "");
      Deno.writeTextFileSync(`${dir}/${seq}.err`, "");
    };
    const table = new JobTable(dir);
    const running = StoredJob.create(dir, "running", 1, ["sleep"]);
    kept(1, "exit=-1 signal=0 finished=0 truncated=0 lost=0 ended=0 oom=0");
    running.refresh();
    table.add(running);
    for (let seq = 2; seq <= KEEP_FINISHED_JOBS + 11; seq++) {
      const job = StoredJob.create(dir, `done-${seq}`, seq, ["true"]);
      kept(seq, "exit=0 signal=0 finished=1 truncated=0 lost=0 ended=1 oom=0");
      job.refresh();
      table.add(job);
      table.trim();
    }
    const ids = table.list().map((job) => job.id);
    assertEquals(ids.length, KEEP_FINISHED_JOBS + 1);
    assertEquals(ids.slice(0, 2), ["running", "done-12"]);
    // The forgotten jobs' files are gone with them; the others are there.
    const files = new Set(await Array.fromAsync(Deno.readDir(dir), (e) => e.name));
    assertOk(!files.has("2.out") && !files.has("11.err") && !files.has("11.json"));
    assertOk(files.has("12.out") && files.has("1.out") && files.has("1.json"));
    assertEquals(table.counts(), {
      running: 1,
      started: KEEP_FINISHED_JOBS + 11,
      succeeded: KEEP_FINISHED_JOBS + 10,
      failed: 0,
      cancelled: 0,
    });
    // A service started again reads the same table back, the forgotten ones' counts included.
    assertEquals(new JobTable(dir).counts(), table.counts());
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("jobs: denit job logs -f resumes where it was when its connection breaks", async () => {
  const s = await new Service("subreaper").ready();
  const front = new BridgeFront(`${s.dir}/front.sock`, s.socket);
  try {
    const script = 'for i in $(seq 1 60); do echo "line $i"; sleep 0.02; done';
    await call<Job>((cb) => s.client.Run({ id: "slow", argv: ["sh", "-c", script] }, cb));
    const logs = new Running([...DENIT, "job", "--socket", front.path, "logs", "-f", "slow"]);
    await logs.waitFor(/^line 10$/);
    // Break the connection under the client: its bridge dies.
    const first = front.bridges[0];
    assertOk(first !== undefined);
    first.kill("SIGKILL");
    const status = await logs.status();
    assertEquals(status.code, 0, status.stderr);
    assertEquals(logs.lines, Array.from({ length: 60 }, (_, i) => `line ${i + 1}`));
    const count = front.bridges.length;
    assertOk(count >= 2, `${count} connection(s): it never reconnected`);
  } finally {
    await front.close();
    await s.stop();
  }
});

/** A frame of HTTP/2 (RFC 9113 §4.1). */
function frame(type: number, flags: number, stream: number, payload: Uint8Array): Uint8Array {
  const out = new Uint8Array(9 + payload.length);
  out.set([payload.length >> 16, (payload.length >> 8) & 0xff, payload.length & 0xff, type, flags]);
  new DataView(out.buffer).setUint32(5, stream);
  out.set(payload, 9);
  return out;
}

/** HPACK literal header fields without indexing, new names (RFC 7541 §6.2.2), short strings. */
function headerBlock(headers: Array<[string, string]>): Uint8Array {
  const bytes: number[] = [];
  for (const [name, value] of headers) {
    const n = new TextEncoder().encode(name);
    const v = new TextEncoder().encode(value);
    bytes.push(0x00, n.length, ...n, v.length, ...v);
  }
  return new Uint8Array(bytes);
}

Deno.test("jobs: a FollowIO client that never reads (nor opens its window) costs the service no memory", async () => {
  const s = await new Service("subreaper").ready();
  let conn: Deno.UnixConn | null = null;
  try {
    const c = s.client;
    const mib = JOB_OUTPUT_CAP / (1024 * 1024);
    await call<Job>((cb) => c.Run({ id: "big", argv: ["head", "-c", `${mib}M`, "/dev/zero"] }, cb));
    await finished(c, "big");
    const service = servicePidOf(s.pid);
    const before = rssKiB(service);
    // A hand-made HTTP/2 client: FollowIO("big"), then it reads nothing, ever. The server may
    // send 64 KiB (the default window); what it writes beyond that, it would have to keep.
    conn = await Deno.connect({ transport: "unix", path: s.socket });
    const id = new TextEncoder().encode("big");
    const request = new Uint8Array([0x0a, id.length, ...id]); // FollowIORequest{id}
    const message = new Uint8Array([0, 0, 0, 0, request.length, ...request]);
    const headers = headerBlock([
      [":method", "POST"],
      [":scheme", "http"],
      [":path", "/denit.jobs.v1.Jobs/FollowIO"],
      [":authority", "localhost"],
      ["content-type", "application/grpc"],
      ["te", "trailers"],
    ]);
    for (
      const bytes of [
        new TextEncoder().encode("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"),
        frame(0x4, 0, 0, new Uint8Array()), // SETTINGS
        frame(0x1, 0x4, 1, headers), // HEADERS, END_HEADERS
        frame(0x0, 0x1, 1, message), // DATA, END_STREAM
      ]
    ) await conn.write(bytes);
    let peak = before;
    for (let i = 0; i < 50; i++) {
      await new Promise((resolve) => setTimeout(resolve, 20));
      peak = Math.max(peak, rssKiB(service));
    }
    // The whole output held would be JOB_OUTPUT_CAP (and its copies).
    assertOk(peak - before < mib * 1024 / 4, `RSS ${before} → ${peak} KiB`);
    // The service still serves others meanwhile.
    assertEquals((await output(c, "big")).out.length, JOB_OUTPUT_CAP);
  } finally {
    conn?.close();
    await s.stop();
  }
});

Deno.test("jobs: denit job logs and run -f into a pipe that closes stop quietly with 141 (SIGPIPE's code)", async () => {
  const s = await new Service("subreaper").ready();
  try {
    const lots = ["sh", "-c", "seq 1 300000"];
    for (const args of [["run", "--id", "lots", "-f", "--", ...lots], ["logs", "lots"]]) {
      const client = new Deno.Command(program(DENIT), {
        args: [...DENIT.slice(1), "job", "--socket", s.socket, ...args],
        stdout: "piped",
        stderr: "piped",
      }).spawn();
      // One chunk read, then the pipe closed, as `| head -1` does.
      const reader = client.stdout.getReader();
      await reader.read();
      await reader.cancel();
      const [status, stderr] = await Promise.all([
        client.status,
        new Response(client.stderr).text(),
      ]);
      assertEquals([status.code, stderr], [141, ""], args.join(" "));
    }
  } finally {
    await s.stop();
  }
});
