/** `--user`: the child spawned from a worker thread whose credentials were dropped (root stays). */

import { listen, SPAWN_WORKER_NAME, startWorker } from "../common/workers.ts";
import { spawn, type SpawnRequest, type SpawnResult } from "../sys/process.ts";
import type { RunAs } from "./user.ts";

/** Main thread → spawner: drop to `user` (once), then spawn. */
type ToSpawner = { type: "spawn"; user: RunAs; request: SpawnRequest };

/** Spawner → main thread. */
type FromSpawner =
  | { type: "spawned"; result: SpawnResult }
  | { type: "refused"; message: string };

/** Serves spawn requests on this worker thread (the entry module dispatches here). */
export async function serveSpawns(): Promise<void> {
  const { dropThreadPrivileges } = await import("../sys/credentials.ts");
  let dropped = false;
  listen<ToSpawner, FromSpawner>(({ user, request }, scope) => {
    if (!dropped) {
      const failure = dropThreadPrivileges(user.uid, user.gid, user.groups);
      if (failure !== null) {
        scope.postMessage({ type: "refused", message: failure });
        return;
      }
      dropped = true;
    }
    scope.postMessage({ type: "spawned", result: spawn(request) });
  });
}

/** A spawner thread, started for `--user` only. */
export class Spawner {
  readonly #worker: Worker;
  readonly #ready: Promise<void>;
  #answer: ((message: FromSpawner) => void) | null = null;

  constructor() {
    const { worker, ready } = startWorker<FromSpawner>(SPAWN_WORKER_NAME, {
      onMessage: (message) => this.#answer?.(message),
      onError: (message) => this.#answer?.({ type: "refused", message }),
    });
    this.#worker = worker;
    this.#ready = ready;
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
    return message.result;
  }

  /** Ends the thread (the child it spawned lives on, a child of this process). */
  close(): void {
    this.#worker.terminate();
  }
}
