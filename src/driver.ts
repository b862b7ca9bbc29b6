/**
 * The supervisor's driver: the one holder of mutable state. It feeds events (signals, reaped
 * children, timers) to `transition()` and performs the effects it returns. Once the child runs,
 * nothing is thrown out of the loop: failures are logged and reaping goes on.
 */

import type { Config } from "./cli.ts";
import { execFailure, resolveCommand } from "./command.ts";
import {
  becomeSubreaper,
  Errno,
  errnoMessage,
  ignoreSignal,
  isControllingTerminal,
  sendSignal,
  setParentDeathSignal,
  spawn,
  type SpawnResult,
} from "./libc.ts";
import type { Logger } from "./log.ts";
import { ownChildren } from "./leftovers.ts";
import { reapRound } from "./reaper.ts";
import { FORWARDED, SIGNAL_TABLE, signalName } from "./signals.ts";
import {
  type Effect,
  type Event,
  INITIAL_STATE,
  type Policy,
  type State,
  transition,
} from "./supervisor.ts";

/** A read-only picture of the supervisor for the health endpoint. */
export interface Snapshot {
  readonly state: State["name"];
  readonly pid: number | null;
  readonly startedAtMs: number | null;
  readonly exitedAtMs: number | null;
  readonly exitCode: number | null;
  readonly exitSignal: string | null;
  readonly zombiesReaped: number;
  readonly signalsForwarded: Readonly<Record<string, number>>;
}

type TimerName = "grace" | "kill";

/** Runs one child under supervision. */
export class Supervisor {
  readonly #config: Config;
  readonly #policy: Policy;
  readonly #log: Logger;
  readonly #done = Promise.withResolvers<number>();
  readonly #timers = new Map<TimerName, ReturnType<typeof setTimeout>>();
  readonly #forwarded = new Map<string, number>();
  readonly #listeners: Array<[Deno.Signal, () => void]> = [];
  #state: State = INITIAL_STATE;
  #finished = false;
  #startedAtMs: number | null = null;
  #exitedAtMs: number | null = null;
  #reaped = 0;

