/** Units: the pure state machine, as a table of (state, event) → (state, effects). */

import { assertEquals } from "./assert.ts";
import { ExitCode } from "../src/common/exit_codes.ts";
import {
  ABANDON_MS,
  type Effect,
  type Event,
  exitCodeFor,
  INITIAL_STATE,
  type Policy,
  type State,
  transition,
} from "../src/supervise/machine.ts";

const POLICY: Policy = {
  rewrite: new Map([[15, 3], [1, 0]]),
  graceMs: 500,
  killAfterMs: 1000,
  remapExit: new Set([143]),
  shutdownDelayMs: 0,
  timeoutMs: null,
  waitDescendants: false,
  stopSignal: null,
};
const RUNNING: State = { name: "running", pid: 10, target: -10 };
const STOPPING: State = {
  name: "stopping",
  pid: 10,
  target: -10,
  forced: false,
  draining: null,
  cause: "signal",
};
const FORCED: State = {
  name: "stopping",
  pid: 10,
  target: -10,
  forced: true,
  draining: null,
  cause: "signal",
};
const EXITED: State = {
  name: "exited",
  pid: 10,
  status: { kind: "exited", code: 4 },
  exitCode: 4,
  phase: "terminating",
  stopped: false,
};
const DELAY: Policy = { ...POLICY, shutdownDelayMs: 2000 };
const DRAINING: State = {
  name: "stopping",
  pid: 10,
  target: -10,
  forced: false,
  draining: 15,
  cause: "signal",
};
const TIMEOUT: Policy = { ...POLICY, timeoutMs: 60_000 };
const WAIT: Policy = { ...POLICY, waitDescendants: true };
const WAITING: Extract<State, { name: "exited" }> = {
  name: "exited",
  pid: 10,
  status: { kind: "exited", code: 4 },
  exitCode: 4,
  phase: "waiting",
  stopped: false,
};
const signal = (signo: number): Event => ({ type: "signal-received", signo });
const forward = (signo: number, received: number): Effect => ({
  type: "forward-signal",
  signo,
  target: -10,
  received,
});

