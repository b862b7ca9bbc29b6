/** The driver, the one holder of mutable state: performs `transition()`'s effects. */

import { errorLine } from "../common/errors.ts";
import { quietDelay } from "../common/delay.ts";
import { type DrainCheck, formatCheck } from "../common/ready.ts";
import { formatDuration } from "../common/duration.ts";
import type { Logger } from "../common/log.ts";
import { SIGCHLD, SIGKILL, signalName, SIGTERM } from "../common/signals.ts";
import { describeProcess } from "../common/proc.ts";
import type { Snapshot } from "../common/snapshot.ts";
import * as proc from "../sys/process.ts";
import type { Config } from "./cli.ts";
import { execFailure, type Executable, resolveCommand, shellFallback } from "./command.ts";
import { childrenOf, formatProcesses, leftovers, otherProcesses } from "./leftovers.ts";
import * as machine from "./machine.ts";
import { REAP_BATCH, type Reaped, type ReapRound, reapRound } from "./reaper.ts";
import type { SignalReader } from "../sys/signals.ts";
import * as zombies from "./zombies.ts";
import { explainExit, type Explanation } from "./cause.ts";
import { MemoryWatch } from "./memory.ts";
import type { MemoryCgroup } from "../sys/cgroup.ts";
import type { Spawner } from "./spawner.ts";
import type { RunAs } from "../common/accounts.ts";
import type { JobHost } from "../jobs/host.ts";

/** After an unexpected failure of a reap round, the next one waits this long. */
const REAP_RETRY_MS = 100;
/** How often `--drain-while` checks whether a held stop may go on. */
const DRAIN_INTERVAL_MS = 250;

/** Where work runs after the child started: a throw there is logged and denit goes on. */
export type FaultPoint = "signal" | "timer" | "reap" | "zombie-scan";

export interface SupervisorOptions {
  /** Called as each FaultPoint's work starts (a test's fixture throws from it). */
  readonly trap?: (point: FaultPoint) => void;
  /** The container's open-file soft limit (the launcher's record): the child's default. */
  readonly containerFileLimit: number;
}

export class Supervisor {
  readonly #config: Config;
  readonly #log: Logger;
  readonly #signals: SignalReader;
  readonly #options: SupervisorOptions;
  readonly #done = Promise.withResolvers<number>();
  /** The timers running: a timer whose token is no longer here was cancelled. */
  readonly #timers = new Map<machine.TimerName, object>();
  readonly #forwarded = new Map<string, number>();
  /** Leftovers already sent each signal: every process gets a signal once. */
  readonly #signalled = new Map<number, Set<number>>();
  /** Signals forwarded to the child's whole group (-g): its members need no second one. */
  readonly #groupSignals = new Set<number>();
  #state: machine.State = machine.INITIAL_STATE;
  #target = 0; // the child's pid, or -pgid with -g
  #finished = false;
  #startedAtMs: number | null = null;
  #drainingUntilMs: number | null = null;
  /** The grace period (or a deadline without one) ended in SIGKILL to everything. */
  #forcedKill = false;
  #killTimer: machine.KillTimer = "kill-after";
  readonly #reapedLog: zombies.ReapedLog | null;
  #zombies: zombies.ZombieReport = { total: 0, parents: [], seen: new Set() };
  #zombieWarnedAtMs = -Infinity;
  #zombiesCheckedAtMs: number | null = null;
  /** Signals sent to the child, each with the one received for it (for the exit cause). */
  readonly #sentToChild = new Map<number, number>();
  readonly #memory: MemoryWatch;
  #exit: (Explanation & { signal: string | null }) | null = null;
  #exitedAtMs: number | null = null;
  #reaped = 0;
  #jobs: JobHost | null = null;
  /** Orphans come to denit: it is PID 1 or a subreaper (its own, or made one by its parent). */
  #adopts = false;
  #spawner: Spawner | null = null;

  constructor(config: Config, log: Logger, signals: SignalReader, options: SupervisorOptions) {
    this.#config = config;
    this.#log = log;
    this.#signals = signals;
    this.#options = options;
    this.#reapedLog = config.warnReaped ? new zombies.ReapedLog(log) : null;
    this.#memory = new MemoryWatch(log);
  }

