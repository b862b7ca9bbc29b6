/**
 * Starts the job service on its own thread (worker.ts) and hands the supervisor a channel to
 * it. Loaded by the entry module only when `--jobs-socket` is given.
 */

import type { FromJobHost, JobsChannel, ToJobHost } from "../common/jobs.ts";
import { helperError, JOBS_WORKER_NAME, startHelper } from "../common/workers.ts";

/** Resolves once the service listens on `socket`; rejects with why it cannot. */
export async function startJobs(socket: string, spool: string): Promise<JobsChannel> {
  let handler: ((message: ToJobHost) => void) | null = null;
  const early: ToJobHost[] = [];
  const start: FromJobHost = { type: "start", socket, spool };
  const { worker, answer } = await startHelper<FromJobHost, ToJobHost>(
    JOBS_WORKER_NAME,
    start,
    (message) => {
      // A Run that came before the supervisor was ready for it waits for the handler.
      if (handler === null) early.push(message);
      else handler(message);
    },
  );
  if (answer.type !== "listening") {
    worker.terminate();
    throw answer.type === "failed" ? helperError(answer) : new Error("no answer");
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
