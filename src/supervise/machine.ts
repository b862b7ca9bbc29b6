/**
 * The supervisor's state machine: State, Event, Effect and a pure `transition()` (the driver,
 * supervisor.ts, performs the effects). Invariants:
 * - The child's status arrives once (`child-exited`) and fixes the exit code; only `--timeout`
 *   (124) and, with `--wait-descendants`, a stop that ended the descendants (128+N) change it.
 *   A lost status (`child-lost`) exits 125; denit never waits forever.
 * - A stop signal before the child runs means it is not started (exit 128+N); other signals
 *   then, and after the child exited, are dropped (`--wait-descendants`: sent to descendants).
 * - From the first stop signal denit exits within the shutdown delay (`--drain-while` may end
 *   it early), plus `--grace G`, plus ABANDON_MS; at G the child and leftovers get SIGKILL.
 * - Without a stop, leftovers get SIGTERM when the child exits, SIGKILL `killAfterMs` later;
 *   denit finishes when no child is left, or ABANDON_MS after that SIGKILL.
 */

import { ExitCode } from "../common/exit_codes.ts";
import { SIGKILL, signalNumber, SIGTERM, STOP_SIGNALS } from "../common/signals.ts";
import type { ExitStatus } from "../sys/process.ts";

/** How long to wait for SIGKILLed processes to be reaped before exiting anyway (D state). */
export const ABANDON_MS = 2000;

const STOPS: ReadonlySet<number> = new Set(STOP_SIGNALS.map(signalNumber));

/** A stop request (TERM, INT, QUIT) or the `--stop-signal`. */
function isStop(policy: Policy, signo: number): boolean {
  return STOPS.has(signo) || signo === policy.stopSignal;
}

/** The parts of the configuration (cli.ts) that decide transitions. */
export interface Policy {
  readonly rewrite: ReadonlyMap<number, number>;
  readonly graceMs: number | null;
  readonly killAfterMs: number;
  readonly remapExit: ReadonlySet<number>;
  readonly shutdownDelayMs: number;
  readonly timeoutMs: number | null;
  readonly waitDescendants: boolean;
  readonly stopSignal: number | null;
}

export type CleanupPhase = "terminating" | "killing" | "waiting";

export type StopCause = "signal" | "timeout";

/** The supervisor's state; `name` is what /status reports. */
export type State =
  | { readonly name: "starting" }
  | { readonly name: "running"; readonly pid: number; readonly target: number }
  | {
    readonly name: "stopping";
    readonly pid: number;
    readonly target: number;
    /** The grace period ran out: the child and every leftover got SIGKILL. */
    readonly forced: boolean;
    /** A stop signal held back by the shutdown delay (the signal as received); null: sent. */
    readonly draining: number | null;
    readonly cause: StopCause;
  }
  | {
    readonly name: "exited";
    readonly pid: number;
    readonly status: ExitStatus | null;
    readonly exitCode: number;
    readonly phase: CleanupPhase;
    /** A stop is under way: its grace timer runs (a later stop signal does not restart it). */
    readonly stopped: boolean;
  };

export type Event =
  | { readonly type: "child-started"; readonly pid: number; readonly target: number }
  | { readonly type: "signal-received"; readonly signo: number }
  | {
    readonly type: "child-exited";
    readonly status: ExitStatus;
    /** False when the reaper already saw that no other child exists: nothing to stop. */
    readonly othersLeft: boolean;
  }
  | { readonly type: "child-lost" }
  | { readonly type: "others-reaped" }
  | { readonly type: "grace-expired" }
  | { readonly type: "kill-expired" }
  | { readonly type: "delay-expired" }
  /** `--drain-while`: its check no longer holds, so the held stop goes on before the delay. */
  | { readonly type: "drain-ended" }
  | { readonly type: "deadline-expired" }
  | { readonly type: "children-gone" }
  /** `--wait-descendants`: no process is left but denit's own job service. */
  | { readonly type: "descendants-gone" };

export type TimerName = "grace" | "kill" | "delay" | "deadline";

/** How the run ended, for the last log line. */
export type Outcome = "done" | "abandoned" | "lost" | "not-started";