  get memoryCgroup(): MemoryCgroup | null {
    return this.#memory.cgroup;
  }

  snapshot(): Snapshot {
    const state = this.#state;
    const exited = state.name === "exited" ? state : null;
    return Object.freeze({
      state: state.name,
      pid: state.name === "starting" ? null : state.pid,
      startedAtMs: this.#startedAtMs,
      exitedAtMs: this.#exitedAtMs,
      exitCode: exited?.exitCode ?? null,
      exitSignal: exited?.status?.kind === "signaled" ? signalName(exited.status.signo) : null,
      zombiesReaped: this.#reaped,
      signalsForwarded: Object.freeze(Object.fromEntries(this.#forwarded)),
      unreapedZombies: this.#zombies.total,
      zombieParents: this.#zombies.parents,
      zombiesCheckedAtMs: this.#zombiesCheckedAtMs,
      exitCause: this.#exit?.cause ?? null,
      exitReason: this.#exit?.text ?? null,
      cleanup: exited?.phase ?? null,
      stopCause: state.name === "stopping" ? state.cause : null,
      drainingUntilMs: state.name === "stopping" && state.draining !== null
        ? this.#drainingUntilMs
        : null,
      deadlineAtMs: this.#startedAtMs === null || this.#config.timeoutMs === null
        ? null
        : this.#startedAtMs + this.#config.timeoutMs,
      memory: this.#memory.facts(),
      jobs: this.#jobs?.counts() ?? null,
    });
  }

  /** Takes the signals so far (a stop: nothing starts), then starts the child (ExecError). */
  async start(
    argv: readonly Uint8Array[],
    { runAs, variables }: { runAs: RunAs | null; variables: Readonly<Record<string, string>> },
  ): Promise<void> {
    const name = this.#config.command[0] ?? "";
    const command: Executable = { path: resolveCommand(name, Deno.env.get("PATH")), argv };
    const environment = proc.environmentWith(variables);
    const fileSoftLimit = this.#childFileLimit();
    this.#prepareProcess();
    // Before the child runs: an OOM kill in its first moments must still show as a rise.
    this.#memory.refresh(null);
    for (const signo of this.#signals.take()) {
      if (signo !== SIGCHLD) this.#dispatch({ type: "signal-received", signo });
    }
    if (this.#finished) return;
    const spawner = runAs === null ? null : new (await import("./spawner.ts")).Spawner();
    const run = (request: proc.SpawnRequest) =>
      spawner === null || runAs === null
        ? Promise.resolve(proc.spawn(request))
        : spawner.spawn(runAs, request);
    try {
      const limits = { environment, fileSoftLimit };
      let result = await this.#spawn({ ...command, ...limits }, run);
      if (result.kind === "failed" && result.errno === proc.Errno.ENOEXEC) {
        // execvp(3) runs an executable text file without #! through /bin/sh; so does denit.
        const fallback = shellFallback(command);
        if (fallback !== null) result = await this.#spawn({ ...fallback, ...limits }, run);
      }
      if (result.kind === "failed") throw execFailure(name, command.path, result.errno);
      // The child's "parent" for prctl(PR_SET_PDEATHSIG) is the thread that spawned it: that
      // thread lives as long as the child does, or a child that arms the signal would get it.
      this.#spawner = spawner;
      this.#started(result.pid, runAs);
    } finally {
      if (this.#spawner === null) spawner?.close();
    }
  }

  #started(pid: number, runAs: RunAs | null): void {
    this.#startedAtMs = Date.now();
    this.#memory.childStarted(pid, this.#config.oomScoreAdj);
    const target = this.#config.group ? -pid : pid;
    this.#target = target;
    const user = runAs === null ? {} : { user: `${runAs.uid}:${runAs.gid}` };
    this.#log.info("child started", { pid, group: this.#config.group, ...user });
    this.#dispatch({ type: "child-started", pid, target });
    void this.#eventLoop(pid);
    if (this.#config.orphanGraceMs !== null) void this.#patrol(this.#config.orphanGraceMs);
    void this.#zombieLoop();
  }

  /** The job service, reaped by this supervisor's reaper. */
  attachJobs(host: JobHost): void {
    this.#jobs = host;
  }

  /** Work an event started once the child runs: a throw is one error line, denit goes on. */
  #guard(point: FaultPoint, work: () => void): void {
    try {
      this.#options.trap?.(point);
      work();
    } catch (err: unknown) {
      this.#log.error(`${point} failed; denit goes on`, { error: errorLine(err, true) });
    }
  }

  /** Resolves with denit's exit code once the child and its leftovers are gone. */
  finished(): Promise<number> {
    return this.#done.promise;
  }

  #prepareProcess(): void {
    const { pdeathsig, subreaper, jobsSocket } = this.#config;
    if (pdeathsig !== null) {
      const result = proc.setParentDeathSignal(pdeathsig);
      if (!result.ok) this.#log.warn("cannot set parent-death signal", { errno: result.errno });
    }
    // A parent may have made denit a subreaper already. The jobs' keepers must come to denit.
    this.#adopts = Deno.pid === 1 || proc.isSubreaper();
    if (!this.#adopts && !subreaper && jobsSocket === null) {
      this.#log.warn("not PID 1 and not a subreaper: orphans will not be reaped; use -s");
    } else if (!this.#adopts) {
      const result = proc.becomeSubreaper();
      if (result.ok) this.#adopts = true;
      else this.#log.warn("cannot become a subreaper", { errno: result.errno });
    }
  }

  /** The child's open-file soft limit: by default the container's (the launcher's record). */
  #childFileLimit(): number | null {
    const setting = this.#config.fileLimit;
    const { hard } = proc.fileLimit();
    if (setting.kind === "max") return hard;
    const soft = setting.kind === "value" ? setting.value : this.#options.containerFileLimit;
    if (hard === null || soft <= hard) return soft;
    // A soft limit cannot pass the hard one (`ulimit -Sn` refuses): the child gets the hard one.
    const above = `--nofile ${soft} is above the hard limit of ${hard}: the child gets ${hard}`;
    if (setting.kind === "value") this.#log.warn(above);
    return hard;
  }

  /** Spawns with the terminal handed over when denit has one (warned about if it cannot be). */
  async #spawn(
    { environment, ...command }: Executable & {
      environment: readonly Uint8Array[] | undefined;
      fileSoftLimit: number | null;
    },
    run: (request: proc.SpawnRequest) => Promise<proc.SpawnResult>,
  ): Promise<proc.SpawnResult> {
    const request = { ...command, ...(environment === undefined ? {} : { environment }) };
    // spawn() itself falls back to no hand-over where glibc lacks it (before 2.35).
    if (!proc.isControllingTerminal()) return await run(request);
    const result = await run({ ...request, foregroundFd: 0 });
    if (result.kind === "spawned" || result.stage !== "foreground") return result;
    this.#log.warn("cannot give the terminal to the child", { errno: result.errno });
    return await run(request);
  }

