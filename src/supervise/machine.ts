/**
 * The supervisor's state machine: State, Event, Effect and a pure `transition()`.
 *
 * Invariants:
 * - The main child's status arrives exactly once, as `child-exited`, and fixes the exit code;
 *   nothing after it can change that code. If it is lost (`child-lost`: the kernel reaped it
 *   because SIGCHLD was ignored by force), denit exits 125; it never waits forever.
 * - Signals received before the child runs are kept and forwarded once it runs; signals received
 *   after it exited are dropped (there is nobody to receive them).
 * - The stop budget: with `--grace G`, denit exits at most G + ABANDON_MS after the first stop
 *   signal it forwarded. At G the child and every leftover get SIGKILL together; a child that
 *   stopped earlier leaves its leftovers until G at the latest (or `--kill-after`, if sooner).
 * - Without a stop signal, leftovers get SIGTERM when the child exits, SIGKILL `killAfterMs`
 *   later, and denit finishes when no child is left, or at the latest `ABANDON_MS` after
 *   SIGKILL; at once when the reaper saw no other child left.
 * - `transition()` performs nothing; the driver (supervisor.ts) performs the effects it returns.
 */

import { ExitCode } from "../common/exit_codes.ts";
import { SIGKILL, SIGTERM } from "../common/signals.ts";
import type { ExitStatus } from "../sys/process.ts";
import { STOP_SIGNALS } from "./signals.ts";

/** How long to wait for SIGKILLed processes to be reaped before exiting anyway (D state). */
export const ABANDON_MS = 2000;

/** The parts of the configuration that decide transitions. */
export interface Policy {
  readonly rewrite: ReadonlyMap<number, number>;
  readonly graceMs: number | null;
  readonly killAfterMs: number;
  readonly remapExit: ReadonlySet<number>;
}

/** Where the cleanup after the child's exit is. */
export type CleanupPhase = "terminating" | "killing";

/** The supervisor's state; `name` is what /status reports. */
export type State =
  | { readonly name: "starting"; readonly pending: readonly number[] }
  | { readonly name: "running"; readonly pid: number; readonly target: number }
  | {
    readonly name: "stopping";
    readonly pid: number;
    readonly target: number;
    /** The grace period ran out: the child and every leftover got SIGKILL. */
    readonly forced: boolean;
  }
  | {
    readonly name: "exited";
    readonly pid: number;
    /** null when the status was lost. */
    readonly status: ExitStatus | null;
    readonly exitCode: number;
    readonly phase: CleanupPhase;
  };

/** Something that happened. */
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
  | { readonly type: "kill-timer-expired" }
  | { readonly type: "children-gone" };

/** Which timer an effect means. */
export type TimerName = "grace" | "kill";

/** How the run ended, for the last log line. */
export type Outcome = "done" | "abandoned" | "lost";

/** Something the driver must do. */
export type Effect =
  | {
    readonly type: "forward-signal";
    readonly signo: number;
    readonly target: number;
    readonly received: number;
  }
  | { readonly type: "drop-signal"; readonly signo: number; readonly reason: string }
  | { readonly type: "start-timer"; readonly timer: TimerName; readonly ms: number }
  | { readonly type: "cancel-timer"; readonly timer: TimerName }
  /** The grace period ran out: SIGKILL to the child's target and to every leftover. */
  | { readonly type: "force-kill"; readonly target: number }
  /** Each leftover gets `signo` once (a later sweep signals only processes new to it). */
  | { readonly type: "signal-leftovers"; readonly signo: number }
  | { readonly type: "finish"; readonly exitCode: number; readonly outcome: Outcome };

/** The result of one transition. */
export interface Step {
  readonly state: State;
  readonly effects: readonly Effect[];
}

/** The starting state. */
export const INITIAL_STATE: State = Object.freeze({ name: "starting", pending: [] });

/** The exit code for a child status: its code, or 128+N for signal N; then `-e` remapping. */
export function exitCodeFor(status: ExitStatus, remapExit: ReadonlySet<number>): number {
  const code = status.kind === "exited" ? status.code : ExitCode.SIGNAL_BASE + status.signo;
  return remapExit.has(code) ? 0 : code;
}

function stay(state: State, ...effects: Effect[]): Step {
  return { state, effects };
}

type Live = Extract<State, { name: "running" | "stopping" }>;

