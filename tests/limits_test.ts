/**
 * PID 1 outlives the limits a container sets: when it dies, the engine ends every process of
 * the container. Each trial runs in a cgroup of its own, bounded, and ends what it started.
 */

import { assertEquals, assertMatch, assertOk } from "./assert.ts";
import {
  cgroupV1,
  DENIT,
  DENO,
  fifoGate,
  FIXTURES,
  inCgroup,
  jobsOptions,
  ROOT,
  run,
  Running,
  waitUntil,
} from "./helpers.ts";

/** The pids cgroup v1 directory of this process, or null (not mounted, or not root). */
const PIDS_V1 = cgroupV1("pids", "cgroup.procs");

/** A fresh pids cgroup limited to `max` tasks for `fn`; what is left in it is killed, then it goes. */
async function withPidsCgroup(max: number, fn: (cgroup: string) => Promise<void>) {
  const cgroup = `${PIDS_V1}/denit-pids-${crypto.randomUUID().slice(0, 8)}`;
  await Deno.mkdir(cgroup);
  try {
    await Deno.writeTextFile(`${cgroup}/pids.max`, String(max));
    await fn(cgroup);
  } finally {
    for (let i = 0; i < 200; i++) {
      const left = (await Deno.readTextFile(`${cgroup}/cgroup.procs`)).split("\n").filter(Boolean);
      for (const pid of left) {
        try {
          Deno.kill(Number(pid), "SIGKILL");
        } catch {
          // gone meanwhile
        }
      }
      try {
        await Deno.remove(cgroup);
        break;
      } catch {
        await new Promise((resolve) => setTimeout(resolve, 50)); // not empty yet
      }
    }
  }
}

/** A fork loop that holds every task the limit leaves, from the child's first moment on. */
const BOMB = "(while :; do sleep 5 & done) 2>/dev/null & exec sleep 1";

Deno.test({
  name: "a child that takes every task of a pids limit at once never ends denit",
  ignore: PIDS_V1 === null,
  fn: async () => {
    const outcomes: string[] = [];
    for (const max of [20, 40, 80]) {
      for (let trial = 0; trial < 5; trial++) {
        await withPidsCgroup(max, async (cgroup) => {
          const proc = new Running([...inCgroup(cgroup), ...DENIT, "-s", "--", "sh", "-c", BOMB]);
          try {
            const status = await proc.status(60_000);
            // The child's fate is reported: its exit 0, whatever the bomb left to stop.
            const died = status.stderr.includes("Deno could not start")
              ? " (the runtime died)"
              : "";
            outcomes.push(`${max}${died}: exit ${status.code}`);
          } finally {
            await proc.stop();
          }
        });
      }
    }
    assertEquals(outcomes.length, 15);
    assertEquals(outcomes.filter((outcome) => !outcome.endsWith(": exit 0")), []);
  },
});

Deno.test("the job service serves again after a burst of clients at an open-file limit of 32", async () => {
  const dir = await Deno.makeTempDir({ prefix: "denit-emfile-" });
  const socket = `${dir}/jobs.sock`;
  const proc = new Running([
    "prlimit",
    "--nofile=32:32",
    ...DENIT,
    "-s",
    ...jobsOptions(dir),
    "--",
    "sh",
    "-c",
    "echo up; exec sleep 120",
  ]);
  try {
    await proc.waitFor(/^up$/);
    // 40 clients at once, each on a connection of its own: more than the service has descriptors.
    // Some of their calls may fail; what is measured is the service afterwards.
    await run([
      DENO,
      "run",
      "--allow-all",
      `${FIXTURES}/job_clients.ts`,
      "list",
      socket,
      "40",
      "40",
    ], {
      env: { DENO_DIR: Deno.env.get("DENO_DIR") ?? `${ROOT}.deno/cache`, NO_COLOR: "1" },
      timeoutMs: 60_000,
    });
    const after = await run([...DENIT, "job", "--socket", socket, "--wait", "30s", "list"], {
      timeoutMs: 60_000,
    });
    // Answered, if need be by a service started again (the client says once that it waits).
    assertEquals(after.code, 0, after.stderr);
    assertMatch(after.stderr, /^(denit job: no answer yet from the job service at .*\n)?$/);
  } finally {
    proc.kill("SIGTERM");
    await proc.stop();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test({
  name: "at a pids limit the job service refuses a Run in one line, and goes on answering alive",
  ignore: PIDS_V1 === null,
  fn: async () => {
    const { dir, path: gate, open } = await fifoGate("denit-pids-jobs-");
    const socket = `${dir}/jobs.sock`;
    await withPidsCgroup(60, async (cgroup) => {
      // The main child takes every task left once the test opens its gate.
      const child = `read x < "$0"; ${BOMB.replace("exec sleep 1", "echo full; exec sleep 60")}`;
      const proc = new Running([
        ...inCgroup(cgroup),
        ...DENIT,
        "-s",
        ...jobsOptions(dir),
        "--",
        "sh",
        "-c",
        child,
        gate,
      ]);
      const job = (...args: string[]) => run([...DENIT, "job", "--socket", socket, ...args]);
      try {
        const ticking = await job("run", "--id", "ticks", "--", "sh", "-c", "echo tick; sleep 60");
        assertEquals(ticking.code, 0, ticking.stderr);
        await open();
        await proc.waitFor(/^full$/);
        const max = Number(await Deno.readTextFile(`${cgroup}/pids.max`));
        await waitUntil(
          () => Number(Deno.readTextFileSync(`${cgroup}/pids.current`)) >= max,
          "every task taken",
        );
        const refused = await job("run", "--id", "late", "--", "true");
        assertEquals([refused.code, refused.stderr], [
          1,
          "denit job: RESOURCE_EXHAUSTED: cannot start the job: Resource temporarily unavailable\n",
        ]);
        const logs = await job("logs", "ticks");
        assertEquals([logs.code, logs.stdout], [0, "tick\n"], logs.stderr);
        const list = await job("list");
        assertEquals(list.code, 0, list.stderr);
        assertMatch(list.stdout, /\nticks\trunning\t/);
      } finally {
        await proc.stop();
      }
      // The same service throughout: it started every thread it needs before the limit was hit.
      const { stderr } = await proc.status();
      assertOk(!/the job service (exited|was killed)/.test(stderr), stderr);
    });
    await Deno.remove(dir, { recursive: true });
  },
});
