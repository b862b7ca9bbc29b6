/**
 * Starts the job service on its own thread (worker.ts) and hands the supervisor a channel to
 * it. Loaded by the entry module only when `--jobs-socket` is given.
 */

import type { FromJobHost, JobsChannel, ToJobHost } from "../common/jobs.ts";
import { JOBS_WORKER_NAME } from "../common/workers.ts";

const ERRORS: Record<string, new (message: string) => Error> = {
  AddrInUse: Deno.errors.AddrInUse,
  AlreadyExists: Deno.errors.AlreadyExists,
  PermissionDenied: Deno.errors.PermissionDenied,
  NotFound: Deno.errors.NotFound,
};

/** Resolves once the service listens on `socket`; rejects with why it cannot. */
export async function startJobs(socket: string, spool: string): Promise<JobsChannel> {
  const worker = new Worker(Deno.mainModule, { type: "module", name: JOBS_WORKER_NAME });
  const answer = Promise.withResolvers<ToJobHost>();
  let handler: ((message: ToJobHost) => void) | null = null;
  const early: ToJobHost[] = [];
  worker.onmessage = (event: MessageEvent<ToJobHost>) => {
    const message = event.data;
    if (message.type === "ready") {
      const start: FromJobHost = { type: "start", socket, spool };
      worker.postMessage(start);
    } else if (message.type === "listening" || message.type === "failed") {
      answer.resolve(message);
    } else if (handler === null) {
      early.push(message); // a Run that came before the supervisor was ready for it
    } else {
      handler(message);
    }
  };
  worker.onerror = (event: ErrorEvent) => {
    event.preventDefault();
    answer.resolve({ type: "failed", kind: "Error", message: event.message });
  };
  const reply = await answer.promise;
  if (reply.type !== "listening") {
    worker.terminate();
    const message = reply.type === "failed" ? reply.message : "no answer";
    const kind = reply.type === "failed" ? reply.kind : "Error";
    throw new (ERRORS[kind] ?? Error)(message);
  }
  return {
    send: (message) => worker.postMessage(message),
    listen: (next) => {
      handler = next;
      for (const message of early.splice(0)) next(message);
    },
    close: () => {
      worker.terminate();
      try {
        Deno.removeSync(socket);
      } catch {
        // Already gone.
      }
    },
  };
}