function forward(state: Live, received: number, policy: Policy): Step {
  const signo = policy.rewrite.get(received) ?? received;
  if (signo === 0) return stay(state, { type: "drop-signal", signo: received, reason: "rewrite" });
  const send: Effect = { type: "forward-signal", signo, target: state.target, received };
  if (state.name === "stopping" || !STOP_SIGNALS.has(received)) return stay(state, send);
  const stopping: State = { name: "stopping", pid: state.pid, target: state.target, forced: false };
  if (policy.graceMs === null) return stay(stopping, send);
  return stay(stopping, send, { type: "start-timer", timer: "grace", ms: policy.graceMs });
}

function killing(state: Extract<State, { name: "exited" }>): Step {
  return stay(
    { ...state, phase: "killing" },
    { type: "signal-leftovers", signo: SIGKILL },
    { type: "start-timer", timer: "kill", ms: ABANDON_MS },
  );
}

function childExited(
  state: Live,
  event: Extract<Event, { type: "child-exited" }>,
  policy: Policy,
): Step {
  const exitCode = exitCodeFor(event.status, policy.remapExit);
  const exited = {
    name: "exited",
    pid: state.pid,
    status: event.status,
    exitCode,
    phase: "terminating",
  } as const;
  if (!event.othersLeft) {
    return stay(exited, { type: "cancel-timer", timer: "grace" }, {
      type: "finish",
      exitCode,
      outcome: "done",
    });
  }
  const forced = state.name === "stopping" && state.forced;
  if (forced || policy.killAfterMs === 0) return killing(exited);
  // A running grace timer stays: it bounds the leftovers' time as it bounded the child's.
  return stay(
    exited,
    { type: "signal-leftovers", signo: SIGTERM },
    { type: "start-timer", timer: "kill", ms: policy.killAfterMs },
  );
}

function live(state: Live, event: Event, policy: Policy): Step {
  switch (event.type) {
    case "signal-received":
      return forward(state, event.signo, policy);
    case "child-exited":
      return childExited(state, event, policy);
    case "child-lost":
      return stay(
        {
          name: "exited",
          pid: state.pid,
          status: null,
          exitCode: ExitCode.INTERNAL,
          phase: "killing",
        },
        { type: "cancel-timer", timer: "grace" },
        { type: "finish", exitCode: ExitCode.INTERNAL, outcome: "lost" },
      );
    case "grace-expired":
      if (state.name !== "stopping" || state.forced) return stay(state);
      return stay({ ...state, forced: true }, { type: "force-kill", target: state.target });
    default:
      return stay(state);
  }
}

function exited(state: Extract<State, { name: "exited" }>, event: Event): Step {
  switch (event.type) {
    case "children-gone":
      return stay(
        state,
        { type: "cancel-timer", timer: "kill" },
        { type: "cancel-timer", timer: "grace" },
        { type: "finish", exitCode: state.exitCode, outcome: "done" },
      );
    case "grace-expired":
    case "kill-timer-expired":
      if (state.phase === "terminating") return killing(state);
      if (event.type === "grace-expired") return stay(state);
      return stay(
        state,
        { type: "cancel-timer", timer: "grace" },
        { type: "finish", exitCode: state.exitCode, outcome: "abandoned" },
      );
    case "others-reaped": {
      // Processes reparented to denit since the last sweep (their parent just died) get the
      // phase's signal too; the driver signals each process once per signal.
      const signo = state.phase === "terminating" ? SIGTERM : SIGKILL;
      return stay(state, { type: "signal-leftovers", signo });
    }
    case "signal-received":
      return stay(state, { type: "drop-signal", signo: event.signo, reason: "child exited" });
    default:
      return stay(state);
  }
}

/** The pure transition function: given a state and an event, the next state and effects. */
export function transition(state: State, event: Event, policy: Policy): Step {
  switch (state.name) {
    case "starting":
      if (event.type === "signal-received") {
        return stay({ name: "starting", pending: [...state.pending, event.signo] });
      }
      if (event.type === "child-started") {
        const running: Live = { name: "running", pid: event.pid, target: event.target };
        return state.pending.reduce<Step>((step, signo) => {
          const next = forward(step.state as Live, signo, policy);
          return { state: next.state, effects: [...step.effects, ...next.effects] };
        }, stay(running));
      }
      return stay(state);
    case "running":
    case "stopping":
      return live(state, event, policy);
    case "exited":
      return exited(state, event);
  }
}
