/**
 * `--user`: the child is spawned from a worker thread whose own credentials were dropped to the
 * user's (sys/credentials.ts explains why a thread, and not a fork). The supervisor's thread
 * stays root; the child, a child of this process, is reaped by the one reaper as usual.
 */

import { SPAWN_WORKER_NAME, workerScope } from "../common/workers.ts";
import { spawn, type SpawnRequest, type SpawnResult } from "../sys/process.ts";
import type { RunAs } from "./user.ts";

/** Main thread → spawner: drop to `user` (once), then spawn. */
type ToSpawner = { type: "spawn"; user: RunAs; request: SpawnRequest };

/** Spawner → main thread. */
type FromSpawner =
  | { type: "ready" }
  | { type: "spawned"; result: SpawnResult }
  | { type: "refused"; message: string };

/** Serves spawn requests on this worker thread (the entry module dispatches here). */
export async function serveSpawns(): Promise<void> {
  const scope = workerScope<ToSpawner, FromSpawner>();
  const { dropThreadPrivileges } = await import("../sys/credentials.ts");
  let dropped = false;
  scope.onmessage = (event) => {
    const { user, request } = event.data;
    if (!dropped) {
      const result = dropThreadPrivileges(user.uid, user.gid, user.groups);
      if (!result.ok) {
        scope.postMessage({
          type: "refused",
          message: `${result.call} failed: errno ${result.errno}`,
        });
        return;
      }
      dropped = true;
    }
    scope.postMessage({ type: "spawned", result: spawn(request) });
  };
  scope.postMessage({ type: "ready" });
}

/** A spawner thread, started for `--user` only. */
export class Spawner {
  readonly #worker: Worker;
  readonly #ready: Promise<void>;
  #answer: ((message: FromSpawner) => void) | null = null;

  constructor() {
    this.#worker = new Worker(Deno.mainModule, { type: "module", name: SPAWN_WORKER_NAME });
    const ready = Promise.withResolvers<void>();
    this.#ready = ready.promise;
    this.#worker.onmessage = (event: MessageEvent<FromSpawner>) => {
      if (event.data.type === "ready") ready.resolve();
      else this.#answer?.(event.data);
    };
    this.#worker.onerror = (event: ErrorEvent) => {
      event.preventDefault();
      ready.resolve();
      this.#answer?.({ type: "refused", message: event.message });
    };
  }

  /** Spawns as `user`; throws an Error if the thread could not take the user's credentials. */
  async spawn(user: RunAs, request: SpawnRequest): Promise<SpawnResult> {
    await this.#ready;
    const answer = new Promise<FromSpawner>((resolve) => this.#answer = resolve);
    this.#worker.postMessage({ type: "spawn", user, request } satisfies ToSpawner);
    const message = await answer;
    if (message.type === "refused") {
      throw new Error(`Cannot run the child as "${user.spec}": ${message.message}`);
    }
    if (message.type !== "spawned") throw new Error("the spawner answered out of turn");
    return message.result;
  }

  /** Ends the thread (the child it spawned lives on, a child of this process). */
  close(): void {
    this.#worker.terminate();
  }
}