export type Effect =
  | {
    readonly type: "forward-signal";
    readonly signo: number;
    readonly target: number;
    readonly received: number;
  }
  | { readonly type: "drop-signal"; readonly signo: number; readonly reason: string }
  | { readonly type: "hold-signal"; readonly signo: number; readonly ms: number }
  | { readonly type: "start-timer"; readonly timer: TimerName; readonly ms: number }
  | { readonly type: "cancel-timer"; readonly timer: TimerName }
  /** The deadline passed: say so, and (`term`) send SIGTERM to the child's target. */
  | { readonly type: "time-out"; readonly target: number; readonly term: boolean }
  /** The grace period ran out: SIGKILL to the child's target and to every leftover. */
  | { readonly type: "force-kill"; readonly target: number }
  /** Each leftover gets `signo` once; a SIGKILL names the timer that ran out. */
  | { readonly type: "signal-leftovers"; readonly signo: number; readonly timer?: KillTimer }
  /** `--wait-descendants`: a signal for every remaining descendant, as often as it comes. */
  | { readonly type: "signal-descendants"; readonly signo: number }
  /** The run is over: every timer stops, and denit exits with `exitCode`. */
  | { readonly type: "finish"; readonly exitCode: number; readonly outcome: Outcome };

export interface Step {
  readonly state: State;
  readonly effects: readonly Effect[];
}

export const INITIAL_STATE: State = Object.freeze({ name: "starting" });

/** The exit code for a child status: its code, or 128+N for signal N; then `-e` remapping. */
export function exitCodeFor(status: ExitStatus, remapExit: ReadonlySet<number>): number {
  const code = status.kind === "exited" ? status.code : ExitCode.SIGNAL_BASE + status.signo;
  return remapExit.has(code) ? 0 : code;
}

function step(state: State, ...effects: Effect[]): Step {
  return { state, effects };
}

type Live = Extract<State, { name: "running" | "stopping" }>;
type Stopping = Extract<State, { name: "stopping" }>;
type Exited = Extract<State, { name: "exited" }>;

function stopping(state: Live, fields: Partial<Stopping>): State {
  const base: Stopping = state.name === "stopping"
    ? state
    : { ...state, name: "stopping", forced: false, draining: null, cause: "signal" };
  return { ...base, ...fields };
}

function graceTimer(policy: Policy): Effect[] {
  return policy.graceMs === null
    ? []
    : [{ type: "start-timer", timer: "grace", ms: policy.graceMs }];
}

/** The time between a deadline's SIGTERM and its SIGKILL: `--grace`, else `--kill-after`. */
export function deadlineGraceMs(policy: Policy): number {
  return policy.graceMs ?? policy.killAfterMs;
}

function deadlineTimer(policy: Policy): Effect {
  return { type: "start-timer", timer: "grace", ms: deadlineGraceMs(policy) };
}

/** What `-r` makes of a signal (0: dropped). */
function rewritten(policy: Policy, signo: number): number {
  return policy.rewrite.get(signo) ?? signo;
}

type Forward = Extract<Effect, { type: "forward-signal" }>;

function send(state: Live, received: number, policy: Policy): Forward | null {
  const signo = rewritten(policy, received);
  if (signo === 0) return null;
  return { type: "forward-signal", signo, target: state.target, received };
}

function forward(state: Live, received: number, policy: Policy): Step {
  const effect = send(state, received, policy);
  // Rewritten to 0: dropped, and nothing else changes (no stop, no grace, still ready).
  if (effect === null) {
    return step(state, { type: "drop-signal", signo: received, reason: "rewrite" });
  }
  const stop = isStop(policy, received);
  if (state.name === "stopping" && state.draining !== null && stop) {
    // A second stop signal during the shutdown delay goes through at once, after the one
    // that was held (the child gets both, in the order they came; one, if they are the same).
    const held = send(state, state.draining, policy);
    const next = stopping(state, { draining: null });
    const first = held !== null && held.signo !== effect.signo ? [held] : [];
    return step(next, ...cancelTimers(policy, "delay"), ...first, effect, ...graceTimer(policy));
  }
  if (state.name === "stopping" || !stop) return step(state, effect);
  if (policy.shutdownDelayMs > 0) {
    // Readiness fails at once (the state is stopping); the child hears of it after the delay.
    return step(
      stopping(state, { draining: received }),
      { type: "hold-signal", signo: received, ms: policy.shutdownDelayMs },
      { type: "start-timer", timer: "delay", ms: policy.shutdownDelayMs },
    );
  }
  return step(stopping(state, {}), effect, ...graceTimer(policy));
}

