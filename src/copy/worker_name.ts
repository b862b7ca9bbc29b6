/** The copy worker's name; a module of its own so that the entry modules import nothing else. */
export const COPY_WORKER_NAME = "denit-copy-worker";

/** True when this module runs in the copy worker (then the entry serves copy jobs). */
export function isCopyWorker(): boolean {
  return "WorkerGlobalScope" in globalThis &&
    (globalThis as { name?: string }).name === COPY_WORKER_NAME;
}
