/**
 * The supervisor's state machine: State, Event, Effect and a pure `transition()`.
 *
 * Invariants:
 * - The main child's status arrives exactly once, as `child-exited`, and fixes the exit code;
 *   nothing after it can change that code.
 * - Signals received before the child runs are kept and forwarded once it runs; signals received
 *   after it exited are dropped (there is nobody to receive them).
 * - Once the child exited, leftovers get SIGTERM, then SIGKILL after `killAfterMs`, and denit
 *   finishes when no child is left, or at the latest `ABANDON_MS` after SIGKILL; at once when
 *   the reaper saw no other child left.
 * - `transition()` performs nothing; the driver (driver.ts) performs the effects it returns.
 */

import type { ExitStatus } from "./libc.ts";
import { SIGKILL, SIGTERM, STOP_SIGNALS } from "./signals.ts";

/** How long to wait for SIGKILLed leftovers to be reaped before exiting anyway (D state). */
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
  | { readonly name: "stopping"; readonly pid: number; readonly target: number }
  | {
    readonly name: "exited";
    readonly pid: number;
    readonly status: ExitStatus;
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
  | { readonly type: "grace-expired" }
  | { readonly type: "kill-timer-expired" }
  | { readonly type: "children-gone" };

/** Something the driver must do. */
export type Effect =
  | {
    readonly type: "forward-signal";
    readonly signo: number;
    readonly target: number;
    readonly received: number;
  }
  | { readonly type: "drop-signal"; readonly signo: number; readonly reason: string }
  | { readonly type: "start-timer"; readonly timer: "grace" | "kill"; readonly ms: number }
  | { readonly type: "cancel-timer"; readonly timer: "grace" | "kill" }
  | { readonly type: "kill-leftovers"; readonly signo: number }
  | { readonly type: "finish"; readonly exitCode: number; readonly abandoned: boolean };

/** The result of one transition. */
export interface Step {
  readonly state: State;
  readonly effects: readonly Effect[];
}

/** The starting state. */
export const INITIAL_STATE: State = Object.freeze({ name: "starting", pending: [] });

/** The exit code for a child status: its code, or 128+N for signal N; then `-e` remapping. */
export function exitCodeFor(status: ExitStatus, remapExit: ReadonlySet<number>): number {
  const code = status.kind === "exited" ? status.code : 128 + status.signo;
  return remapExit.has(code) ? 0 : code;
}

function stay(state: State, ...effects: Effect[]): Step {
  return { state, effects };
}

function forward(
  state: Extract<State, { name: "running" | "stopping" }>,
  received: number,
  policy: Policy,
): Step {
  const signo = policy.rewrite.get(received) ?? received;
  if (signo === 0) return stay(state, { type: "drop-signal", signo: received, reason: "rewrite" });
  const send: Effect = { type: "forward-signal", signo, target: state.target, received };
  if (state.name === "stopping" || !STOP_SIGNALS.has(received)) return stay(state, send);
  const stopping: State = { name: "stopping", pid: state.pid, target: state.target };
  if (policy.graceMs === null) return stay(stopping, send);
  return stay(stopping, send, { type: "start-timer", timer: "grace", ms: policy.graceMs });
}

function childExited(
  state: Extract<State, { name: "running" | "stopping" }>,
  event: Extract<Event, { type: "child-exited" }>,
  policy: Policy,
): Step {
  const { status } = event;
  const exitCode = exitCodeFor(status, policy.remapExit);
  const base = { name: "exited", pid: state.pid, status, exitCode } as const;
  const cancel: Effect = { type: "cancel-timer", timer: "grace" };
  if (!event.othersLeft) {
    return stay({ ...base, phase: "terminating" }, cancel, {
      type: "finish",
      exitCode,
      abandoned: false,
    });
  }
  if (policy.killAfterMs === 0) {
    return stay(
      { ...base, phase: "killing" },
      cancel,
      { type: "kill-leftovers", signo: SIGKILL },
      { type: "start-timer", timer: "kill", ms: ABANDON_MS },
    );
  }
  return stay(
    { ...base, phase: "terminating" },
    cancel,
    { type: "kill-leftovers", signo: SIGTERM },
    { type: "start-timer", timer: "kill", ms: policy.killAfterMs },
  );
}

/** The pure transition function: given a state and an event, the next state and effects. */
export function transition(state: State, event: Event, policy: Policy): Step {
  switch (state.name) {
    case "starting":
      if (event.type === "signal-received") {
        return stay({ name: "starting", pending: [...state.pending, event.signo] });
      }
      if (event.type === "child-started") {
        const running: State = { name: "running", pid: event.pid, target: event.target };
        return state.pending.reduce<Step>((step, signo) => {
          const next = forward(step.state as typeof running, signo, policy);
          return { state: next.state, effects: [...step.effects, ...next.effects] };
        }, stay(running));
      }
      return stay(state);
    case "running":
    case "stopping":
      if (event.type === "signal-received") return forward(state, event.signo, policy);
      if (event.type === "child-exited") return childExited(state, event, policy);
      if (event.type === "grace-expired" && state.name === "stopping") {
        return stay(state, {
          type: "forward-signal",
          signo: SIGKILL,
          target: state.target,
          received: 0,
        });
      }
      return stay(state);
    case "exited":
      if (event.type === "children-gone") {
        return stay(
          state,
          { type: "cancel-timer", timer: "kill" },
          { type: "finish", exitCode: state.exitCode, abandoned: false },
        );
      }
      if (event.type === "kill-timer-expired" && state.phase === "terminating") {
        return stay(
          { ...state, phase: "killing" },
          { type: "kill-leftovers", signo: SIGKILL },
          { type: "start-timer", timer: "kill", ms: ABANDON_MS },
        );
      }
      if (event.type === "kill-timer-expired") {
        return stay(state, { type: "finish", exitCode: state.exitCode, abandoned: true });
      }
      if (event.type === "signal-received") {
        return stay(state, { type: "drop-signal", signo: event.signo, reason: "child exited" });
      }
      return stay(state);
  }
}
