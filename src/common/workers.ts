/**
 * The names of denit's worker threads. The entry module is every worker's module too
 * (`new Worker(Deno.mainModule)`: the bundle, the compiled binary or mod.ts), so it dispatches
 * on the name; this module is small because the entry imports it before anything else.
 */

/** Copy mode's file-copying threads. */
export const COPY_WORKER_NAME = "denit-copy-worker";
/** The thread that spawns the child as another user (`--user`). */
export const SPAWN_WORKER_NAME = "denit-spawn-worker";

/** The name of the worker this module runs in, or null on the main thread. */
export function workerName(): string | null {
  if (!("WorkerGlobalScope" in globalThis)) return null;
  return (globalThis as { name?: string }).name ?? null;
}

/**
 * A worker thread's view of its own scope: messages of type `In` come from the main thread,
 * messages of type `Out` go to it.
 */
export interface WorkerScope<In, Out> {
  onmessage: ((event: MessageEvent<In>) => void) | null;
  postMessage(message: Out): void;
}

/** This worker thread's scope (call only on a worker thread). */
export function workerScope<In, Out>(): WorkerScope<In, Out> {
  return globalThis as unknown as WorkerScope<In, Out>;
}
