/**
 * Stop signals in denit's first milliseconds. denit names itself ("denit" in /proc/PID/comm)
 * right after its listeners for TERM, INT and HUP exist, the three the runtime arms together
 * at its first listener; a SIGTERM sent the moment that name shows must be kept, forwarded to
 * the child once it runs, and end denit with the child's 143, every time. Before TERM was
 * registered first, such a SIGTERM crashed PID 1 (SIGSEGV, 139) or killed a subreaper denit.
 */

import { assertEquals, assertOk } from "./assert.ts";
import { DENIT, denitArgv, type Mode, MODES, Running } from "./helpers.ts";

/** Runs per mode: the issue asks for at least 200 as PID 1. */
const RUNS: Readonly<Record<Mode, number>> = { pid1: 200, subreaper: 100 };

/**
 * The command line, under a name that is not "denit": a compiled binary called denit would
 * carry the name from its exec on, before any listener exists.
 */
function namedArgv(mode: Mode, dir: string, flags: readonly string[]): string[] {
  const first = DENIT[0] ?? "";
  const exe = DENIT.length === 1 && first.split("/").at(-1)?.startsWith("denit")
    ? `${dir}/under-test`
    : first;
  if (exe !== first) Deno.symlinkSync(first, exe);
  return denitArgv(mode, [...flags, "--", "sleep", "30"]).map((w) => w === first ? exe : w);
}

/**
 * Half the runs start the health endpoint first: its thread's start lets the event loop turn
 * before the child runs, so the signal reaches denit's listener while nothing takes it yet
 * (kept in the inbox, forwarded later); without it the listener mostly runs after the
 * supervisor took the inbox.
 */
const VARIANTS: readonly (readonly string[])[] = [[], ["--health-addr", "127.0.0.1:0"]];

function read(path: string): string {
  try {
    return Deno.readTextFileSync(path);
  } catch {
    return ""; // Not there yet, or gone: nothing to read.
  }
}

/** Spins (no await: nothing may come between the name showing and the signal) until named. */
function awaitName(proc: Running, mode: Mode): number {
  const deadline = performance.now() + 10_000;
  const launcher = proc.child.pid;
  while (performance.now() < deadline) {
    const pid = mode === "subreaper"
      ? launcher
      : Number(read(`/proc/${launcher}/task/${launcher}/children`).trim().split(" ")[0]);
    if (pid > 0 && read(`/proc/${pid}/comm`) === "denit\n") return pid;
  }
  throw new Error("denit never named itself");
}

function children(pid: number): string {
  return read(`/proc/${pid}/task/${pid}/children`).trim();
}

for (const mode of MODES) {
  const runs = RUNS[mode];
  Deno.test(`${mode}: ${runs} SIGTERMs sent the moment denit names itself all end in 143`, async () => {
    const dir = await Deno.makeTempDir();
    for (let i = 0; i < VARIANTS.length; i++) await Deno.mkdir(`${dir}/${i}`);
    const argvs = VARIANTS.map((flags, i) => namedArgv(mode, `${dir}/${i}`, flags));
    const outcomes = new Map<string, number>();
    let early = 0;
    try {
      // Stops at the first other outcome: a lost signal costs the run its whole wait.
      for (let i = 0; i < runs && outcomes.size <= 1; i++) {
        const proc = new Running(argvs[i % argvs.length] ?? []);
        try {
          const pid = awaitName(proc, mode);
          Deno.kill(pid, "SIGTERM");
          if (children(pid) === "") early++; // the child did not run yet: the early path
          const status = await proc.status(5_000);
          const outcome = status.signal === null ? `exit ${status.code}` : status.signal;
          outcomes.set(outcome, (outcomes.get(outcome) ?? 0) + 1);
        } finally {
          await proc.stop();
        }
      }
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
    assertEquals(Object.fromEntries(outcomes), { "exit 143": runs }, `${early} came early`);
    // Meaningful only if most signals came before the child ran (kept, then forwarded).
    assertOk(early > runs / 2, `only ${early} of ${runs} signals came before the child ran`);
  });
}
