/** `--user`: the child spawned from a worker thread whose credentials were dropped. */

import { spawn, type SpawnRequest, type SpawnResult } from "../sys/process.ts";
import type { RunAs } from "../common/accounts.ts";

/** Main thread → spawner: drop to `user` (once), then spawn. */
type ToSpawner = { type: "spawn"; user: RunAs; request: SpawnRequest };

/** Spawner → main thread; "ready" first: it listens from then on. */
type FromSpawner =
  | { type: "ready" }
  | { type: "spawned"; result: SpawnResult }
  | { type: "refused"; message: string };
type Answer = Exclude<FromSpawner, { type: "ready" }>;

interface SpawnerScope {
  onmessage: ((event: MessageEvent<ToSpawner>) => void) | null;
  postMessage(message: FromSpawner): void;
}

/** Serves spawn requests on this worker thread (the entry module dispatches here). */
export async function serveSpawns(): Promise<void> {
  const { dropThreadPrivileges } = await import("../sys/credentials.ts");
  const scope = globalThis as unknown as SpawnerScope;
  let dropped = false;
  scope.onmessage = ({ data: { user, request } }) => {
    if (!dropped) {
      const failure = dropThreadPrivileges(user.uid, user.gid, user.groups);
      if (failure !== null) return scope.postMessage({ type: "refused", message: failure });
      dropped = true;
    }
    scope.postMessage({ type: "spawned", result: spawn(request) });
  };
  scope.postMessage({ type: "ready" });
}

/** A spawner thread, started for `--user` only. */
export class Spawner {
  readonly #worker = new Worker(Deno.mainModule, { type: "module", name: "denit-spawner" });
  readonly #ready = Promise.withResolvers<void>();
  #answer: ((message: Answer) => void) | null = null;

  constructor() {
    this.#worker.onmessage = ({ data }: MessageEvent<FromSpawner>) => {
      if (data.type === "ready") this.#ready.resolve();
      else this.#answer?.(data);
    };
    this.#worker.onerror = (event: ErrorEvent) => {
      event.preventDefault();
      this.#ready.resolve();
      this.#answer?.({ type: "refused", message: event.message });
    };
  }

  /** Spawns as `user`; throws an Error if the thread could not take the user's credentials. */
  async spawn(user: RunAs, request: SpawnRequest): Promise<SpawnResult> {
    await this.#ready.promise;
    const answer = new Promise<Answer>((resolve) => this.#answer = resolve);
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
