/**
 * The form users run (launch/denit.c, then the runtime on the bundle): denit owns its signals
 * from the launcher's exec to its exit. The forwarded signals and SIGCHLD are blocked in every
 * thread and read from a signalfd, so a stop at any moment is kept, SIGUSR1 never reaches the
 * runtime (which would open an inspector on it), and what the runtime would change on its way
 * in (non-UTF-8 arguments, the open-file soft limit) reaches the child as the container set it.
 */

import { assertEquals, assertMatch, assertOk } from "./assert.ts";
import { dirname } from "node:path";
import {
  DENIT,
  denitArgv,
  DENO,
  type Mode,
  MODES,
  ROOT,
  run,
  Running,
  waitUntil,
} from "./helpers.ts";
import { READ_SIGNALS } from "../src/common/signals.ts";

/** A /proc/PID/status mask ("SigBlk" and the like) as signal numbers. */
function mask(pid: number | string, field: string, task = pid): Set<number> {
  const text = Deno.readTextFileSync(`/proc/${pid}/task/${task}/status`);
  const hex = new RegExp(`^${field}:\\s+([0-9a-f]+)$`, "m").exec(text)?.[1] ?? "0";
  const bits = BigInt(`0x${hex}`);
  const set = new Set<number>();
  for (let signo = 1; signo <= 64; signo++) {
    if ((bits >> BigInt(signo - 1)) & 1n) set.add(signo);
  }
  return set;
}

function read(path: string): string {
  try {
    return Deno.readTextFileSync(path);
  } catch {
    return ""; // not there yet, or gone
  }
}

/** denit's own executables: the launcher, and the runtime it becomes. */
const DENIT_EXECUTABLES = [DENIT[0] ?? "", `${dirname(DENIT[0] ?? "")}/deno`].map((path) =>
  Deno.realPathSync(path)
);

function executable(pid: number): string {
  try {
    return Deno.readLinkSync(`/proc/${pid}/exe`);
  } catch {
    return ""; // not there yet, or gone
  }
}

/**
 * Spins (no await between the check and the signal) until the launcher has blocked SIGTERM in
 * the process that will be denit: the earliest moment a stop can be kept. As PID 1 that is
 * unshare's child once it runs the launcher (before its exec it has SIGTERM blocked too).
 */
function awaitBlocked(proc: Running, mode: Mode): number {
  const deadline = performance.now() + 10_000;
  const outer = proc.child.pid;
  while (performance.now() < deadline) {
    const pid = mode === "subreaper"
      ? outer
      : Number(read(`/proc/${outer}/task/${outer}/children`).trim().split(" ")[0]);
    if (
      pid > 0 && DENIT_EXECUTABLES.includes(executable(pid)) &&
      /^SigBlk:\s+[0-9a-f]*[4-7c-f][0-9a-f]{3}$/m.test(read(`/proc/${pid}/status`))
    ) {
      return pid;
    }
  }
  throw new Error("the launcher never blocked SIGTERM");
}

/** Whether denit has started a child (any of its threads may have). */
function hasChild(pid: number): boolean {
  try {
    for (const task of Deno.readDirSync(`/proc/${pid}/task`)) {
      if (read(`/proc/${pid}/task/${task.name}/children`).trim() !== "") return true;
    }
  } catch {
    // gone
  }
  return false;
}

/** Runs per mode: the issue asks for 200 as PID 1 and 200 as a subreaper. */
const RUNS = 200;

/**
 * When the SIGTERM goes: at once (before the runtime could start the child), once the child
 * runs, or at a moment 0-60 ms after the launcher blocked it (the test's variable).
 */
type Moment = "at once" | "child running" | "any";
const MOMENTS: readonly Moment[] = ["at once", "child running", "any"];

for (const mode of MODES) {
  Deno.test(`${mode}: a SIGTERM at any moment after the launcher's exec ends denit 143`, async () => {
    const outcomes = new Map<string, number>();
    const notStarted = new Map<Moment, number>(MOMENTS.map((m) => [m, 0]));
    for (let i = 0; i < RUNS && outcomes.size <= 1; i++) {
      const moment = MOMENTS[i % MOMENTS.length] ?? "any";
      const proc = new Running(denitArgv(mode, ["--", "sleep", "30"]));
      try {
        const pid = awaitBlocked(proc, mode);
        if (moment === "any") {
          await new Promise((resolve) => setTimeout(resolve, Math.random() * 60));
        } else if (moment === "child running") {
          await waitUntil(() => hasChild(pid), "denit started its child");
        }
        Deno.kill(pid, "SIGTERM");
        const status = await proc.status(15_000);
        if (/it was not started; exit 143/.test(status.stderr)) {
          notStarted.set(moment, (notStarted.get(moment) ?? 0) + 1);
        }
        const outcome = status.signal === null ? `exit ${status.code}` : status.signal;
        outcomes.set(outcome, (outcomes.get(outcome) ?? 0) + 1);
      } finally {
        await proc.stop();
      }
    }
    const counts = JSON.stringify(Object.fromEntries(notStarted));
    assertEquals(Object.fromEntries(outcomes), { "exit 143": RUNS }, `not started: ${counts}`);
    // Both paths were taken: before the child ran (not started) and after (forwarded).
    assertOk((notStarted.get("at once") ?? 0) > 0, `not started: ${counts}`);
    assertEquals(notStarted.get("child running"), 0, `not started: ${counts}`);
  });
}