  /** Every ZOMBIE_SCAN_MS: zombies denit cannot reap, then idle code pages under a limit. */
  async #zombieLoop(): Promise<void> {
    while (!this.#finished) {
      await quietDelay(zombies.ZOMBIE_SCAN_MS);
      try {
        this.#options.trap?.("zombie-scan");
        const report = await zombies.scanZombies(Deno.pid, () => quietDelay(1), this.#zombies.seen);
        if (this.#finished) return;
        this.#zombies = report;
        this.#zombiesCheckedAtMs = Date.now();
        if (this.#livePid() !== null) this.#memory.refresh(this.#livePid());
        const now = performance.now();
        if (report.total > 0 && now - this.#zombieWarnedAtMs >= zombies.ZOMBIE_WARN_EVERY_MS) {
          this.#zombieWarnedAtMs = now; // a warn line at most once a minute
          this.#log.warn(zombies.zombieWarning(report));
        }
      } catch (err: unknown) {
        this.#log.error("zombie-scan failed; denit goes on", { error: errorLine(err, true) });
      }
      await this.#memory.dropCodePages();
    }
  }

  /** The job service was OOM-killed: the runtime's idle code pages go now. */
  relieveMemory(): void {
    void this.#memory.dropCodePages(true);
  }

  /** Waits for a signal, forwards and reaps; a round cut at its limit goes on after a turn. */
  async #eventLoop(childPid: number): Promise<void> {
    const others: Reaped[] | null = this.#reapedLog === null && this.#jobs === null ? null : [];
    // A child that ended before the loop began left its SIGCHLD behind: a round at once anyway.
    let reap = true;
    while (!this.#finished) {
      try {
        await this.#signals.wait(reap ? 0 : -1);
        for (const signo of this.#signals.take()) {
          if (signo === SIGCHLD) reap = true;
          else this.#guard("signal", () => this.#dispatch({ type: "signal-received", signo }));
        }
        if (!reap || this.#finished) continue;
        reap = false;
        this.#options.trap?.("reap");
        if (others !== null) others.length = 0;
        const round = reapRound(childPid, REAP_BATCH, others);
        reap = round.more;
        for (const { pid, status } of others ?? []) {
          // A job is not an orphan: -w reports only what nobody else waited for.
          if (this.#jobs?.reaped(pid, status) !== true) this.#reapedLog?.reaped(pid, status);
        }
        this.#afterRound(round);
      } catch (err: unknown) {
        // A PID 1 never bails: say so, wait a moment, and reap again.
        this.#log.error("reap failed; denit goes on", { error: errorLine(err, true) });
        reap = true;
        await new Promise((resolve) => setTimeout(resolve, REAP_RETRY_MS));
      }
    }
  }

  #afterRound(round: ReapRound): void {
    this.#reaped += round.reaped;
    if (round.reaped > 0 && this.#log.enabled("debug")) {
      this.#log.debug("reaped", { count: round.reaped, child: round.child !== null });
    }
    if (round.errno !== 0) this.#log.warn("waitpid failed", { errno: round.errno });
    if (round.othersKilled > 0) {
      void this.#memory.otherKilled(round.othersKilled, () => this.#livePid());
    }
    if (round.child !== null) {
      this.#termGroup();
      this.#spawner?.close();
      this.#spawner = null;
      this.#exitedAtMs = Date.now();
      this.#explain(round.child);
      this.#dispatch({ type: "child-exited", status: round.child, othersLeft: !round.noChildren });
    } else if (round.reaped > 0) {
      this.#dispatch({ type: "others-reaped" });
    }
    if (round.noChildren) {
      const lost = this.#state.name !== "exited";
      this.#dispatch(lost ? { type: "child-lost" } : { type: "children-gone" });
    } else {
      this.#waitOver();
    }
  }

  /** `--wait-descendants`: the wait is over when only the job service (denit's own) is left. */
  #waitOver(): void {
    const state = this.#state;
    const service = this.#jobs?.servicePid ?? 0;
    if (state.name !== "exited" || state.phase !== "waiting" || service === 0) return;
    if (childrenOf("self").every((pid) => pid === service)) {
      this.#dispatch({ type: "descendants-gone" });
    }
  }

  /** Says why the child ended: one warn line for a signal, a debug line for an exit. */
  #explain(status: proc.ExitStatus): void {
    const state = this.#state;
    const stopping = state.name === "stopping";
    const forced = stopping && state.forced ? "grace" : null;
    const stoppedBy = stopping && state.cause === "timeout" ? "timeout" : forced;
    const { graceMs, timeoutMs } = this.#config;
    const explanation = explainExit({
      status,
      stoppedBy,
      forwarded: this.#sentToChild,
      ...this.#memory.judge(status),
      graceMs,
      timeoutMs,
    });
    const signal = status.kind === "signaled" ? signalName(status.signo) : null;
    this.#exit = { ...explanation, signal };
    // An exit is a debug line; a stop denit passed on (docker stop) is ordinary: info.
    const fields = { cause: explanation.cause };
    if (status.kind === "exited") this.#log.debug(explanation.text, fields);
    else if (explanation.cause === "forwarded") this.#log.info(explanation.text, fields);
    else this.#log.warn(explanation.text, fields);
  }

