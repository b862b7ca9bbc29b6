/**
 * The supervisor's driver: the one holder of mutable state. It feeds events (signals, reaped
 * children, timers) to `transition()` (machine.ts) and performs the effects it returns. Before
 * the child runs it fails fast with an ExecError; once the child runs, nothing is thrown out
 * of the loop: failures are logged, and reaping and forwarding go on.
 */

import { errorLine } from "../common/errors.ts";
import { quietDelay } from "../common/delay.ts";
import { type DrainCheck, formatDrainCheck } from "../common/ready.ts";
import { formatDuration } from "../common/duration.ts";
import type { Logger } from "../common/log.ts";
import { SIGCHLD, SIGKILL, signalName, SIGTERM } from "../common/signals.ts";
import type { MemoryFacts, Snapshot } from "../common/snapshot.ts";
import {
  becomeSubreaper,
  Errno,
  errnoMessage,
  type ExitStatus,
  fileLimit,
  hasTerminated,
  isControllingTerminal,
  isSubreaper,
  sendSignal,
  setParentDeathSignal,
  spawn,
  type SpawnRequest,
  type SpawnResult,
} from "../sys/process.ts";
import type { Config, FileLimitSetting } from "./cli.ts";
import { execFailure, type Executable, resolveCommand, shellFallback } from "./command.ts";
import {
  describeProcess,
  DescriptorsExhausted,
  formatProcesses,
  isEnding,
  leftovers,
  otherProcesses,
} from "./leftovers.ts";
import {
  deadlineGraceMs,
  type Effect,
  type Event,
  INITIAL_STATE,
  type KillTimer,
  type Outcome,
  type Policy,
  type State,
  type TimerName,
  transition,
} from "./machine.ts";
import { REAP_BATCH, type Reaped, type ReapRound, reapRound } from "./reaper.ts";
import type { SignalReader } from "../sys/signals.ts";
import {
  ReapedLog,
  scanZombies,
  ZOMBIE_SCAN_MS,
  ZOMBIE_WARN_EVERY_MS,
  type ZombieReport,
  zombieWarning,
} from "./zombies.ts";
import { explainExit, type Explanation } from "./cause.ts";
import {
  findMemoryCgroup,
  type MemoryCgroup,
  readMemoryLimit,
  readOomGroup,
  readOomKills,
} from "./cgroup.ts";
import type { Spawner } from "./spawner.ts";
import type { RunAs } from "./user.ts";
import type { JobHost } from "./jobs.ts";

/** Sweeps of leftovers triggered by reaping are at least this far apart (each reads /proc). */
const SWEEP_INTERVAL_MS = 20;
/** After an unexpected failure of a reap round, the next one waits this long (no busy loop). */
const REAP_RETRY_MS = 100;

/**
 * The child's soft open-file limit for a setting: by default the one the container set, which
 * the launcher recorded before the runtime raised its own.
 */
export function childFileLimit(
  setting: FileLimitSetting,
  current: { soft: number | null; hard: number | null },
  containerSoft: number,
): number | null {
  const hard = current.hard ?? Infinity;
  switch (setting.kind) {
    case "max":
      return current.hard;
    case "value":
      return Math.min(setting.value, hard);
    case "default":
      return Math.min(containerSoft, hard);
  }
}

/**
 * Descriptors held back for reading /proc when all the others are taken. Several: another
 * thread (the health endpoint's accept loop) can take a freed one before the sweep does.
 */
const RESERVED_DESCRIPTORS = 4;

/** `count` descriptors of /dev/null to hold back; fewer (or none) if they cannot be had. */
function openReserve(count = RESERVED_DESCRIPTORS): Deno.FsFile[] {
  const files: Deno.FsFile[] = [];
  try {
    while (files.length < count) files.push(Deno.openSync("/dev/null"));
  } catch {
    // No /dev/null or no descriptor: fewer (or none) to spare later.
  }
  return files;
}

/** How often `--drain-while` checks whether a held stop may go on. */
const DRAIN_INTERVAL_MS = 250;

/** The event each timer sends when it runs out. */
const TIMER_EVENTS = {
  grace: "grace-expired",
  kill: "kill-timer-expired",
  delay: "delay-expired",
  deadline: "deadline-expired",
} as const satisfies Record<TimerName, Event["type"]>;

