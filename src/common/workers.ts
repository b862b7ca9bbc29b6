/** denit's worker threads: the entry is every worker's module too, dispatched on the name. */

/** The thread that spawns the child as another user (`--user`). */
export const SPAWN_WORKER_NAME = "denit-spawn-worker";

/** The name of the worker this module runs in, or null on the main thread. */
export function workerName(): string | null {
  if (!("WorkerGlobalScope" in globalThis)) return null;
  return (globalThis as { name?: string }).name ?? null;
}

/** A worker's first message: it listens from now on (what is sent before could be lost). */
export interface Ready {
  readonly type: "ready";
}

/** A worker thread's view of its own scope: `In` comes from the main thread, `Out` goes to it. */
export interface WorkerScope<In, Out> {
  onmessage: ((event: MessageEvent<In>) => void) | null;
  postMessage(message: Out | Ready): void;
}

/** On a worker thread: hands each message to `onMessage`, then tells the main thread it listens. */
export function listen<In, Out>(
  onMessage: (message: In, scope: WorkerScope<In, Out>) => void,
): void {
  const scope = globalThis as unknown as WorkerScope<In, Out>;
  scope.onmessage = (event) => onMessage(event.data, scope);
  scope.postMessage({ type: "ready" });
}

/** Starts worker `name`: `ready` resolves once it listens or failed; then onMessage, onError. */
export function startWorker<Out extends { type: string }>(
  name: string,
  handlers: { onMessage(message: Out): void; onError(message: string): void },
): { worker: Worker; ready: Promise<void> } {
  const worker = new Worker(Deno.mainModule, { type: "module", name });
  const ready = Promise.withResolvers<void>();
  worker.onmessage = (event: MessageEvent<Out | Ready>) => {
    const message = event.data;
    if (message.type === "ready") ready.resolve();
    else handlers.onMessage(message as Out);
  };
  worker.onerror = (event: ErrorEvent) => {
    event.preventDefault();
    ready.resolve();
    handlers.onError(event.message);
  };
  return { worker, ready: ready.promise };
}
