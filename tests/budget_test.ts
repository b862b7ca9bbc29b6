/**
 * The stop budget as a table: in every lifecycle state a stop signal can arrive in, denit is
 * gone within the README's sum, --shutdown-delay + --grace + 2 s, counted from the first stop
 * signal. The child and what it leaves ignore SIGTERM (only SIGKILL ends them) and
 * --kill-after is long, so nothing but the budget's own timers can end a row in time.
 */

import { assertEquals, assertOk } from "./assert.ts";
import {
  cleanup,
  denitArgv,
  denitPid,
  exists,
  hostPid,
  type Mode,
  MODES,
  processState,
  Running,
  waitUntil,
} from "./helpers.ts";

const DELAY_MS = 600;
const GRACE_MS = 800;
/** The README's sum: the shutdown delay, the grace period and 2 s for processes in state D. */
const BUDGET_MS = DELAY_MS + GRACE_MS + 2000;

/**
 * A leftover that ignores TERM from birth (the trap is set before the fork: a TERM that comes
 * first must not find it at its default); prints its pid ("left N"). Each row's child sets its
 * own trap after.
 */
const LEFTOVER = `trap '' TERM; (echo "left $(sh -c 'echo $PPID')"; exec sleep 60) &`;

interface Row {
  readonly state: string;
  readonly flags: readonly string[];
  /** The child's script after the leftover started: it says "ready" and then goes on. */
  readonly child: string;
  /** What to wait for before the first stop signal (the child's end, a deadline's TERM...). */
  readonly before?: (run: RunView) => Promise<void>;
  /** A first stop signal already under way: the measured one is a second. */
  readonly earlier?: boolean;
}

interface RunView {
  readonly proc: Running;
  readonly denit: number;
  /** The leftover's host pid. */
  readonly left: number;
}

const STANDARD = ["--shutdown-delay", `${DELAY_MS}ms`, "--grace", `${GRACE_MS}ms`];
const LONG_KILL_AFTER = ["--kill-after", "20s"];
const SPIN = "while :; do sleep 0.1; done";

/** The child ended and was reaped: the leftover, reparented to denit, is its only child. */
async function childGone(run: RunView): Promise<void> {
  const children = () => {
    try {
      return Deno.readTextFileSync(`/proc/${run.denit}/task/${run.denit}/children`).trim();
    } catch {
      return ""; // denit is gone: the wait fails at its deadline
    }
  };
  await waitUntil(() => children() === String(run.left), "the child's end and reaping");
}

const ROWS: readonly Row[] = [
  { state: "running", flags: STANDARD, child: `trap '' TERM; echo ready; ${SPIN}` },
  {
    state: "stopping: the delay holds the first TERM",
    flags: STANDARD,
    child: `trap '' TERM; echo ready; ${SPIN}`,
    earlier: true,
  },
  {
    // The child ends during the delay: before, its leftover waited for --kill-after (20 s).
    state: "stopping: the child ends during the delay",
    flags: [...STANDARD, ...LONG_KILL_AFTER],
    child: `trap '' TERM; echo ready; sleep 0.3; exit 0`,
  },
  {
    state: "stopping: grace runs",
    flags: ["--grace", `${GRACE_MS}ms`],
    child: `trap '' TERM; echo ready; ${SPIN}`,
    earlier: true,
  },
  {
    // The child honours TERM, its leftover does not: grace, not --kill-after, bounds it.
    state: "stopping: the child ends on TERM, its leftover does not",
    flags: ["--grace", `${GRACE_MS}ms`, ...LONG_KILL_AFTER],
    child: `trap 'exit 0' TERM; echo ready; ${SPIN}`,
  },
  {
    state: "stopping: the deadline's TERM went out",
    flags: [...STANDARD, "--timeout", "300ms"],
    child: `trap 'echo term' TERM; echo ready; ${SPIN}`,
    before: async (run) => void await run.proc.waitFor(/^term$/),
  },
  {
    // Leftovers are being stopped (TERM sent, --kill-after 20 s): before, the signal was dropped.
    state: "exited: stopping leftovers",
    flags: [...STANDARD, ...LONG_KILL_AFTER],
    child: `echo ready; exit 0`,
    before: childGone,
  },
  {
    state: "exited: waiting for descendants",
    flags: [...STANDARD, "--wait-descendants"],
    child: `echo ready; exit 0`,
    before: childGone,
  },
];

/** The host pid of a pid printed inside denit's namespace. */
function onHost(proc: Running, mode: Mode, inner: number): number {
  return mode === "pid1" ? hostPid(denitPid(proc, mode), inner) : inner;
}

for (const mode of MODES) {
  for (const row of ROWS) {
    Deno.test(`${mode}: stop budget: a stop signal in "${row.state}" ends denit in time`, async () => {
      const script = `${LEFTOVER} ${row.child}`;
      const proc = new Running(denitArgv(mode, [...row.flags, "--", "sh", "-c", script]));
      const pids: number[] = [];
      try {
        const left = onHost(proc, mode, Number(proc.line(await proc.waitFor(/^left/)).slice(5)));
        pids.push(left);
        await proc.waitFor(/^ready$/);
        const denit = denitPid(proc, mode);
        let first = performance.now();
        if (row.earlier) {
          Deno.kill(denit, "SIGTERM");
          await new Promise((resolve) => setTimeout(resolve, 300));
        } else await row.before?.({ proc, denit, left });
        if (!row.earlier) first = performance.now();
        Deno.kill(denit, "SIGTERM");
        const status = await proc.status(30_000);
        const took = performance.now() - first;
        assertOk(took < BUDGET_MS, `${took.toFixed(0)} ms, over ${BUDGET_MS}: ${status.stderr}`);
        assertOk(!exists(left) || processState(left) === "Z", "the leftover outlived denit");
        assertEquals(status.signal, null, status.stderr);
      } finally {
        await proc.stop();
        if (mode === "subreaper") cleanup(pids);
      }
    });
  }
}
