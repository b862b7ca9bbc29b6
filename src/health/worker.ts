/**
 * The health endpoint's thread: binds, then serves the routes of endpoint.ts from the snapshot
 * the supervisor publishes in shared memory. Nothing here can block the supervisor's thread.
 */

import { workerScope } from "../common/workers.ts";
import type { ListenAddress } from "../common/address.ts";
import { type Snapshot, SnapshotBoard, type SupervisorSettings } from "../common/snapshot.ts";
import { route } from "./endpoint.ts";
import type { Readiness } from "./readiness.ts";
import { ProcessStatsCache } from "./proc_stats.ts";
import { HttpServer } from "./server.ts";

/** Main thread → worker. */
export type ToHealthWorker = {
  type: "start";
  address: ListenAddress;
  board: SharedArrayBuffer;
  supervisorStartedAtMs: number;
  settings: SupervisorSettings;
  /** The main thread's `performance.now()` as it sent this: each thread's clock has its own zero. */
  sentAtMs: number;
};

/** Worker → main thread: listening, or why not (the Deno error class name and message). */
export type FromHealthWorker =
  | { type: "ready" }
  | { type: "listening"; port: number; notifySocket: string | null }
  | { type: "failed"; kind: string; message: string };

const STARTING: Snapshot = Object.freeze({
  state: "starting",
  pid: null,
  startedAtMs: null,
  exitedAtMs: null,
  exitCode: null,
  exitSignal: null,
  zombiesReaped: 0,
  signalsForwarded: Object.freeze({}),
  unreapedZombies: 0,
  zombieParents: [],
  zombiesCheckedAtMs: null,
  exitCause: null,
  exitReason: null,
  cleanup: null,
  stopCause: null,
  drainingUntilMs: null,
  deadlineAtMs: null,
  memory: null,
  jobs: null,
});

/**
 * Binds; "::" (every address) falls back to "0.0.0.0" on a host without IPv6, where binding
 * "::" fails for want of the address family, not because the port is taken.
 */
function listen(address: ListenAddress, handler: ConstructorParameters<typeof HttpServer>[1]) {
  try {
    return new HttpServer(address, handler);
  } catch (err: unknown) {
    if (address.hostname !== "::" || err instanceof Deno.errors.AddrInUse) throw err;
    return new HttpServer({ hostname: "0.0.0.0", port: address.port }, handler);
  }
}

/** Serves the endpoint on this worker thread until the main thread terminates it. */
export function serveHealth(): void {
  const scope = workerScope<ToHealthWorker, FromHealthWorker>();
  scope.onmessage = async (event) => {
    const { address, supervisorStartedAtMs, settings, sentAtMs } = event.data;
    // The main thread's monotonic clock, read on this one: behind by at most the message's
    // latency, so that a stall is never seen early.
    const offsetMs = performance.now() - sentAtMs;
    const board = new SnapshotBoard(event.data.board);
    const stats = new ProcessStatsCache();
    const source = {
      snapshot: () => board.read() ?? STARTING,
      supervisorStartedAtMs,
      sinceBeatMs: () => performance.now() - offsetMs - board.lastBeatMs(),
      processStats: () => stats.get(),
      settings,
      readiness: () => ready?.view() ?? null,
    };
    let ready: Readiness | null = null;
    try {
      const server = listen(address, (request) => route(source, request));
      if (settings.readyWhen !== null) {
        // Loaded only for --ready-when; notify binds its socket here, before the child starts.
        const { Readiness } = await import("./readiness.ts");
        ready = await Readiness.start(settings.readyWhen, () => board.read()?.pid ?? null);
      }
      scope.postMessage({
        type: "listening",
        port: server.address.port,
        notifySocket: ready?.notifySocket ?? null,
      });
    } catch (err: unknown) {
      const kind = err instanceof Error ? err.name : "Error";
      const message = err instanceof Error ? err.message : String(err);
      scope.postMessage({ type: "failed", kind, message });
    }
  };
  // Only now can a message be received: the main thread waits for this before sending one.
  scope.postMessage({ type: "ready" });
}
