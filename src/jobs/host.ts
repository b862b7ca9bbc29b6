/**
 * PID 1's side of `--jobs-socket`: denit holds the listening socket for its whole run and starts
 * the service (`denit job serve`) when a connection waits, and again after it died.
 */

import { errorLine, orElse } from "../common/errors.ts";
import * as contract from "./contract.ts";
import type { JobCounts } from "../common/snapshot.ts";
import type { Logger } from "../common/log.ts";
import { dirname, launcherPath } from "../common/paths.ts";
import { SIGKILL, signalName, SIGTERM } from "../common/signals.ts";
import { UnixListener } from "../sys/listener.ts";
import { readNoFollow } from "../sys/spool.ts";
import * as proc from "../sys/process.ts";
import { type MemoryCgroup, oomCountFile, readOomKills } from "../sys/cgroup.ts";

/** The service starts again no sooner than this, doubled at each death up to RESTART_MAX_MS. */
const RESTART_FIRST_MS = 100;
const RESTART_MAX_MS = 5000;
/** A service that ran this long before it died is started again at once (the backoff resets). */
const RESTART_RESET_AFTER_MS = 10_000;
/** Where the service finds the listening socket. */
const LISTEN_FD = 3;

/** Where and how the service runs. */
export interface JobsSettings {
  readonly socket: string;
  readonly spool: string;
  readonly log: Logger;
  /** The service's log lines: the same level and format as denit's. */
  readonly logArgs: readonly string[];
  readonly onOomKill: () => void;
  /** The supervisor's memory cgroup: its OOM-kill count says whether the service died of it. */
  readonly memory: MemoryCgroup | null;
  /** The container's open-file soft limit (the launcher's record), which every job gets. */
  readonly fileSoftLimit: number;
}

const encoder = new TextEncoder();

/** The state lines of the run in `dir` (none if the spool cannot be read: no job is known). */
function keeperStates(dir: string): contract.KeeperState[] {
  const names = orElse(() => [...Deno.readDirSync(dir)].map((entry) => entry.name), []);
  return names.filter((name) => /^\d+\.state$/.test(name)).flatMap((name) => {
    const bytes = readNoFollow(`${dir}/${name}`);
    const state = bytes === null ? null : contract.parseState(new TextDecoder().decode(bytes));
    return state === null ? [] : [state];
  });
}

/** For a user that is not root: what to do about a place it may not use ("" otherwise). */
function nonRootHint(err: unknown, dir: string): string {
  const uid = Deno.uid();
  let denied = false;
  for (let at: unknown = err; at instanceof Error && !denied; at = at.cause) {
    denied = at instanceof Deno.errors.PermissionDenied;
  }
  if (uid === 0 || uid === null || !denied) return "";
  return `; as uid ${uid}, give denit a directory of its own there (docker run --tmpfs ` +
    `${dir}:uid=${uid},mode=0700) or choose a place it owns`;
}

/** Runs the job service's process. */
export class JobHost {
  readonly #settings: JobsSettings;
  /** This run's directory in the spool: the service's, its keepers' and the stop marker's. */
  readonly #dir: string;
  #servicePid = 0;
  #serviceStartedAtMs = 0;
  #oomKillsAtStart: number | null = null;
  #restartDelayMs = RESTART_FIRST_MS;
  #listener: UnixListener | null = null;
  /** Resolves when the running service ended, with how long to wait before the next start. */
  #ended: PromiseWithResolvers<number> | null = null;
  /** denit is stopping: the service refuses new jobs. */
  #stopping = false;
  #closed = false;

  constructor(settings: JobsSettings) {
    this.#settings = settings;
    this.#dir = contract.runDirectory(settings.spool, Deno.pid);
  }

  /** The service's pid (0 while it is down): never signalled with the main child. */
  get servicePid(): number {
    return this.#servicePid;
  }