  /** `-g` where orphans do not come to denit: SIGTERM to the child's group, as dumb-init. */
  #termGroup(): void {
    if (!this.#config.group || this.#adopts || this.#groupSignals.has(SIGTERM)) return;
    if (!proc.sendSignal(this.#target, SIGTERM).ok) return;
    this.#log.info("SIGTERM to what the child left in its process group", { group: -this.#target });
  }

  #livePid(): number | null {
    const state = this.#state;
    return state.name === "running" || state.name === "stopping" ? state.pid : null;
  }

  exitReport():
    | { cause: string; text: string; signal: string | null; ranMs: number | null }
    | null {
    if (this.#exit === null) return null;
    const ranMs = this.#startedAtMs === null || this.#exitedAtMs === null
      ? null
      : this.#exitedAtMs - this.#startedAtMs;
    return { cause: this.#exit.cause, text: this.#exit.text, signal: this.#exit.signal, ranMs };
  }

  #dispatch(event: machine.Event): void {
    if (this.#finished) return;
    const step = machine.transition(this.#state, event, this.#config);
    this.#state = step.state;
    // Stopping: the job service takes no new jobs (they would be stopped at once).
    if (step.state.name === "stopping" || step.state.name === "exited") this.#jobs?.stopping();
    for (const effect of step.effects) {
      try {
        this.#perform(effect);
      } catch (err: unknown) {
        // Never out of the loop once the child runs: the next event tries again.
        this.#log.error(`cannot ${effect.type}`, { error: errorLine(err, true) });
      }
    }
  }

  #perform(effect: machine.Effect): void {
    switch (effect.type) {
      case "forward-signal":
        return this.#forward(effect.signo, effect.target, effect.received);
      case "drop-signal": {
        const { signo, reason } = effect;
        return this.#log.debug("signal dropped", { signal: signalName(signo), reason });
      }
      case "start-timer":
        return this.#startTimer(effect.timer, effect.ms);
      case "cancel-timer":
        return void this.#timers.delete(effect.timer);
      case "hold-signal":
        return this.#hold(effect.signo, effect.ms);
      case "time-out":
        return this.#timeOut(effect.target, effect.term);
      case "force-kill":
        return this.#forceKill(effect.target);
      case "signal-descendants":
        return this.#signalDescendants(effect.signo);
      case "signal-leftovers":
        this.#killTimer = effect.timer ?? this.#killTimer;
        return this.#killLeftovers(effect.signo, true);
      case "finish":
        return this.#finish(effect.exitCode, effect.outcome);
    }
  }

  #hold(signo: number, ms: number): void {
    this.#drainingUntilMs = Date.now() + ms;
    const drain = this.#config.drainWhile;
    const held = drain === null
      ? `for the shutdown delay of ${formatDuration(ms)}`
      : `while ${formatCheck(drain)} holds, at most ${formatDuration(ms)}`;
    const then = "not ready meanwhile; a second stop signal goes through at once";
    this.#log.info(`${signalName(signo)} held ${held}: ${then}`);
    if (drain !== null) void this.#drain(drain);
  }

  /** `--drain-while`: ends a held stop at the first check that fails (the delay bounds it). */
  async #drain(check: DrainCheck): Promise<void> {
    const { probe } = await import("../common/probe.ts");
    const test = async (): Promise<[boolean, string]> => {
      if (check.kind !== "jobs") return await probe(check);
      const running = this.#jobs?.counts().running ?? 0;
      return [running > 0, `${running} jobs running`];
    };
    const held = () => this.#state.name === "stopping" && this.#state.draining !== null;
    while (held()) {
      const [holds, found] = await test();
      if (!held()) return;
      if (!holds) {
        this.#log.info(`${formatCheck(check)} no longer holds (${found}): the stop goes on`);
        return this.#guard("timer", () => this.#dispatch({ type: "drain-ended" }));
      }
      await quietDelay(DRAIN_INTERVAL_MS);
    }
  }

  /** `--kill-orphans`: until the main child ended. */
  async #patrol(graceMs: number): Promise<void> {
    const { OrphanPatrol } = await import("./orphans.ts");
    const own = () => this.#jobs?.own() ?? new Set<number>();
    await new OrphanPatrol({ graceMs, log: this.#log, mainChild: () => this.#livePid(), own })
      .run();
  }

  #forward(signo: number, target: number, received: number): void {
    const signal = signalName(signo);
    const result = proc.sendSignal(target, signo);
    if (result.ok) {
      this.#count(signal);
      this.#sentToChild.set(signo, received);
      if (target < 0) this.#groupSignals.add(signo);
      // Per-signal path: build the log line only when it is shown.
      if (!this.#log.enabled("info")) return;
      this.#log.info("signal sent", { signal, from: signalName(received), target });
    } else if (result.errno === proc.Errno.ESRCH) {
      this.#log.debug("cannot forward: child already gone", { signal, target });
    } else {
      this.#log.warn(`cannot forward ${signal}: ${proc.errnoMessage(result.errno)}`, { target });
    }
  }

  /** A quiet delay, not a timer (common/delay.ts): the reaper's wait keeps denit alive. */
  #startTimer(name: machine.TimerName, ms: number): void {
    const token = {};
    this.#timers.set(name, token);
    void quietDelay(ms).then(() => {
      if (this.#timers.get(name) !== token) return; // cancelled, or started again since
      this.#timers.delete(name);
      this.#guard("timer", () => {
        if (!this.#childAlreadyEnded(name)) this.#dispatch({ type: `${name}-expired` });
      });
    });
  }

  /** A deadline or grace timer after the child ended, before its reap: its status decides. */
  #childAlreadyEnded(name: machine.TimerName): boolean {
    const state = this.#state;
    if (name !== "deadline" && name !== "grace") return false;
    if (state.name !== "running" && state.name !== "stopping") return false;
    if (!proc.hasTerminated(state.pid)) return false;
    this.#log.debug(`the ${name} timer ran out after the child ended; its status decides`);
    return true;
  }