  constructor(config: Config, log: Logger) {
    this.#config = config;
    this.#log = log;
    this.#policy = {
      rewrite: config.rewrite,
      graceMs: config.graceMs,
      killAfterMs: config.killAfterMs,
      remapExit: config.remapExit,
    };
  }

  /** The current state, frozen. */
  snapshot(): Snapshot {
    const state = this.#state;
    const exited = state.name === "exited" ? state : null;
    return Object.freeze({
      state: state.name,
      pid: state.name === "starting" ? null : state.pid,
      startedAtMs: this.#startedAtMs,
      exitedAtMs: this.#exitedAtMs,
      exitCode: exited?.exitCode ?? null,
      exitSignal: exited?.status.kind === "signaled" ? signalName(exited.status.signo) : null,
      zombiesReaped: this.#reaped,
      signalsForwarded: Object.freeze(Object.fromEntries(this.#forwarded)),
    });
  }

  /**
   * Prepares this process (parent-death signal, subreaper, signal dispositions and listeners),
   * then starts the child. Throws ExecError (126/127) if it cannot run; nothing is started then.
   */
  start(argv: readonly Uint8Array[]): void {
    const name = this.#config.command[0];
    const path = resolveCommand(name, Deno.env.get("PATH"));
    this.#prepareProcess();
    const result = this.#spawn(path, argv);
    if (result.kind === "failed") {
      this.#removeListeners();
      throw execFailure(name, result.errno);
    }
    this.#startedAtMs = Date.now();
    const target = this.#config.group ? -result.pid : result.pid;
    this.#log.info("child started", { pid: result.pid, group: this.#config.group });
    this.#dispatch({ type: "child-started", pid: result.pid, target });
    void this.#reapLoop();
  }

  /** Resolves with denit's exit code once the child and its leftovers are gone. */
  finished(): Promise<number> {
    return this.#done.promise;
  }

  #prepareProcess(): void {
    const { pdeathsig, subreaper } = this.#config;
    if (pdeathsig !== null) {
      const result = setParentDeathSignal(pdeathsig);
      if (!result.ok) this.#log.warn("cannot set parent-death signal", { errno: result.errno });
    }
    if (Deno.pid !== 1 && !subreaper) {
      this.#log.warn("not PID 1 and not a subreaper: orphans will not be reaped; use -s");
    } else if (Deno.pid !== 1) {
      const result = becomeSubreaper();
      if (!result.ok) this.#log.warn("cannot become a subreaper", { errno: result.errno });
    }
    for (const row of SIGNAL_TABLE) {
      if (row.action === "ignore") ignoreSignal(row.signo);
    }
    for (const row of FORWARDED) {
      const listener = () => this.#dispatch({ type: "signal-received", signo: row.signo });
      Deno.addSignalListener(row.name, listener);
      this.#listeners.push([row.name, listener]);
    }
  }

  #spawn(path: Uint8Array, argv: readonly Uint8Array[]): SpawnResult {
    // spawn() itself falls back to no hand-over where glibc lacks it (before 2.35).
    if (!isControllingTerminal(0)) return spawn({ path, argv });
    const result = spawn({ path, argv, foregroundFd: 0 });
    if (result.kind === "spawned" || result.stage !== "foreground") return result;
    this.#log.warn("cannot give the terminal to the child", { errno: result.errno });
    return spawn({ path, argv });
  }

  async #reapLoop(): Promise<void> {
    const state = this.#state;
    const childPid = state.name === "starting" ? 0 : state.pid;
    let previous = 0;
    while (!this.#finished) {
      const round = await reapRound(childPid, previous);
      previous = round.reaped;
      this.#reaped += round.reaped;
      if (round.reaped > 0 && this.#log.enabled("debug")) {
        this.#log.debug("reaped", { count: round.reaped, child: round.child !== null });
      }
      if (round.errno !== 0) this.#log.warn("waitpid failed", { errno: round.errno });
      if (round.child !== null) {
        this.#exitedAtMs = Date.now();
        // Nothing left at the end of this round: there is nothing to stop either.
        this.#dispatch({
          type: "child-exited",
          status: round.child,
          othersLeft: !round.noChildren,
        });
      }
      if (round.noChildren) {
        if (this.#state.name !== "exited") {
          // Cannot happen while the child is unreaped; stop rather than spin.
          this.#log.error("no children left before the child was reaped");
          return;
        }
        this.#dispatch({ type: "children-gone" });
        return;
      }
    }
  }

  #dispatch(event: Event): void {
    if (this.#finished) return;
    const step = transition(this.#state, event, this.#policy);
    this.#state = step.state;
    for (const effect of step.effects) this.#perform(effect);
  }

  #perform(effect: Effect): void {
    switch (effect.type) {
      case "forward-signal":
        return this.#forward(effect.signo, effect.target, effect.received);
      case "drop-signal":
        return this.#log.debug("signal dropped", {
          signal: signalName(effect.signo),
          reason: effect.reason,
        });
      case "start-timer":
        return this.#startTimer(effect.timer, effect.ms);
      case "cancel-timer":
        return this.#cancelTimer(effect.timer);
      case "kill-leftovers":
        return this.#killLeftovers(effect.signo);
      case "finish":
        return this.#finish(effect.exitCode, effect.abandoned);
    }
  }

  #forward(signo: number, target: number, received: number): void {
    const signal = signalName(signo);
    const result = sendSignal(target, signo);
    if (result.ok) {
      this.#forwarded.set(signal, (this.#forwarded.get(signal) ?? 0) + 1);
      // Per-signal path: build the log line only when it is shown.
      if (!this.#log.enabled("info")) return;
      const from = received === 0 ? "grace expired" : signalName(received);
      this.#log.info("signal sent", { signal, from, target });
    } else if (result.errno === Errno.ESRCH) {
      this.#log.debug("cannot forward: child already gone", { signal, target });
    } else {
      this.#log.warn(`cannot forward ${signal}: ${errnoMessage(result.errno)}`, { target });
    }
  }

  #cancelTimer(name: TimerName): void {
    // Only when one is set: the first clearTimeout() loads Deno's timer code (about 7 ms),
    // which would sit between the child's exit and denit's.
    const timer = this.#timers.get(name);
    if (timer === undefined) return;
    clearTimeout(timer);
    this.#timers.delete(name);
  }

  #startTimer(name: TimerName, ms: number): void {
    this.#cancelTimer(name);
    const event: Event = name === "grace"
      ? { type: "grace-expired" }
      : { type: "kill-timer-expired" };
    this.#timers.set(name, setTimeout(() => this.#dispatch(event), ms));
  }

  #killLeftovers(signo: number): void {
    const signal = signalName(signo);
    if (Deno.pid === 1) {
      // kill(2): pid -1 signals every process denit may signal, except itself.
      const result = sendSignal(-1, signo);
      if (result.ok) this.#log.info("signalled leftovers", { signal });
      return;
    }
    const state = this.#state;
    const group = state.name === "starting" ? null : -state.pid;
    if (group !== null && sendSignal(group, signo).ok) {
      this.#log.info("signalled the child's group", { signal, pgid: -group });
    }
    for (const pid of ownChildren()) {
      if (sendSignal(pid, signo).ok) this.#log.info("signalled a leftover", { signal, pid });
    }
  }

  #finish(exitCode: number, abandoned: boolean): void {
    if (abandoned) this.#log.warn("leftover processes survived SIGKILL; exiting anyway");
    this.#finished = true;
    for (const name of [...this.#timers.keys()]) this.#cancelTimer(name);
    // Signal listeners stay: a signal arriving now is swallowed rather than killing denit.
    this.#log.info("exiting", { code: exitCode });
    this.#done.resolve(exitCode);
  }

  #removeListeners(): void {
    for (const [name, listener] of this.#listeners) Deno.removeSignalListener(name, listener);
    this.#listeners.length = 0;
  }
}