/**
 * The places where work runs after the child started: a throw in any of them is logged and
 * denit goes on (only the child's end ends denit).
 */
export type FaultPoint = "signal" | "timer" | "reap" | "zombie-scan";

/** What the supervisor is handed besides its configuration. */
export interface SupervisorOptions {
  /**
   * Called as each FaultPoint's work starts; a test's fixture throws from it to prove that
   * nothing after the spawn can end denit. denit itself passes none.
   */
  readonly trap?: (point: FaultPoint) => void;
  /** The open-file soft limit the container set (the launcher's record): the child's default. */
  readonly containerFileLimit: number;
}

/** Runs one child under supervision. */
export class Supervisor {
  readonly #config: Config;
  readonly #policy: Policy;
  readonly #log: Logger;
  /** Every signal denit gets, SIGCHLD included: read, never caught (sys/signals.ts). */
  readonly #signals: SignalReader;
  readonly #trap: ((point: FaultPoint) => void) | null;
  readonly #containerFileLimit: number;
  readonly #done = Promise.withResolvers<number>();
  /** The running timers, each by its cancel. */
  readonly #timers = new Map<TimerName, () => void>();
  readonly #forwarded = new Map<string, number>();
  /** Leftovers already sent each signal: every process gets a signal once. */
  readonly #signalled = new Map<number, Set<number>>();
  /** Signals forwarded to the child's whole group (-g): its members need no second one. */
  readonly #groupSignals = new Set<number>();
  #state: State = INITIAL_STATE;
  /** Where forwarded signals go: the child's pid, or its group as -pgid with -g. */
  #target = 0;
  #finished = false;
  #startedAtMs: number | null = null;
  #drainingUntilMs: number | null = null;
  /** The grace period (or a deadline without one) ended in SIGKILL to everything. */
  #forcedKill = false;
  /** The timer whose end sends leftovers SIGKILL, for its warn line. */
  #killTimer: KillTimer = "kill-after";
  /** `-w`: reaped orphans, reported; null without it (nothing collected). */
  readonly #reapedLog: ReapedLog | null;
  #zombies: ZombieReport = { total: 0, parents: [] };
  #zombieWarnedAtMs = -Infinity;
  #zombiesCheckedAtMs: number | null = null;
  /** Signals sent to the child, each with the one received for it (for the exit cause). */
  readonly #sentToChild = new Map<number, number>();
  #memory: MemoryCgroup | null = null;
  /**
   * The memory cgroup's OOM-kill count before the child's end could be the OOM killer's: read
   * at the child's start, again whenever another process was seen to die of SIGKILL (reaped
   * by denit), at every zombie scan, and right before denit's own SIGKILL. The child's SIGKILL
   * is the OOM killer's only if the count rose since: an earlier OOM kill of another process
   * in the cgroup is not blamed on a later kill -9.
   */
  #oomKillsBefore: number | null = null;
  /** The memory cgroup's limit (bytes); null: none, or no memory cgroup found. */
  #memoryFacts: MemoryFacts | null = null;
  #exit: (Explanation & { signal: string | null; memoryLimit: number | null }) | null = null;
  #exitedAtMs: number | null = null;
  #reaped = 0;
  /** The job service's side on this thread (--jobs-socket); null without it. */
  #jobs: JobHost | null = null;
  #lastSweepMs = -Infinity;
  /** Descriptors held back for reading /proc when all the others are taken (see #spare). */
  #reserve: Deno.FsFile[] = [];
  /** Orphans come to denit: it is PID 1 or a subreaper (its own, or made one by its parent). */
  #adopts = false;
  /** sys/memory.ts, once the first drop of code pages loaded it. */
  #pages: Promise<typeof import("../sys/memory.ts")> | null = null;
  /** `--user`: the thread that spawned the child, kept until the child ended. */
  #spawner: Spawner | null = null;
  #sweepTimer: ReturnType<typeof setTimeout> | null = null;

