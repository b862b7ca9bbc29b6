/**
 * A copy worker: a second thread that copies batches of files for the main thread (which walks
 * the tree, makes directories and finishes them). Descriptors are process-wide, so a job names
 * its directories by descriptor; the main thread keeps them open until the job is answered.
 */

import { listen } from "../common/workers.ts";
import { CopyError } from "./check.ts";
import {
  copyFile,
  CopyInterrupted,
  type CopyOptions,
  type FileJob,
  StopFlag,
  type XattrMiss,
} from "./file.ts";

/** Main thread → worker. */
export type ToWorker =
  | { type: "start"; options: CopyOptions; stop: SharedArrayBuffer }
  | { type: "batch"; id: number; jobs: FileJob[] };

/** The outcome of one job. */
export type JobOutcome =
  | { ok: true; bytes: number; misses: readonly XattrMiss[]; deferred: boolean }
  | { ok: false; message: string; signo: number | null };

/** Worker → main thread: one answer per batch. */
export type FromWorker = { type: "batch-done"; id: number; outcomes: JobOutcome[] };

/** Serves batches on this worker thread until the main thread terminates it. */
export function serveCopyJobs(): void {
  let options: CopyOptions | null = null;
  let stop = new StopFlag();
  // Batches run one after another, in the order they came.
  let queue = Promise.resolve();
  listen<ToWorker, FromWorker>((message, scope) => {
    if (message.type === "start") {
      options = message.options;
      stop = new StopFlag(message.stop);
      return;
    }
    const settings = options;
    if (settings === null) return;
    queue = queue.then(async () => {
      scope.postMessage({
        type: "batch-done",
        id: message.id,
        outcomes: await runBatch(message.jobs, settings, stop),
      });
    });
  });
}

async function runBatch(
  jobs: FileJob[],
  options: CopyOptions,
  stop: StopFlag,
): Promise<JobOutcome[]> {
  const outcomes: JobOutcome[] = [];
  for (const job of jobs) {
    try {
      stop.check();
      const result = await copyFile(job, options, stop, false);
      outcomes.push({
        ok: true,
        bytes: result.bytes,
        misses: result.misses,
        deferred: result.deferred,
      });
    } catch (err: unknown) {
      const signo = err instanceof CopyInterrupted ? err.signo : null;
      const message = err instanceof CopyError || err instanceof CopyInterrupted
        ? err.message
        : String(err);
      outcomes.push({ ok: false, message, signo });
    }
  }
  return outcomes;
}