  #timeOut(target: number, term: boolean): void {
    const limit = formatDuration(this.#config.timeoutMs ?? 0);
    const grace = formatDuration(machine.deadlineGraceMs(this.#config));
    const then = term
      ? `SIGTERM, SIGKILL after ${grace}`
      : this.#config.graceMs === null
      ? `already stopping, SIGKILL after ${grace}`
      : `already stopping, SIGKILL when --grace ends`;
    this.#log.warn(`deadline of ${limit} passed (--timeout): ${then}; exit code 124`, { target });
    if (term) this.#forward(SIGTERM, target, SIGTERM);
  }

  /** `--wait-descendants`: every remaining descendant gets the signal, however often it comes. */
  #signalDescendants(signo: number): void {
    // The job service is never sent the main child's signals: kill(-1) would reach it too.
    // (The jobs' keepers block every signal they do not read.)
    const service = this.#jobs?.servicePid ?? 0;
    if (Deno.pid === 1 && service === 0) {
      if (proc.sendSignal(-1, signo).ok) this.#count(signalName(signo));
      return;
    }
    let hit = 0;
    for (const pid of leftovers()) if (pid !== service && proc.sendSignal(pid, signo).ok) hit++;
    if (hit > 0) this.#count(signalName(signo));
    this.#log.info("signal sent to descendants", { signal: signalName(signo), count: hit });
  }

  /** One more `signal` (by name) sent, for /status and /metrics. */
  #count(signal: string): void {
    this.#forwarded.set(signal, (this.#forwarded.get(signal) ?? 0) + 1);
  }

