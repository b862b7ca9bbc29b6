/**
 * Nothing after the spawn ends denit but the child's end: a throw injected at each place where
 * work runs once the child started (a signal's handling, a timer, a reap round, the zombie
 * scan), an unhandled rejection and an uncaught error in a
 * callback are each one error line; denit still forwards the next stop signal, reaps the child
 * and exits with its code. The faults come from fixtures/faulty_denit.ts (denit's entry with a
 * trap), run from the sources behind denit's launcher.
 */

import { assertEquals, assertMatch } from "./assert.ts";
import {
  cleanup,
  FIXTURES,
  layOut,
  type Mode,
  MODES,
  PIDNS,
  Running,
  waitUntil,
} from "./helpers.ts";

/** The launcher and the runtime, with a denit.js that is fixtures/faulty_denit.ts. */
const FAULTY_DIR = Deno.makeTempDirSync({ prefix: "denit-faulty-" });
const FAULTY = await layOut(FAULTY_DIR, []);
Deno.writeTextFileSync(`${FAULTY_DIR}/denit.js`, `import "${FIXTURES}/faulty_denit.ts";\n`);
globalThis.addEventListener("unload", () => Deno.removeSync(FAULTY_DIR, { recursive: true }));

/** Where each fault is caught: the line denit logs for it. */
const POINTS: Readonly<Record<string, RegExp>> = {
  signal: /error: signal failed; denit goes on error="Error: injected at signal"/,
  timer: /error: timer failed; denit goes on error="Error: injected at timer"/,
  reap: /error: reap failed; denit goes on error="Error: injected at reap"/,
  "zombie-scan": /error: zombie-scan failed; denit goes on error="Error: injected at zombie-scan"/,
  rejection:
    /error: a rejection nobody handled; denit goes on error="Error: injected at rejection"/,
  uncaught: /error: an uncaught error; denit goes on error="Error: injected at uncaught"/,
};

/** The child: exits 7 on TERM, takes USR1 in its stride. */
const CHILD = [
  "sh",
  "-c",
  "trap 'exit 7' TERM; trap : USR1; echo ready $$; while :; do sleep 0.05; done",
];

function exists(path: string): boolean {
  try {
    Deno.statSync(path);
    return true;
  } catch {
    return false; // Not written yet.
  }
}

function denitOf(proc: Running, mode: Mode): number {
  if (mode === "subreaper") return proc.child.pid;
  const pid = proc.child.pid;
  return Number(Deno.readTextFileSync(`/proc/${pid}/task/${pid}/children`).trim().split(" ")[0]);
}

for (const mode of MODES) {
  for (const [point, logged] of Object.entries(POINTS)) {
    Deno.test(`${mode}: a throw at ${point} after the spawn is one line; denit goes on`, async () => {
      const mark = await Deno.makeTempFile();
      await Deno.remove(mark);
      // The delay gives timer a timer.
      const flags = ["--shutdown-delay", "300ms", "--"];
      const argv = mode === "pid1"
        ? [...PIDNS, ...FAULTY, ...flags, ...CHILD]
        : [...FAULTY, "-s", ...flags, ...CHILD];
      const proc = new Running(argv, { env: { FAULT_POINT: point, FAULT_MARK: mark } });
      const child: number[] = [];
      try {
        // Its pid, to kill if denit died: an orphan would hold the output pipes open.
        child.push(Number(proc.line(await proc.waitFor(/^ready \d+$/)).split(" ")[1]));
        const denit = denitOf(proc, mode);
        // What makes the fault happen: a first TERM (held: the delay's timer), a signal, or
        // nothing (a publish, a reap round and the zombie scan come by themselves).
        if (point === "timer") Deno.kill(denit, "SIGTERM");
        if (point === "signal" || point === "rejection" || point === "uncaught") {
          Deno.kill(denit, "SIGUSR1");
        }
        await waitUntil(() => exists(mark), `the fault at ${point}`, 10_000);
        Deno.kill(denit, "SIGTERM");
        const status = await proc.status(10_000);
        assertEquals([status.code, status.signal], [7, null], status.stderr);
        assertMatch(status.stderr, logged);
      } finally {
        if (mode === "subreaper") cleanup(child);
        await proc.stop();
        await Deno.remove(mark).catch(() => {/* never written: the test failed before */});
      }
    });
  }
}