  constructor(
    config: Config,
    log: Logger,
    signals: SignalReader,
    options: SupervisorOptions,
  ) {
    this.#config = config;
    this.#log = log;
    this.#signals = signals;
    this.#trap = options.trap ?? null;
    this.#containerFileLimit = options.containerFileLimit;
    this.#reapedLog = config.warnReaped ? new ReapedLog(log) : null;
    this.#policy = {
      rewrite: config.rewrite,
      graceMs: config.graceMs,
      killAfterMs: config.killAfterMs,
      remapExit: config.remapExit,
      shutdownDelayMs: config.shutdownDelayMs,
      timeoutMs: config.timeoutMs,
      waitDescendants: config.waitDescendants,
      stopSignal: config.stopSignal,
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
      memory: this.#memoryFacts === null
        ? null
        : { ...this.#memoryFacts, limitBytes: this.#memoryLimit() },
      jobs: this.#jobs?.counts() ?? null,
    });
  }

  /**
   * Prepares this process (parent-death signal, subreaper), takes the signals that came so far
   * (a stop among them: the child is not started, and finished() says 128+N), then starts the
   * child. Throws ExecError (126/127) if it cannot run; nothing is started then.
   */
  async start(argv: readonly Uint8Array[], runAs: RunAs | null = null): Promise<void> {
    const name = this.#config.command[0] ?? "";
    const command: Executable = { path: resolveCommand(name, Deno.env.get("PATH")), argv };
    this.#prepareProcess();
    // Before the child runs: an OOM kill in its first moments must still show as a rise.
    this.#memory = findMemoryCgroup();
    this.#refreshOomCount();
    for (const signo of this.#signals.take()) {
      if (signo !== SIGCHLD) this.#dispatch({ type: "signal-received", signo });
    }
    if (this.#finished) return;
    const spawner = runAs === null ? null : new (await import("./spawner.ts")).Spawner();
    try {
      let result = await this.#spawn(command, spawner, runAs);
      if (result.kind === "failed" && result.errno === Errno.ENOEXEC) {
        // execvp(3) runs an executable text file without #! through /bin/sh; so does denit.
        const fallback = shellFallback(command);
        if (fallback !== null) result = await this.#spawn(fallback, spawner, runAs);
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

  /**
   * With v2's memory.oom.group set (the kubelet's default) the kernel kills every process of
   * the container together: denit dies with the child and cannot say cause=oom. Said once.
   */
  #noteOomGroup(): void {
    const oomGroup = this.#memory === null ? null : readOomGroup(this.#memory);
    if (this.#memory !== null) {
      this.#memoryFacts = Object.freeze({
        cgroup: this.#memory.version,
        limitBytes: this.#memoryLimit(),
        oomGroup,
      });
    }
    if (oomGroup !== true) return;
    this.#log.warn(
      "memory.oom.group is 1: an OOM kill ends every process of this container, denit too, so cause=oom cannot be reported",
      { cgroup: this.#memory?.dir },
    );
  }

  #started(pid: number, runAs: RunAs | null): void {
    this.#startedAtMs = Date.now();
    this.#adjustOomScore(pid);
    this.#settle();
    const target = this.#config.group ? -pid : pid;
    this.#target = target;
    this.#log.info("child started", {
      pid,
      group: this.#config.group,
      ...(runAs === null ? {} : { user: `${runAs.uid}:${runAs.gid}` }),
    });
    this.#dispatch({ type: "child-started", pid, target });
    void this.#eventLoop(pid);
    if (this.#config.orphanGraceMs !== null) void this.#patrol(this.#config.orphanGraceMs);
    // At once: a child that grows fast reaches the limit within a fraction of a second.
    void this.#dropCodePages();
    void this.#zombieLoop();
  }

  /** Supervises the job service: its process is reaped by this supervisor's reaper. */
  attachJobs(host: JobHost): void {
    this.#jobs = host;
  }

  /**
   * Runs work that an event started once the child runs (a signal, a timer): a throw
   * is one error line, and denit goes on reaping and forwarding (catatonit's "no longer allowed
   * to bail()"). The loops catch per round; anything else is caught by superviseMain's
   * process-wide listeners.
   */
  #guard(point: FaultPoint, work: () => void): void {
    try {
      this.#trap?.(point);
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
    const { pdeathsig, subreaper } = this.#config;
    if (pdeathsig !== null) {
      const result = setParentDeathSignal(pdeathsig);
      if (!result.ok) this.#log.warn("cannot set parent-death signal", { errno: result.errno });
    }
    // A parent may have made denit a subreaper before exec (prctl is kept across it): then it
    // adopts orphans already, as tini finds with PR_GET_CHILD_SUBREAPER.
    this.#adopts = Deno.pid === 1 || isSubreaper();
    if (!this.#adopts && !subreaper) {
      this.#log.warn("not PID 1 and not a subreaper: orphans will not be reaped; use -s");
    } else if (!this.#adopts) {
      const result = becomeSubreaper();
      if (result.ok) this.#adopts = true;
      else this.#log.warn("cannot become a subreaper", { errno: result.errno });
    }
  }

  /**
   * What need not wait for the child, done as soon as it runs (while it starts up): the
   * descriptors held back and the memory cgroup's facts.
   */
  #settle(): void {
    this.#reserve = openReserve();
    this.#noteOomGroup();
  }

  async #spawn(
    command: Executable,
    spawner: Spawner | null,
    runAs: RunAs | null,
  ): Promise<SpawnResult> {
    const request: SpawnRequest = {
      ...command,
      fileSoftLimit: childFileLimit(this.#config.fileLimit, fileLimit(), this.#containerFileLimit),
    };
    const run = (r: SpawnRequest) =>
      spawner === null || runAs === null ? Promise.resolve(spawn(r)) : spawner.spawn(runAs, r);
    // spawn() itself falls back to no hand-over where glibc lacks it (before 2.35).
    if (!isControllingTerminal()) return await run(request);
    const result = await run({ ...request, foregroundFd: 0 });
    if (result.kind === "spawned" || result.stage !== "foreground") return result;
    this.#log.warn("cannot give the terminal to the child", { errno: result.errno });
    return await run(request);
  }

  /**
   * The background work after start-up, paced by quiet delays (not timers, see
   * common/delay.ts), ending with denit: the scan for zombies denit cannot reap, and after
   * each, under a memory limit, a drop of the runtime's idle code pages from denit's resident
   * memory (sys/memory.ts: so that the OOM killer picks what grew, not denit; the first drop
   * comes right after the spawn).
   */
  async #zombieLoop(): Promise<void> {
    while (!this.#finished) {
      await quietDelay(ZOMBIE_SCAN_MS);
      try {
        this.#trap?.("zombie-scan");
        await this.#scanZombies();
      } catch (err: unknown) {
        // The count stays as it was; the next scan tries again.
        this.#log.error("zombie-scan failed; denit goes on", { error: errorLine(err, true) });
      }
      await this.#dropCodePages();
    }
  }

  /**
   * --oom-score-adj: written as soon as the child exists (it may have run a few microseconds
   * under denit's own value). Lowering it below denit's needs CAP_SYS_RESOURCE: without it the
   * child keeps denit's value and a warn line says why.
   */
  #adjustOomScore(pid: number): void {
    const value = this.#config.oomScoreAdj;
    if (value === null) return;
    try {
      Deno.writeTextFileSync(`/proc/${pid}/oom_score_adj`, String(value));
    } catch (err: unknown) {
      this.#log.warn(`cannot set the child's oom_score_adj to ${value}; it keeps denit's`, {
        error: errorLine(err, true),
      });
    }
  }

  /** The memory cgroup's limit as it is now (an in-place resize changes it); null: none. */
  #memoryLimit(): number | null {
    return this.#memory === null ? null : readMemoryLimit(this.#memory);
  }

  /** Memory is short (the job service was OOM-killed): the runtime's idle code pages go now. */
  relieveMemory(): void {
    void this.#dropCodePages(true);
  }

  /** `urgent`: even without a memory limit. */
  async #dropCodePages(urgent = false): Promise<void> {
    // Only under a memory limit: without one there is no OOM killer's choice to steer.
    if (this.#finished || !(urgent || this.#memoryLimit() !== null)) return;
    try {
      // Loaded on first use: a run shorter than DROP_AFTER_START_MS never pays for it.
      const memory = await (this.#pages ??= import("../sys/memory.ts"));
      const drop = await memory.dropExecutablePages();
      this.#log.debug("dropped the runtime's idle code pages", { mappings: drop.mappings });
    } catch (err: unknown) {
      // Only memory stays as it was: nothing else depends on it.
      this.#log.debug("cannot drop code pages", { error: errorLine(err, true) });
    }
  }

  /** Zombies denit cannot reap: counted for /status, a warn line at most once a minute. */
  async #scanZombies(): Promise<void> {
    if (this.#finished) return;
    const report = await scanZombies(Deno.pid, () => quietDelay(1));
    if (this.#finished) return;
    this.#zombies = report;
    this.#zombiesCheckedAtMs = Date.now();
    if (this.#state.name === "running" || this.#state.name === "stopping") this.#refreshOomCount();
    const now = performance.now();
    if (report.total === 0 || now - this.#zombieWarnedAtMs < ZOMBIE_WARN_EVERY_MS) return;
    this.#zombieWarnedAtMs = now;
    this.#log.warn(zombieWarning(report));
  }

  /**
   * denit's loop once the child runs: waits for a signal (SIGCHLD included), forwards what came
   * and reaps when a child ended. A round that stopped at its limit is followed by another as
   * soon as the event loop has turned (a wait of 0), so a burst of zombies never holds up a
   * signal, a timer or a health request for long.
   */
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
        this.#trap?.("reap");
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
    if (round.child === null && round.othersKilled > 0) this.#refreshOomCount();
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
    }
  }

  /** Says why the child ended: one warn line for a signal, a debug line for an exit. */
  #explain(status: ExitStatus): void {
    const state = this.#state;
    const stoppedBy = state.name !== "stopping"
      ? null
      : state.cause === "timeout"
      ? "timeout"
      : state.forced
      ? "grace"
      : null;
    // Read only for a SIGKILL, the OOM killer's signal: an ordinary exit costs no read.
    const killed = status.kind === "signaled" && status.signo === SIGKILL;
    const oomNow = killed && this.#memory !== null ? readOomKills(this.#memory) : null;
    const oomKilled = oomNow !== null && this.#oomKillsBefore !== null &&
      oomNow > this.#oomKillsBefore;
    const memoryLimit = oomKilled && this.#memory !== null ? readMemoryLimit(this.#memory) : null;
    const explanation = explainExit({
      status,
      stoppedBy,
      forwarded: this.#sentToChild,
      oomKilled,
      memoryLimit,
      graceMs: this.#config.graceMs,
      timeoutMs: this.#config.timeoutMs,
    });
    const signal = status.kind === "signaled" ? signalName(status.signo) : null;
    this.#exit = { ...explanation, signal, memoryLimit };
    // An exit is a debug line; a stop denit passed on (docker stop) is ordinary: info.
    const fields = { cause: explanation.cause };
    if (status.kind === "exited") this.#log.debug(explanation.text, fields);
    else if (explanation.cause === "forwarded") this.#log.info(explanation.text, fields);
    else this.#log.warn(explanation.text, fields);
  }

  /**
   * Reads /proc for what to stop even when denit has no descriptor left (health clients took
   * them all, say): a read that fails for that reason is tried again as each reserved one
   * is freed in turn; they are taken back after. Without it the sweep would stop nothing.
   */
  #spare<T>(work: () => T): T {
    try {
      return work();
    } catch (err: unknown) {
      if (!(err instanceof DescriptorsExhausted) || this.#reserve.length === 0) throw err;
    }
    try {
      // One freed at a time, until the read gets one.
      for (;;) {
        const file = this.#reserve.pop();
        if (file === undefined) return work();
        file.close();
        try {
          return work();
        } catch (err: unknown) {
          if (!(err instanceof DescriptorsExhausted)) throw err;
        }
      }
    } finally {
      this.#reserve.push(...openReserve(RESERVED_DESCRIPTORS - this.#reserve.length));
    }
  }

  /**
   * `-g` where orphans do not come to denit: what the child left in its process group gets
   * SIGTERM when it ends, as dumb-init sends it (as PID 1 or a subreaper, the leftover sweep
   * reaches them, each once).
   */
  #termGroup(): void {
    if (!this.#config.group || this.#adopts || this.#groupSignals.has(SIGTERM)) return;
    if (sendSignal(this.#target, SIGTERM).ok) {
      this.#log.info("SIGTERM to what the child left in its process group", {
        group: -this.#target,
      });
    }
  }

  /**
   * Reads the OOM-kill count as it is now, while the child lives (see #oomKillsBefore). Read
   * first and kept only if the child is not on its way out after: the OOM killer sends its
   * SIGKILL before it counts, so a count that may hold the child's own kill (another process
   * reaped in the same burst of OOM kills) is never taken as the baseline.
   */
  #refreshOomCount(): void {
    if (this.#memory === null) return;
    const count = readOomKills(this.#memory);
    const state = this.#state;
    const running = state.name === "running" || state.name === "stopping";
    if (running && isEnding(state.pid)) return;
    this.#oomKillsBefore = count;
  }

  /** Why the child ended, once it did. */
  exitReport():
    | { cause: string; text: string; signal: string | null; ranMs: number | null }
    | null {
    if (this.#exit === null) return null;
    const ranMs = this.#startedAtMs === null || this.#exitedAtMs === null
      ? null
      : this.#exitedAtMs - this.#startedAtMs;
    return { cause: this.#exit.cause, text: this.#exit.text, signal: this.#exit.signal, ranMs };
  }

  #dispatch(event: Event): void {
    if (this.#finished) return;
    const step = transition(this.#state, event, this.#policy);
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
      case "hold-signal": {
        this.#drainingUntilMs = Date.now() + effect.ms;
        const drain = this.#config.drainWhile;
        const held = drain === null
          ? `for the shutdown delay of ${formatDuration(effect.ms)}`
          : `while ${formatDrainCheck(drain)} holds, at most ${formatDuration(effect.ms)}`;
        this.#log.info(
          `${
            signalName(effect.signo)
          } held ${held}: not ready meanwhile; a second stop signal goes through at once`,
        );
        if (drain !== null) void this.#drain(drain);
        return;
      }
      case "time-out":
        return this.#timeOut(effect.target, effect.term);
      case "force-kill":
        return this.#forceKill(effect.target);
      case "signal-descendants":
        return this.#signalDescendants(effect.signo);
      case "signal-leftovers":
        return this.#sweep(effect.signo, effect.timer);
      case "finish":
        return this.#finish(effect.exitCode, effect.outcome);
    }
  }

  /**
   * `--drain-while`: checks every DRAIN_INTERVAL_MS while a stop is held, and ends the hold at
   * the first check that does not hold. The checks are asynchronous (a slow one delays no signal
   * and no reap); the shutdown delay's timer bounds them.
   */
  async #drain(check: DrainCheck): Promise<void> {
    const { probe } = await import("../common/probe.ts");
    const test = () => check.kind === "jobs" ? this.#jobsRunning() : probe(check);
    const held = () => this.#state.name === "stopping" && this.#state.draining !== null;
    while (held()) {
      const [holds, found] = await test();
      if (!held()) return;
      if (!holds) {
        this.#log.info(`${formatDrainCheck(check)} no longer holds (${found}): the stop goes on`);
        return this.#guard("timer", () => this.#dispatch({ type: "drain-ended" }));
      }
      await quietDelay(DRAIN_INTERVAL_MS);
    }
  }

  /** `--kill-orphans`: until the main child ended. */
  async #patrol(graceMs: number): Promise<void> {
    const { OrphanPatrol } = await import("./orphans.ts");
    const patrol = new OrphanPatrol({
      graceMs,
      log: this.#log,
      loud: this.#config.warnReaped,
      mainChild: () => {
        const state = this.#state;
        return state.name === "running" || state.name === "stopping" ? state.pid : null;
      },
      own: () => this.#jobs === null ? [] : [this.#jobs.servicePid],
      spare: (work) => this.#spare(work),
    });
    await patrol.run();
  }

  /** `--drain-while jobs`: whether the job service has jobs running, as it last counted. */
  #jobsRunning(): [boolean, string] {
    const running = this.#jobs?.counts().running ?? 0;
    return [running > 0, `${running} jobs running`];
  }

  #forward(signo: number, target: number, received: number): void {
    const signal = signalName(signo);
    const result = sendSignal(target, signo);
    if (result.ok) {
      this.#forwarded.set(signal, (this.#forwarded.get(signal) ?? 0) + 1);
      this.#sentToChild.set(signo, received);
      if (target < 0) this.#groupSignals.add(signo);
      // Per-signal path: build the log line only when it is shown.
      if (!this.#log.enabled("info")) return;
      this.#log.info("signal sent", { signal, from: signalName(received), target });
    } else if (result.errno === Errno.ESRCH) {
      this.#log.debug("cannot forward: child already gone", { signal, target });
    } else {
      this.#log.warn(`cannot forward ${signal}: ${errnoMessage(result.errno)}`, { target });
    }
  }

  #cancelTimer(name: TimerName): void {
    // Only when one is set: the first clearTimeout() loads Deno's timer code (common/delay.ts),
    // which would sit between the child's exit and denit's.
    const cancel = this.#timers.get(name);
    if (cancel === undefined) return;
    cancel();
    this.#timers.delete(name);
  }

  #startTimer(name: TimerName, ms: number): void {
    this.#cancelTimer(name);
    const event: Event = { type: TIMER_EVENTS[name] };
    const fire = () => {
      this.#timers.delete(name);
      this.#guard("timer", () => {
        if (this.#childAlreadyEnded(name)) return;
        this.#dispatch(event);
      });
    };
    if (name === "deadline") {
      // Started with the child: a quiet delay, not a timer (the first setTimeout of a run loads
      // Deno's timer code, common/delay.ts). It keeps nothing alive, and needs not: the child runs
      // until the deadline, and the reaper's wait keeps denit alive meanwhile.
      let cancelled = false;
      this.#timers.set(name, () => cancelled = true);
      void quietDelay(ms).then(() => {
        if (!cancelled) fire();
      });
      return;
    }
    const timer = setTimeout(fire, ms);
    this.#timers.set(name, () => clearTimeout(timer));
  }

  /**
   * A deadline or grace timer that fires after the child ended but before its status was
   * reaped is dropped: the reaper brings the status at once, and the child's own end decides
   * the exit code (not 124, not a SIGKILL to a process that is gone).
   */
  #childAlreadyEnded(name: TimerName): boolean {
    const state = this.#state;
    if (name !== "deadline" && name !== "grace") return false;
    if (state.name !== "running" && state.name !== "stopping") return false;
    if (!hasTerminated(state.pid)) return false;
    this.#log.debug(`the ${name} timer ran out after the child ended; its status decides`);
    return true;
  }

  #timeOut(target: number, term: boolean): void {
    const limit = formatDuration(this.#config.timeoutMs ?? 0);
    const grace = formatDuration(deadlineGraceMs(this.#policy));
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
    const service = this.#jobs?.servicePid ?? 0;
    if (Deno.pid === 1 && service === 0) {
      if (sendSignal(-1, signo).ok) this.#count(signo);
      return;
    }
    let hit = 0;
    const targets = this.#spare(leftovers);
    for (const pid of targets) if (pid !== service && sendSignal(pid, signo).ok) hit++;
    if (hit > 0) this.#count(signo);
    this.#log.info("signal sent to descendants", { signal: signalName(signo), count: hit });
  }

  #count(signo: number): void {
    const signal = signalName(signo);
    this.#forwarded.set(signal, (this.#forwarded.get(signal) ?? 0) + 1);
  }

  #forceKill(target: number): void {
    // Named before they are killed: afterwards only zombies (or nothing) are left to read.
    const child = this.#state.name === "starting" ? null : this.#state.pid;
    const victims = this.#spare(() => leftovers().map(describeProcess));
    const first = victims.filter((p) => p.pid === child);
    const named = [...first, ...victims.filter((p) => p.pid !== child)];
    const { graceMs, timeoutMs } = this.#config;
    const timedOut = this.#state.name === "stopping" && this.#state.cause === "timeout";
    const why = graceMs === null
      ? `still running ${formatDuration(deadlineGraceMs(this.#policy))} after the deadline of ${
        formatDuration(timeoutMs ?? 0)
      } (--timeout)`
      : `grace period of ${formatDuration(graceMs)} expired`;
    const code = timedOut ? "; exit code 124" : "";
    this.#log.warn(`${why}: SIGKILL to ${formatProcesses(named)}${code}`);
    this.#forcedKill = true;
    this.#refreshOomCount(); // the child's SIGKILL is denit's own from here
    this.#forward(SIGKILL, target, SIGKILL);
    // The processes named above, by pid: once the child is dead, its children are briefly
    // nobody's (not yet reparented to denit) and a fresh walk of the tree would miss them.
    this.#killLeftovers(SIGKILL, false, named.map((p) => p.pid));
  }

  /** A sweep asked by the machine; those that follow reaping are spaced SWEEP_INTERVAL_MS. */
  #sweep(signo: number, timer?: KillTimer): void {
    if (timer !== undefined) this.#killTimer = timer;
    const now = performance.now();
    if (now - this.#lastSweepMs < SWEEP_INTERVAL_MS) {
      this.#sweepTimer ??= setTimeout(() => {
        this.#sweepTimer = null;
        this.#guard("timer", () => {
          if (this.#state.name === "exited" && !this.#finished) {
            this.#sweep(this.#state.phase === "terminating" ? SIGTERM : SIGKILL);
          }
        });
      }, SWEEP_INTERVAL_MS);
      return;
    }
    this.#lastSweepMs = now;
    this.#killLeftovers(signo, true);
  }

  #killLeftovers(signo: number, announce: boolean, known: readonly number[] = []): void {
    const signal = signalName(signo);
    const sent = this.#signalled.get(signo) ?? new Set<number>();
    this.#signalled.set(signo, sent);
    if (Deno.pid === 1 && signo === SIGKILL) {
      // kill(2): pid -1 reaches every process denit may signal, except itself, with no race
      // against fork; repeated for what was forked or reparented since.
      const named = announce && !sent.has(-1)
        ? this.#spare(() => otherProcesses().map(describeProcess))
        : [];
      sent.add(-1);
      if (!sendSignal(-1, signo).ok) return;
      if (named.length > 0) this.#warnKill(named);
      return;
    }
    // Each process once: a group that got this signal forwarded already had it (-g), and a
    // process found again in a later sweep is not signalled twice.
    const groupDone = this.#groupSignals.has(signo) ? -this.#target : 0;
    const found = new Set([
      ...known,
      ...this.#spare(leftovers),
    ]);
    const fresh = [...found].filter((pid) => !sent.has(pid));
    for (const pid of fresh) sent.add(pid);
    const infos = this.#spare(() => fresh.map(describeProcess)).filter((p) =>
      p.state !== "Z" && p.state !== "?" && p.pgid !== groupDone
    );
    const hit = infos.filter((p) => sendSignal(p.pid, signo).ok);
    if (hit.length === 0) return;
    if (announce && signo === SIGKILL) this.#warnKill(hit);
    else this.#log.info("signalled leftovers", { signal, pids: hit.map((p) => p.pid).join(",") });
  }

  #warnKill(processes: ReturnType<typeof describeProcess>[]): void {
    if (this.#forcedKill) {
      // Reparented to denit after the grace period's SIGKILL (their parent just died).
      this.#log.warn(
        `SIGKILL to leftovers found after the forced stop: ${formatProcesses(processes)}`,
      );
      return;
    }
    const after = this.#killTimer === "grace"
      ? `at the end of the grace period (${formatDuration(this.#config.graceMs ?? 0)})`
      : this.#config.killAfterMs === 0
      ? "at once (--kill-after 0)"
      : `after ${formatDuration(this.#config.killAfterMs)}`;
    this.#log.warn(`SIGKILL to leftovers still running ${after}: ${formatProcesses(processes)}`);
  }

  #finish(exitCode: number, outcome: Outcome): void {
    if (outcome === "abandoned") {
      let left: ReturnType<typeof describeProcess>[] = [];
      try {
        left = this.#spare(() => leftovers().map(describeProcess));
      } catch {
        // They cannot be named (no descriptor at all): denit exits all the same.
      }
      const names = left.length === 0 ? "" : `: ${formatProcesses(left)}`;
      this.#log.warn(`leftover processes survived SIGKILL; exiting anyway${names}`);
    } else if (outcome === "not-started") {
      this.#log.warn(
        `a stop signal came before the child started: it was not started; exit ${exitCode}`,
      );
    } else if (outcome === "lost") {
      this.#log.error(
        "the child's exit status was lost: no children are left to wait for " +
          "(something else reaped the child); exiting 125",
      );
    }
    this.#finished = true;
    this.#spawner?.close();
    this.#reapedLog?.close();
    for (const name of [...this.#timers.keys()]) this.#cancelTimer(name);
    if (this.#sweepTimer !== null) clearTimeout(this.#sweepTimer);
    // The signals stay blocked: one arriving now waits, unread, until denit exits.
    this.#log.info("exiting", { code: exitCode });
    this.#done.resolve(exitCode);
  }
}