  /** The jobs by outcome as the service wrote them; while it is down, running as keepers say. */
  counts(): JobCounts {
    const none = { running: 0, started: 0, succeeded: 0, failed: 0, cancelled: 0 };
    const read = () => JSON.parse(Deno.readTextFileSync(`${this.#dir}/${contract.COUNTS_FILE}`));
    const counts: JobCounts = orElse(read, none); // not written yet: no job ran
    if (this.#servicePid > 0) return counts;
    const running =
      keeperStates(this.#dir).filter((s) => s.finished === 0 && contract.keeperLives(s)).length;
    return { ...counts, running };
  }

  /** denit's own processes: the job service and the live keepers this run's spool names. */
  own(): Set<number> {
    const keepers = keeperStates(this.#dir).filter(contract.keeperLives);
    const pids = new Set(keepers.map((state) => state.keeper));
    if (this.#servicePid > 0) pids.add(this.#servicePid);
    return pids;
  }

  /** Makes the trusted directories and listens, so that a bad path fails before the child runs. */
  async start(): Promise<void> {
    const { socket, spool } = this.#settings;
    try {
      // This run's directory too: a spool that cannot hold it (read-only) fails here, once.
      contract.prepareTrustedDirectory(this.#dir, "job spool:");
    } catch (err: unknown) {
      const hint = nonRootHint(err, spool);
      throw new Error(`Cannot keep jobs in "${spool}": ${errorLine(err)}${hint}`, { cause: err });
    }
    let listener: UnixListener;
    try {
      // The service's code, a bundle beside denit's own: checked now, as it runs only later.
      const code = `${new URL(".", Deno.mainModule).pathname}denit-jobs.js`;
      if (!proc.pathExists(code)) throw new Error(`the job service's code is missing: ${code}`);
      await contract.prepareSocketPath(socket);
      listener = UnixListener.bind(socket);
    } catch (err: unknown) {
      const why = `${errorLine(err)}${nonRootHint(err, dirname(socket))}`;
      throw new Error(`Cannot serve jobs on "${socket}": ${why}`, { cause: err });
    }
    this.#listener = listener;
    void this.#keepServing(listener);
  }

  /** The service's life: started when a connection waits; after its death, at the next one. */
  async #keepServing(listener: UnixListener): Promise<void> {
    while (!this.#closed && await listener.connectionWaits()) {
      if (this.#closed) return;
      const ended = Promise.withResolvers<number>();
      this.#ended = ended;
      try {
        this.#startService(listener.fd);
      } catch (err: unknown) {
        this.#settings.log.error("cannot start the job service", { error: errorLine(err) });
        ended.resolve(RESTART_MAX_MS);
      }
      const delay = await ended.promise;
      if (!this.#closed) await new Promise((resolve) => setTimeout(resolve, delay));
    }
  }

  #startService(listenFd: number): void {
    const { logArgs, memory, fileSoftLimit } = this.#settings;
    const launcher = launcherPath();
    const argv = [launcher, "job", "serve", "--run-dir", this.#dir, "--listen-fd", `${LISTEN_FD}`];
    argv.push("--nofile", `${fileSoftLimit}`);
    // Where the memory cgroup counts OOM kills: each job's keeper reads it (cause=oom).
    if (memory !== null) argv.push("--oom-count", oomCountFile(memory));
    argv.push(...logArgs);
    const result = proc.spawn({
      path: encoder.encode(launcher),
      argv: argv.map((word) => encoder.encode(word)),
      descriptors: [[listenFd, LISTEN_FD]],
    });
    if (result.kind === "failed") {
      const full = result.errno === proc.Errno.EAGAIN ? " (the pids limit is reached?)" : "";
      throw new Error(`${proc.errnoMessage(result.errno)}${full}`);
    }
    this.#servicePid = result.pid;
    this.#serviceStartedAtMs = performance.now();
    this.#oomKillsAtStart = this.#oomKills();
    // The OOM killer's pick after the jobs (1000), before denit: it loses nothing. A read-only
    // /proc, or the service gone already: the kernel's default choice stands.
    orElse(() => Deno.writeTextFileSync(`/proc/${result.pid}/oom_score_adj`, "500"), undefined);
    this.#settings.log.info("job service started", { pid: result.pid });
  }

  /** A status the reaper took: true if it was the service's (started again at a connection). */
  reaped(pid: number, status: proc.ExitStatus): boolean {
    if (pid !== this.#servicePid || pid === 0) return false;
    const ran = performance.now() - this.#serviceStartedAtMs;
    this.#servicePid = 0;
    // Killed by the OOM killer (SIGKILL, and the cgroup counted a kill since it started): the
    // container is out of memory, and a service started again at once would take back what the
    // process that grows needs (and be killed again).
    const killed = status.kind === "signaled" && status.signo === SIGKILL;
    const [before, now] = [this.#oomKillsAtStart, killed ? this.#oomKills() : null];
    const oom = before !== null && now !== null && now > before;
    if (oom) this.#settings.onOomKill();
    if (ran >= RESTART_RESET_AFTER_MS) this.#restartDelayMs = RESTART_FIRST_MS;
    const delay = oom ? RESTART_MAX_MS : this.#restartDelayMs;
    this.#restartDelayMs = Math.min(delay * 2, RESTART_MAX_MS);
    this.#ended?.resolve(delay);
    this.#ended = null;
    if (this.#stopping || this.#closed) return true;
    const how = status.kind === "exited"
      ? `exited with code ${status.code}`
      : oom
      ? "was killed by the kernel's OOM killer"
      : `was killed by ${signalName(status.signo)}`;
    this.#settings.log.warn(
      `the job service ${how}; starting it again at the next connection, ${delay} ms from now at the earliest`,
    );
    return true;
  }

  #oomKills(): number | null {
    return this.#settings.memory === null ? null : readOomKills(this.#settings.memory);
  }

  /** denit is stopping (a stop signal, or the main child ended): no new jobs from now on. */
  stopping(): void {
    if (this.#stopping) return;
    this.#stopping = true;
    try {
      Deno.writeFileSync(`${this.#dir}/${contract.STOPPING_FILE}`, new Uint8Array(), {
        mode: 0o600,
      });
    } catch (err: unknown) {
      this.#settings.log.warn("cannot mark the stop in the job spool: new jobs may still start", {
        error: errorLine(err),
      });
    }
  }

  /** Stops the service, closes the socket and removes it (denit is about to exit). */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    if (this.#listener !== null) {
      this.#listener.close();
      orElse(() => Deno.removeSync(this.#settings.socket), undefined); // gone already
    }
    if (this.#servicePid > 0) proc.sendSignal(this.#servicePid, SIGTERM);
    this.#ended?.resolve(0);
  }
}