  #forceKill(target: number): void {
    // Named before they are killed: afterwards only zombies (or nothing) are left to read.
    const child = this.#state.name === "starting" ? null : this.#state.pid;
    const victims = leftovers().map(describeProcess);
    const first = victims.filter((p) => p.pid === child);
    const named = [...first, ...victims.filter((p) => p.pid !== child)];
    const { graceMs, timeoutMs } = this.#config;
    const timedOut = this.#state.name === "stopping" && this.#state.cause === "timeout";
    const after = formatDuration(machine.deadlineGraceMs(this.#config));
    const why = graceMs === null
      ? `still running ${after} after the deadline of ${formatDuration(timeoutMs ?? 0)} (--timeout)`
      : `grace period of ${formatDuration(graceMs)} expired`;
    const code = timedOut ? "; exit code 124" : "";
    this.#log.warn(`${why}: SIGKILL to ${formatProcesses(named)}${code}`);
    this.#forcedKill = true;
    this.#memory.refresh(this.#livePid()); // the child's SIGKILL is denit's own from here
    this.#forward(SIGKILL, target, SIGKILL);
    // The processes named above, by pid: once the child is dead, its children are briefly
    // nobody's (not yet reparented to denit) and a fresh walk of the tree would miss them.
    this.#killLeftovers(SIGKILL, false, named.map((p) => p.pid));
  }

  #killLeftovers(signo: number, announce: boolean, known: readonly number[] = []): void {
    const signal = signalName(signo);
    const sent = this.#signalled.get(signo) ?? new Set<number>();
    this.#signalled.set(signo, sent);
    if (Deno.pid === 1 && signo === SIGKILL) {
      // kill(2): pid -1 reaches every process denit may signal, except itself, with no race
      // against fork; repeated for what was forked or reparented since.
      const named = announce && !sent.has(-1) ? otherProcesses().map(describeProcess) : [];
      sent.add(-1);
      if (!proc.sendSignal(-1, signo).ok) return;
      if (named.length > 0) this.#warnKill(named);
      return;
    }
    // Each process once: a group that got this signal forwarded already had it (-g), and a
    // process found again in a later sweep is not signalled twice.
    const groupDone = this.#groupSignals.has(signo) ? -this.#target : 0;
    const found = new Set([...known, ...leftovers()]);
    const fresh = [...found].filter((pid) => !sent.has(pid));
    for (const pid of fresh) sent.add(pid);
    const infos = fresh.map(describeProcess).filter((p) =>
      p.state !== "Z" && p.state !== "?" && p.pgid !== groupDone
    );
    const hit = infos.filter((p) => proc.sendSignal(p.pid, signo).ok);
    if (hit.length === 0) return;
    if (announce && signo === SIGKILL) this.#warnKill(hit);
    else this.#log.info("signalled leftovers", { signal, pids: hit.map((p) => p.pid).join(",") });
  }

