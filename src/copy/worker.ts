/**
 * The copy worker: a second thread that copies part of a large tree's files. It runs the
 * same FileCopier as the main thread and answers with what it did or the first failure.
 */

import { CopyError } from "./plan.ts";
import { CopyInterrupted, type CopyOptions, FileCopier, type FileJob } from "./file.ts";

/** Main thread → worker. */
export type ToWorker =
  | { type: "run"; jobs: FileJob[]; options: CopyOptions }
  | { type: "stop"; signo: number };

/** Worker → main thread. */
export type FromWorker =
  | { type: "done"; files: number; bytes: number }
  | { type: "failed"; message: string }
  | { type: "stopped"; signo: number };

interface WorkerScope {
  onmessage: ((event: MessageEvent<ToWorker>) => void) | null;
  postMessage(message: FromWorker): void;
  close(): void;
}

/** Serves one "run" request on this worker thread. */
export function serveCopyJobs(): void {
  const scope = globalThis as unknown as WorkerScope;
  let copier: FileCopier | null = null;
  scope.onmessage = async (event) => {
    const message = event.data;
    if (message.type === "stop") {
      copier?.interrupt(message.signo);
      return;
    }
    copier = new FileCopier(message.options);
    const answer = await runJobs(copier, message.jobs);
    scope.postMessage(answer);
    scope.close();
  };
}

async function runJobs(copier: FileCopier, jobs: FileJob[]): Promise<FromWorker> {
  try {
    for (const job of jobs) {
      copier.checkInterrupted();
      await copier.copy(job);
      await copier.maybeYield();
    }
    return { type: "done", files: copier.files, bytes: copier.bytes };
  } catch (err: unknown) {
    for (const temp of copier.temps) copier.removeTemp(temp);
    if (err instanceof CopyInterrupted) return { type: "stopped", signo: err.signo };
    return { type: "failed", message: err instanceof CopyError ? err.message : String(err) };
  }
}