/** A child that counts the SIGUSR1s it gets: `ready`, then `usr1 N` for each. */
const COUNTER = [
  "sh",
  "-c",
  "n=0; trap 'n=$((n+1)); echo \"usr1 $n\"' USR1; echo ready; while :; do sleep 0.01; done",
];

/** The signals the runtime installs its own handler for, 0.5 s into any run (never run here). */
const RUNTIME_HANDLED = [1, 2, 10, 15];

Deno.test("every thread of denit blocks what it reads; 20 SIGUSR1 reach the child, no inspector opens", async () => {
  const proc = new Running([...DENIT, "-s", "--", ...COUNTER]);
  try {
    await proc.waitFor(/^ready$/);
    const pid = proc.child.pid;
    // The runtime arms its handlers 0.5 s into a run: checked after, so that they are there.
    const deadline = performance.now() + 10_000;
    while (!mask(pid, "SigCgt").has(10)) {
      assertOk(performance.now() < deadline, "the runtime never installed its SIGUSR1 handler");
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    const tasks = (await Array.fromAsync(Deno.readDir(`/proc/${pid}/task`))).map((e) => e.name);
    assertOk(tasks.length > 3, `${tasks.length} threads`);
    for (const task of tasks) {
      const blocked = mask(pid, "SigBlk", task);
      assertEquals(READ_SIGNALS.filter((signo) => !blocked.has(signo)), [], `thread ${task}`);
      const caught = [...mask(pid, "SigCgt", task)].filter((signo) => READ_SIGNALS.includes(signo));
      assertEquals(caught.filter((signo) => !RUNTIME_HANDLED.includes(signo)), [], task);
      assertEquals([13, 21, 22, 27].filter((s) => !mask(pid, "SigIgn", task).has(s)), []);
    }
    let from = 0;
    for (let n = 1; n <= 20; n++) {
      Deno.kill(pid, "SIGUSR1");
      from = await proc.waitFor(new RegExp(`^usr1 ${n}$`), { from }) + 1;
    }
    const listening = await Deno.connect({ hostname: "127.0.0.1", port: 9229 }).then(
      (conn) => (conn.close(), true),
      () => false,
    );
    assertOk(!listening, "something listens on 127.0.0.1:9229");
    proc.kill("SIGTERM");
    const status = await proc.status();
    assertEquals([status.code, status.stderr], [143, ""]);
  } finally {
    await proc.stop();
  }
});

Deno.test("arguments that are not UTF-8 reach the child byte for byte", async () => {
  // The argument is made by a shell (Deno passes only strings): a, 0xff, 0xfe, b.
  const script =
    `arg=$(printf 'a\\377\\376b'); exec "$0" -s -- sh -c 'printf %s "$1" | od -An -tx1' sh "$arg"`;
  const result = await run(["sh", "-c", script, ...DENIT]);
  assertEquals([result.code, result.stdout.trim(), result.stderr], [0, "61 ff fe 62", ""]);
});

Deno.test("the child gets the open-file soft limit the container set, not the runtime's", async () => {
  const result = await run([
    "prlimit",
    "--nofile=321:4096",
    ...DENIT,
    "-s",
    "--",
    "sh",
    "-c",
    "ulimit -Sn; ulimit -Hn",
  ]);
  assertEquals([result.code, result.stdout, result.stderr], [0, "321\n4096\n", ""]);
});

Deno.test("started without the launcher, denit does not supervise: 125 and one line", async () => {
  const bare = await run([DENO, "run", "-A", "--no-config", `${ROOT}dist/denit.js`, "--", "true"]);
  assertEquals([bare.code, bare.stdout], [125, ""]);
  assertMatch(
    bare.stderr,
    /^denit: started without its launcher, .* not its bundle with deno run\n$/,
  );
  // Help needs no launcher.
  assertEquals((await run([DENO, "run", "-A", `${ROOT}dist/denit.js`, "--version"])).code, 0);
});

Deno.test("an open-file limit the runtime cannot start under is one line and exit 125", async () => {
  const result = await run(["prlimit", "--nofile=12:12", ...DENIT, "--", "true"]);
  assertEquals([result.code, result.stdout, result.stderr], [
    125,
    "",
    "denit: the open-file limit is 12, and the runtime needs 32: raise it (ulimit -n, docker run --ulimit nofile=1024)\n",
  ]);
});