  #warnKill(processes: ReturnType<typeof describeProcess>[]): void {
    const after = this.#killTimer === "grace"
      ? `at the end of the grace period (${formatDuration(this.#config.graceMs ?? 0)})`
      : this.#config.killAfterMs === 0
      ? "at once (--kill-after 0)"
      : `after ${formatDuration(this.#config.killAfterMs)}`;
    // After the grace period's SIGKILL: reparented to denit since (their parent just died).
    const which = this.#forcedKill ? "found after the forced stop" : `still running ${after}`;
    this.#log.warn(`SIGKILL to leftovers ${which}: ${formatProcesses(processes)}`);
  }

  #finish(exitCode: number, outcome: machine.Outcome): void {
    if (outcome === "abandoned") {
      const left = leftovers().map(describeProcess);
      const names = left.length === 0 ? "" : `: ${formatProcesses(left)}`;
      this.#log.warn(`leftover processes survived SIGKILL; exiting anyway${names}`);
    } else if (outcome === "not-started") {
      const why = "a stop signal came before the child started";
      this.#log.warn(`${why}: it was not started; exit ${exitCode}`);
    } else if (outcome === "lost") {
      this.#log.error(
        "the child's exit status was lost: no children are left to wait for " +
          "(something else reaped the child); exiting 125",
      );
    }
    this.#finished = true;
    this.#memory.close();
    this.#spawner?.close();
    this.#reapedLog?.close();
    this.#timers.clear();
    // The signals stay blocked: one arriving now waits, unread, until denit exits.
    this.#log.info("exiting", { code: exitCode });
    this.#done.resolve(exitCode);
  }
}