function childExited(
  state: Live,
  event: Extract<Event, { type: "child-exited" }>,
  policy: Policy,
): Step {
  const timedOut = state.name === "stopping" && state.cause === "timeout";
  const exitCode = timedOut ? ExitCode.TIMED_OUT : exitCodeFor(event.status, policy.remapExit);
  // A child that ends during the shutdown delay leaves a stop under way whose grace timer
  // never started: it starts now, so that the stop budget bounds the leftovers too.
  const draining = state.name === "stopping" && state.draining !== null;
  const exited: Exited = {
    name: "exited",
    pid: state.pid,
    status: event.status,
    exitCode,
    phase: "terminating",
    stopped: state.name === "stopping",
  };
  const timers = [
    ...cancelTimers(policy, "delay", "deadline"),
    ...(draining && event.othersLeft ? graceTimer(policy) : []),
  ];
  if (!event.othersLeft) return step(exited, { type: "finish", exitCode, outcome: "done" });
  const forced = state.name === "stopping" && state.forced;
  if (policy.waitDescendants && !forced) {
    // The descendants carry on: denit waits for them, forwarding what it receives. A stop
    // already under way keeps its grace timer, which ends them at its expiry.
    return step({ ...exited, phase: "waiting" }, ...timers);
  }
  // A running grace timer stays: it bounds the leftovers' time as it bounded the child's.
  return stopLeftovers(exited, policy, timers, forced);
}

/** The leftovers get SIGTERM, and SIGKILL after --kill-after (at once with 0, or `forced`). */
function stopLeftovers(
  state: Exited,
  policy: Policy,
  before: readonly Effect[],
  forced = false,
): Step {
  if (forced || policy.killAfterMs === 0) return killing(state, "kill-after", before);
  return step(
    { ...state, phase: "terminating" },
    ...before,
    { type: "signal-leftovers", signo: SIGTERM },
    { type: "start-timer", timer: "kill", ms: policy.killAfterMs },
  );
}

export type KillTimer = "grace" | "kill-after";

function killing(state: Exited, timer: KillTimer, before: readonly Effect[] = []): Step {
  return step(
    { ...state, phase: "killing" },
    ...before,
    { type: "signal-leftovers", signo: SIGKILL, timer },
    { type: "start-timer", timer: "kill", ms: ABANDON_MS },
  );
}

function deadline(state: Live, policy: Policy): Step {
  if (state.name === "stopping" && state.forced) return step(state);
  const next = stopping(state, { draining: null, cause: "timeout" });
  // A stop signal already reached the child: no second SIGTERM.
  const sent = state.name === "stopping" && state.draining === null;
  // Its grace timer runs already: that one ends it.
  if (sent && policy.graceMs !== null) {
    return step(next, { type: "time-out", target: state.target, term: false });
  }
  // SIGTERM now, SIGKILL after the grace (--grace, else --kill-after).
  return step(
    next,
    ...cancelTimers(policy, "delay"),
    { type: "time-out", target: state.target, term: !sent },
    deadlineTimer(policy),
  );
}

/** Cancels of the timers this policy can have started (none for a feature that is off). */
function cancelTimers(policy: Policy, ...names: TimerName[]): Effect[] {
  const off: Partial<Record<TimerName, boolean>> = {
    delay: policy.shutdownDelayMs === 0,
    deadline: policy.timeoutMs === null,
  };
  return names.filter((timer) => !off[timer]).map((timer) => ({ type: "cancel-timer", timer }));
}

function live(state: Live, event: Event, policy: Policy): Step {
  switch (event.type) {
    case "signal-received":
      return forward(state, event.signo, policy);
    case "child-exited":
      return childExited(state, event, policy);
    case "child-lost":
      return step(
        {
          name: "exited",
          pid: state.pid,
          status: null,
          exitCode: ExitCode.INTERNAL,
          phase: "killing",
          stopped: state.name === "stopping",
        },
        { type: "finish", exitCode: ExitCode.INTERNAL, outcome: "lost" },
      );
    case "delay-expired":
    case "drain-ended": {
      if (state.name !== "stopping" || state.draining === null) return step(state);
      const effect = send(state, state.draining, policy);
      const next = stopping(state, { draining: null });
      const drop: Effect = { type: "drop-signal", signo: state.draining, reason: "rewrite" };
      const early = event.type === "drain-ended" ? cancelTimers(policy, "delay") : [];
      return step(next, ...early, effect ?? drop, ...graceTimer(policy));
    }
    case "deadline-expired":
      return deadline(state, policy);
    case "grace-expired":
      if (state.name !== "stopping" || state.forced) return step(state);
      return step({ ...state, forced: true }, { type: "force-kill", target: state.target });
    default:
      return step(state);
  }
}

