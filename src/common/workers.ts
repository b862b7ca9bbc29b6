/**
 * The names of denit's worker threads. The entry module is every worker's module too
 * (`new Worker(Deno.mainModule)`: the bundle, the compiled binary or mod.ts), so it dispatches
 * on the name; this module is small because the entry imports it before anything else.
 */

/** Copy mode's file-copying threads. */
export const COPY_WORKER_NAME = "denit-copy-worker";
/** The health endpoint's thread. */
export const HEALTH_WORKER_NAME = "denit-health-worker";
/** The thread that spawns the child as another user (`--user`). */
export const SPAWN_WORKER_NAME = "denit-spawn-worker";

/** The name of the worker this module runs in, or null on the main thread. */
export function workerName(): string | null {
  if (!("WorkerGlobalScope" in globalThis)) return null;
  return (globalThis as { name?: string }).name ?? null;
}
/** The job service's thread (`--jobs-socket`). */
export const JOBS_WORKER_NAME = "denit-jobs-worker";
