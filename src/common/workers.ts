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

/** A helper thread's first answer: it serves, or why it cannot (an error class name and text). */
export type HelperFailure = { type: "failed"; kind: string; message: string };

/** The error a helper thread reported, as the Deno error class it named (AddrInUse, ...). */
export function helperError(failure: HelperFailure): Error {
  const classes = Deno.errors as unknown as Record<string, new (message: string) => Error>;
  return new (classes[failure.kind] ?? Error)(failure.message);
}

/**
 * Starts a helper thread on the entry module (`new Worker(Deno.mainModule)`, dispatched by
 * `name`), sends it `start()` once it says "ready" (a message sent earlier could be lost), and
 * resolves with its first answer; every later message goes to `later`. A thread that fails
 * to load answers as a failure; one that dies later (an uncaught error) is a failure sent to
 * `later`, and never takes the supervisor's thread with it. The caller terminates the worker
 * when the answer is a failure.
 */
export async function startHelper<Start, Answer extends { type: string }>(
  name: string,
  start: () => Start,
  later: (message: Answer | HelperFailure) => void = () => {},
): Promise<{ worker: Worker; answer: Answer | HelperFailure }> {
  const worker = new Worker(Deno.mainModule, { type: "module", name });
  const answer = Promise.withResolvers<Answer | HelperFailure>();
  let answered = false;
  worker.onmessage = (event: MessageEvent<Answer | { type: "ready" }>) => {
    const message = event.data;
    if (message.type === "ready") worker.postMessage(start());
    else if (answered) later(message as Answer);
    else {
      answered = true;
      answer.resolve(message as Answer);
    }
  };
  worker.onerror = (event: ErrorEvent) => {
    event.preventDefault();
    const failure: HelperFailure = { type: "failed", kind: "Error", message: event.message };
    if (answered) later(failure);
    answered = true;
    answer.resolve(failure);
  };
  return { worker, answer: await answer.promise };
}