function waiting(state: Exited, event: Event, policy: Policy): Step {
  switch (event.type) {
    case "signal-received": {
      const signo = rewritten(policy, event.signo);
      if (signo === 0) {
        return step(state, { type: "drop-signal", signo: event.signo, reason: "rewrite" });
      }
      if (!isStop(policy, event.signo) || state.stopped) {
        return step(state, { type: "signal-descendants", signo });
      }
      // A first stop signal ends the wait: the descendants get it, and SIGKILL after --grace
      // (a later one is passed on, and the grace period goes on as it was).
      const stopped: Exited = {
        ...state,
        exitCode: ExitCode.SIGNAL_BASE + event.signo,
        stopped: true,
      };
      return step(stopped, { type: "signal-descendants", signo }, ...graceTimer(policy));
    }
    case "deadline-expired": {
      const exitCode = ExitCode.TIMED_OUT;
      if (state.stopped && policy.graceMs !== null) return step({ ...state, exitCode });
      const timedOut: Exited = { ...state, exitCode, stopped: true };
      return step(timedOut, { type: "signal-descendants", signo: SIGTERM }, deadlineTimer(policy));
    }
    case "grace-expired":
      return killing(state, "grace");
    case "children-gone":
      return step(state, { type: "finish", exitCode: state.exitCode, outcome: "done" });
    case "descendants-gone":
      // The job service is denit's, not the child's: it is stopped as leftovers are.
      return stopLeftovers(state, policy, []);
    default:
      return step(state);
  }
}

function exited(state: Exited, event: Event, policy: Policy): Step {
  if (state.phase === "waiting") return waiting(state, event, policy);
  switch (event.type) {
    case "children-gone":
      return step(state, { type: "finish", exitCode: state.exitCode, outcome: "done" });
    case "grace-expired":
    case "kill-expired":
      if (state.phase === "terminating") {
        return killing(state, event.type === "grace-expired" ? "grace" : "kill-after");
      }
      if (event.type === "grace-expired") return step(state);
      return step(state, { type: "finish", exitCode: state.exitCode, outcome: "abandoned" });
    case "others-reaped": {
      // Processes reparented to denit since the last sweep (their parent just died) get the
      // phase's signal too; the driver signals each process once per signal.
      const signo = state.phase === "terminating" ? SIGTERM : SIGKILL;
      return step(state, { type: "signal-leftovers", signo });
    }
    case "signal-received": {
      const drop: Effect = { type: "drop-signal", signo: event.signo, reason: "child exited" };
      // A first stop signal while leftovers are stopped bounds them by --grace from now.
      if (!isStop(policy, event.signo) || state.stopped || state.phase !== "terminating") {
        return step(state, drop);
      }
      if (rewritten(policy, event.signo) === 0) return step(state, drop);
      return step({ ...state, stopped: true }, drop, ...graceTimer(policy));
    }
    default:
      return step(state);
  }
}

/** A signal before the child runs: a stop means it never starts; anything else is dropped. */
function beforeStart(state: State, signo: number, policy: Policy): Step {
  if (rewritten(policy, signo) === 0 || !isStop(policy, signo)) {
    return step(state, { type: "drop-signal", signo, reason: "before the child started" });
  }
  const code = ExitCode.SIGNAL_BASE + signo;
  const exitCode = policy.remapExit.has(code) ? 0 : code;
  return step(
    { name: "exited", pid: 0, status: null, exitCode, phase: "killing", stopped: true },
    { type: "finish", exitCode, outcome: "not-started" },
  );
}

/** The pure transition function: given a state and an event, the next state and effects. */
export function transition(state: State, event: Event, policy: Policy): Step {
  switch (state.name) {
    case "starting":
      if (event.type === "signal-received") return beforeStart(state, event.signo, policy);
      if (event.type === "child-started") {
        const running: Live = { name: "running", pid: event.pid, target: event.target };
        return policy.timeoutMs === null
          ? step(running)
          : step(running, { type: "start-timer", timer: "deadline", ms: policy.timeoutMs });
      }
      return step(state);
    case "running":
    case "stopping":
      return live(state, event, policy);
    case "exited":
      return exited(state, event, policy);
  }
}