const TABLE: Array<[string, State, Event, Policy, State, Effect[]]> = [
  ["signal before start is dropped", INITIAL_STATE, signal(10), POLICY, INITIAL_STATE, [
    { type: "drop-signal", signo: 10, reason: "before the child started" },
  ]],
  ["stop before start: the child is not started, 128+N", INITIAL_STATE, signal(2), POLICY, {
    name: "exited",
    pid: 0,
    status: null,
    exitCode: 130,
    phase: "killing",
    stopped: true,
  }, [{ type: "finish", exitCode: 130, outcome: "not-started" }]],
  ["stop before start, its 128+N remapped by -e", INITIAL_STATE, signal(15), POLICY, {
    name: "exited",
    pid: 0,
    status: null,
    exitCode: 0,
    phase: "killing",
    stopped: true,
  }, [{ type: "finish", exitCode: 0, outcome: "not-started" }]],
  [
    "stop before start rewritten to 0 is dropped",
    INITIAL_STATE,
    signal(1),
    {
      ...POLICY,
      stopSignal: 1,
    },
    INITIAL_STATE,
    [{ type: "drop-signal", signo: 1, reason: "before the child started" }],
  ],
  [
    "start runs",
    INITIAL_STATE,
    { type: "child-started", pid: 10, target: -10 },
    POLICY,
    RUNNING,
    [],
  ],
  ["plain signal is forwarded", RUNNING, signal(10), POLICY, RUNNING, [forward(10, 10)]],
  ["rewritten stop signal stops with grace", RUNNING, signal(15), POLICY, STOPPING, [
    forward(3, 15),
    { type: "start-timer", timer: "grace", ms: 500 },
  ]],
  [
    "stop without grace starts no timer",
    RUNNING,
    signal(2),
    { ...POLICY, graceMs: null },
    STOPPING,
    [
      forward(2, 2),
    ],
  ],
  ["rewrite to 0 drops", RUNNING, signal(1), POLICY, RUNNING, [
    { type: "drop-signal", signo: 1, reason: "rewrite" },
  ]],
  ["second stop signal forwards, no new timer", STOPPING, signal(2), POLICY, STOPPING, [
    forward(2, 2),
  ]],
  [
    "grace expiry SIGKILLs the target and leftovers",
    STOPPING,
    { type: "grace-expired" },
    POLICY,
    FORCED,
    [
      { type: "force-kill", target: -10 },
    ],
  ],
  ["a second grace expiry does nothing", FORCED, { type: "grace-expired" }, POLICY, FORCED, []],
  [
    "child exit after the grace period: SIGKILL to leftovers at once",
    FORCED,
    {
      type: "child-exited",
      status: { kind: "signaled", signo: 9, coreDumped: false },
      othersLeft: true,
    },
    POLICY,
    {
      ...EXITED,
      status: { kind: "signaled", signo: 9, coreDumped: false },
      exitCode: 137,
      phase: "killing",
      stopped: true,
    },
    [
      { type: "signal-leftovers", signo: 9, timer: "kill-after" },
      { type: "start-timer", timer: "kill", ms: ABANDON_MS },
    ],
  ],
  [
    "grace expiry while leftovers get TERM: SIGKILL now (the stop budget)",
    EXITED,
    { type: "grace-expired" },
    POLICY,
    { ...EXITED, phase: "killing" },
    [
      { type: "signal-leftovers", signo: 9, timer: "grace" },
      { type: "start-timer", timer: "kill", ms: ABANDON_MS },
    ],
  ],
  [
    "a lost child status finishes with 125",
    RUNNING,
    { type: "child-lost" },
    POLICY,
    { name: "exited", pid: 10, status: null, exitCode: 125, phase: "killing", stopped: false },
    [{ type: "finish", exitCode: 125, outcome: "lost" }],
  ],
  [
    "others reaped while terminating: sweep with SIGTERM",
    EXITED,
    { type: "others-reaped" },
    POLICY,
    EXITED,
    [{ type: "signal-leftovers", signo: 15 }],
  ],
  [
    "others reaped while killing: sweep with SIGKILL",
    { ...EXITED, phase: "killing" },
    { type: "others-reaped" },
    POLICY,
    { ...EXITED, phase: "killing" },
    [{ type: "signal-leftovers", signo: 9 }],
  ],
  [
    "stale grace expiry in running does nothing",
    RUNNING,
    { type: "grace-expired" },
    POLICY,
    RUNNING,
    [],
  ],
  [
    "child exit: TERM leftovers, arm kill timer, the grace timer keeps running",
    STOPPING,
    { type: "child-exited", status: { kind: "exited", code: 4 }, othersLeft: true },
    POLICY,
    { ...EXITED, stopped: true },
    [
      { type: "signal-leftovers", signo: 15 },
      { type: "start-timer", timer: "kill", ms: 1000 },
    ],
  ],
  [
    "child exit with kill-after 0: SIGKILL at once",
    RUNNING,
    {
      type: "child-exited",
      status: { kind: "signaled", signo: 15, coreDumped: false },
      othersLeft: true,
    },
    { ...POLICY, killAfterMs: 0 },
    {
      ...EXITED,
      status: { kind: "signaled", signo: 15, coreDumped: false },
      exitCode: 0,
      phase: "killing",
    },
    [
      { type: "signal-leftovers", signo: 9, timer: "kill-after" },
      { type: "start-timer", timer: "kill", ms: ABANDON_MS },
    ],
  ],
  [
    "child exit with nothing else left: finish at once, nothing to kill",
    RUNNING,
    { type: "child-exited", status: { kind: "exited", code: 4 }, othersLeft: false },
    POLICY,
    EXITED,
    [{ type: "finish", exitCode: 4, outcome: "done" }],
  ],
  ["kill timer escalates to SIGKILL", EXITED, { type: "kill-expired" }, POLICY, {
    ...EXITED,
    phase: "killing",
  }, [
    { type: "signal-leftovers", signo: 9, timer: "kill-after" },
    { type: "start-timer", timer: "kill", ms: ABANDON_MS },
  ]],
  [
    "second kill timer abandons",
    { ...EXITED, phase: "killing" },
    { type: "kill-expired" },
    POLICY,
    { ...EXITED, phase: "killing" },
    [{ type: "finish", exitCode: 4, outcome: "abandoned" }],
  ],
  ["no children left finishes", EXITED, { type: "children-gone" }, POLICY, EXITED, [
    { type: "finish", exitCode: 4, outcome: "done" },
  ]],
  ["signals after exit are dropped", EXITED, signal(10), POLICY, EXITED, [
    { type: "drop-signal", signo: 10, reason: "child exited" },
  ]],
  [
    "children-gone while running is ignored",
    RUNNING,
    { type: "children-gone" },
    POLICY,
    RUNNING,
    [],
  ],
  // --shutdown-delay
  ["a first TERM is held for the delay", RUNNING, signal(15), DELAY, DRAINING, [
    { type: "hold-signal", signo: 15, ms: 2000 },
    { type: "start-timer", timer: "delay", ms: 2000 },
  ]],
  ["QUIT (nginx's STOPSIGNAL) is held like TERM", RUNNING, signal(3), DELAY, {
    ...DRAINING,
    draining: 3,
  }, [
    { type: "hold-signal", signo: 3, ms: 2000 },
    { type: "start-timer", timer: "delay", ms: 2000 },
  ]],
  // --stop-signal USR1 (10): a stop like TERM, held by the delay like TERM
  ["without --stop-signal USR1 is no stop", RUNNING, signal(10), DELAY, RUNNING, [
    forward(10, 10),
  ]],
  ["--stop-signal USR1 stops with grace", RUNNING, signal(10), { ...POLICY, stopSignal: 10 }, {
    ...STOPPING,
  }, [forward(10, 10), { type: "start-timer", timer: "grace", ms: 500 }]],
  ["--stop-signal USR1 is held by the delay", RUNNING, signal(10), { ...DELAY, stopSignal: 10 }, {
    ...DRAINING,
    draining: 10,
  }, [
    { type: "hold-signal", signo: 10, ms: 2000 },
    { type: "start-timer", timer: "delay", ms: 2000 },
  ]],
  [
    "--stop-signal USR1 ends a wait for descendants",
    WAITING,
    signal(10),
    { ...WAIT, stopSignal: 10 },
    { ...WAITING, exitCode: 138, stopped: true },
    [{ type: "signal-descendants", signo: 10 }, { type: "start-timer", timer: "grace", ms: 500 }],
  ],
  [
    "--stop-signal USR1 bounds leftovers by grace",
    EXITED,
    signal(10),
    { ...POLICY, stopSignal: 10 },
    { ...EXITED, stopped: true },
    [{ type: "drop-signal", signo: 10, reason: "child exited" }, {
      type: "start-timer",
      timer: "grace",
      ms: 500,
    }],
  ],
  [
    "the delay's end forwards the held signal and starts grace",
    DRAINING,
    {
      type: "delay-expired",
    },
    DELAY,
    STOPPING,
    [forward(3, 15), { type: "start-timer", timer: "grace", ms: 500 }],
  ],
  [
    "a second stop signal during the delay goes through at once",
    DRAINING,
    signal(2),
    DELAY,
    STOPPING,
    [
      { type: "cancel-timer", timer: "delay" },
      forward(3, 15), // the held TERM first (rewritten to QUIT by this policy), then INT
      forward(2, 2),
      { type: "start-timer", timer: "grace", ms: 500 },
    ],
  ],
  [
    "a non-stop signal during the delay is forwarded, the delay goes on",
    DRAINING,
    signal(10),
    DELAY,
    DRAINING,
    [
      forward(10, 10),
    ],
  ],
  [
    "the child exiting during the delay finishes the run (its timers with it)",
    DRAINING,
    {
      type: "child-exited",
      status: { kind: "exited", code: 0 },
      othersLeft: false,
    },
    DELAY,
    { ...EXITED, status: { kind: "exited", code: 0 }, exitCode: 0, stopped: true },
    [{ type: "finish", exitCode: 0, outcome: "done" }],
  ],
  // --timeout
  [
    "the child's start arms the deadline",
    INITIAL_STATE,
    { type: "child-started", pid: 10, target: -10 },
    TIMEOUT,
    RUNNING,
    [{ type: "start-timer", timer: "deadline", ms: 60_000 }],
  ],
  [
    "the deadline TERMs the child and starts grace",
    RUNNING,
    { type: "deadline-expired" },
    TIMEOUT,
    {
      ...STOPPING,
      cause: "timeout",
    },
    [
      { type: "time-out", target: -10, term: true },
      { type: "start-timer", timer: "grace", ms: 500 },
    ],
  ],
  [
    "without grace the deadline TERMs, and KILLs after --kill-after",
    RUNNING,
    { type: "deadline-expired" },
    { ...TIMEOUT, graceMs: null },
    { ...STOPPING, cause: "timeout" },
    [
      { type: "time-out", target: -10, term: true },
      { type: "start-timer", timer: "grace", ms: 1000 },
    ],
  ],
  [
    "without grace, a deadline after a stop signal sends no second TERM",
    STOPPING,
    { type: "deadline-expired" },
    { ...TIMEOUT, graceMs: null },
    { ...STOPPING, cause: "timeout" },
    [
      { type: "time-out", target: -10, term: false },
      { type: "start-timer", timer: "grace", ms: 1000 },
    ],
  ],
  [
    "a stop signal rewritten to 0 changes nothing: no stop, no grace",
    RUNNING,
    signal(15),
    { ...POLICY, rewrite: new Map([[15, 0]]) },
    RUNNING,
    [{ type: "drop-signal", signo: 15, reason: "rewrite" }],
  ],
  [
    "a stop signal while leftovers are stopped starts grace",
    EXITED,
    signal(15),
    POLICY,
    { ...EXITED, stopped: true },
    [
      { type: "drop-signal", signo: 15, reason: "child exited" },
      { type: "start-timer", timer: "grace", ms: 500 },
    ],
  ],
  [
    "a second stop signal while leftovers are stopped keeps the grace timer",
    { ...EXITED, stopped: true },
    signal(2),
    POLICY,
    { ...EXITED, stopped: true },
    [{ type: "drop-signal", signo: 2, reason: "child exited" }],
  ],
  [
    "a child that ends during the delay leaves leftovers that grace bounds",
    DRAINING,
    { type: "child-exited", status: { kind: "exited", code: 0 }, othersLeft: true },
    DELAY,
    { ...EXITED, status: { kind: "exited", code: 0 }, exitCode: 0, stopped: true },
    [
      { type: "cancel-timer", timer: "delay" },
      { type: "start-timer", timer: "grace", ms: 500 },
      { type: "signal-leftovers", signo: 15 },
      { type: "start-timer", timer: "kill", ms: 1000 },
    ],
  ],
  [
    "a deadline during a stop keeps its grace timer",
    STOPPING,
    { type: "deadline-expired" },
    TIMEOUT,
    {
      ...STOPPING,
      cause: "timeout",
    },
    [{ type: "time-out", target: -10, term: false }],
  ],
  [
    "a timed-out child exits 124 whatever its status",
    { ...STOPPING, cause: "timeout" },
    {
      type: "child-exited",
      status: { kind: "signaled", signo: 15, coreDumped: false },
      othersLeft: false,
    },
    TIMEOUT,
    {
      ...EXITED,
      status: { kind: "signaled", signo: 15, coreDumped: false },
      exitCode: ExitCode.TIMED_OUT,
      stopped: true,
    },
    [{ type: "finish", exitCode: 124, outcome: "done" }],
  ],
  // --wait-descendants
  [
    "with --wait-descendants the child's exit leaves the others running",
    RUNNING,
    {
      type: "child-exited",
      status: { kind: "exited", code: 4 },
      othersLeft: true,
    },
    WAIT,
    WAITING,
    [],
  ],
  ["while waiting, signals go to the descendants", WAITING, signal(10), WAIT, WAITING, [
    { type: "signal-descendants", signo: 10 },
  ]],
  ["while waiting, a stop signal ends the wait with 128+N and grace", WAITING, signal(15), WAIT, {
    ...WAITING,
    exitCode: 143,
    stopped: true,
  }, [{ type: "signal-descendants", signo: 3 }, { type: "start-timer", timer: "grace", ms: 500 }]],
  [
    "while waiting, a second stop signal is passed on and grace goes on",
    { ...WAITING, exitCode: 143, stopped: true },
    signal(2),
    WAIT,
    { ...WAITING, exitCode: 143, stopped: true },
    [{ type: "signal-descendants", signo: 2 }],
  ],
  [
    "when the descendants are gone, the child's code",
    WAITING,
    { type: "children-gone" },
    WAIT,
    WAITING,
    [{ type: "finish", exitCode: 4, outcome: "done" }],
  ],
  [
    "when only denit's job service is left, the leftovers' stop begins",
    WAITING,
    { type: "descendants-gone" },
    WAIT,
    { ...WAITING, phase: "terminating" },
    [
      { type: "signal-leftovers", signo: 15 },
      { type: "start-timer", timer: "kill", ms: WAIT.killAfterMs },
    ],
  ],
  [
    "only the job service left and --kill-after 0: SIGKILL at once",
    WAITING,
    { type: "descendants-gone" },
    { ...WAIT, killAfterMs: 0 },
    { ...WAITING, phase: "killing" },
    [
      { type: "signal-leftovers", signo: 9, timer: "kill-after" },
      { type: "start-timer", timer: "kill", ms: ABANDON_MS },
    ],
  ],
  [
    "only the job service left matters only while waiting",
    EXITED,
    { type: "descendants-gone" },
    WAIT,
    EXITED,
    [],
  ],
  ["grace ends the wait with SIGKILL", WAITING, { type: "grace-expired" }, WAIT, {
    ...WAITING,
    phase: "killing",
  }, [
    { type: "signal-leftovers", signo: 9, timer: "grace" },
    { type: "start-timer", timer: "kill", ms: ABANDON_MS },
  ]],
];

for (const [name, state, event, policy, nextState, effects] of TABLE) {
  Deno.test(`transition: ${name}`, () => {
    const step = transition(state, event, policy);
    assertEquals(step.state, nextState);
    assertEquals(step.effects, effects);
  });
}

Deno.test("exit code: code, 128+N, and -e remapping of either", () => {
  const none = new Set<number>();
  assertEquals(exitCodeFor({ kind: "exited", code: 0 }, none), 0);
  assertEquals(exitCodeFor({ kind: "exited", code: 255 }, none), 255);
  assertEquals(exitCodeFor({ kind: "signaled", signo: 9, coreDumped: false }, none), 137);
  assertEquals(exitCodeFor({ kind: "signaled", signo: 34, coreDumped: false }, none), 162);
  assertEquals(exitCodeFor({ kind: "exited", code: 3 }, new Set([3])), 0);
  assertEquals(exitCodeFor({ kind: "signaled", signo: 15, coreDumped: false }, new Set([143])), 0);
});
