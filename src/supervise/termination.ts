/**
 * Kubernetes' termination message (4096 bytes of /dev/termination-log): renamed into place, else
 * one write(2); a child's own message is kept; a slow write is abandoned with a warn line.
 */

import { errorLine, orElse } from "../common/errors.ts";
import type { Logger } from "../common/log.ts";
import { formatDuration } from "../common/duration.ts";
import { quietDelay } from "../common/delay.ts";
import { dirname, randomHex } from "../common/paths.ts";
import { pathExists } from "../sys/process.ts";

/** Kubernetes' default terminationMessagePath. */
export const DEFAULT_TERMINATION_LOG = "/dev/termination-log";
/** The kubelet's cap on a termination message. */
export const MAX_REPORT_BYTES = 4096;
/** How long denit's exit may wait for the report to be written. */
export const WRITE_TIMEOUT_MS = 1000;

export interface TerminationReport {
  readonly exitCode: number;
  /** exited, oom, grace, timeout, forwarded, external; "start" when the child never ran. */
  readonly cause: string;
  readonly reason: string;
  readonly signal: string | null;
  readonly ranMs: number | null;
}

/** The report's text, cut to MAX_REPORT_BYTES. */
export function formatReport(report: TerminationReport): string {
  const lines = [
    `denit: exit code ${report.exitCode}`,
    `cause: ${report.cause}`,
    ...(report.signal === null ? [] : [`signal: ${report.signal}`]),
    ...(report.ranMs === null ? [] : [`ran: ${formatDuration(Math.round(report.ranMs))}`]),
    `reason: ${report.reason}`,
  ];
  const bytes = new TextEncoder().encode(`${lines.join("\n")}\n`);
  if (bytes.length <= MAX_REPORT_BYTES) return new TextDecoder().decode(bytes);
  // Cut on a character boundary: the decoder drops a split last character.
  return new TextDecoder().decode(bytes.subarray(0, MAX_REPORT_BYTES - 4)).replace(/\uFFFD$/, "") +
    "...\n";
}

async function writeWhole(path: string, bytes: Uint8Array): Promise<void> {
  // Only a regular file (or none) is replaced: a symbolic link, a FIFO read by a sidecar or a
  // device is written to, never swapped for a file.
  const existing = await Deno.lstat(path).catch(() => null);
  const replaceable = existing === null || existing.isFile;
  const failure = replaceable ? await replace(path, bytes) : null;
  if (replaceable && failure === null) return;
  // With no file to write into, why the new one could not be made is the answer (a read-only
  // filesystem, say), not that the file does not exist.
  if (existing === null && failure !== null) throw failure;
  await writeInto(path, bytes);
}

/** A temporary file beside `path`, renamed over it; null, or why that cannot be done here. */
async function replace(path: string, bytes: Uint8Array): Promise<unknown> {
  const dir = dirname(path);
  const temporary = `${dir === "/" ? "" : dir}/.denit-report-${randomHex(4)}`;
  try {
    await Deno.writeFile(temporary, bytes, { mode: 0o644, createNew: true });
    await Deno.rename(temporary, path);
    return null;
  } catch (err: unknown) {
    await Deno.remove(temporary).catch(() => {/* never made, or renamed already */});
    return err;
  }
}

/** One write(2) of at most 4096 bytes into the file itself (a mount point, say). */
async function writeInto(path: string, bytes: Uint8Array): Promise<void> {
  const file = await Deno.open(path, { write: true, truncate: true });
  try {
    const written = await file.write(bytes);
    if (written !== bytes.length) throw new Error(`short write: ${written} of ${bytes.length}`);
  } finally {
    file.close();
  }
}

/** The report to `path`, else to an empty /dev/termination-log; never throws (a warn line). */
export async function writeTerminationLog(
  setting: string | null,
  report: TerminationReport,
  log: Logger,
): Promise<void> {
  const path = setting ?? DEFAULT_TERMINATION_LOG;
  if (setting === null) {
    const info = pathExists(path) ? orElse(() => Deno.statSync(path), null) : null;
    if (info === null || !info.isFile) return; // Not in Kubernetes: nothing to do, nothing to say.
    if (info.size > 0) {
      log.debug("the child wrote its own termination message; left as it is", { path });
      return;
    }
  }
  const bytes = new TextEncoder().encode(formatReport(report));
  const timeout = quietDelay(WRITE_TIMEOUT_MS).then(() => "timeout" as const);
  try {
    const outcome = await Promise.race([writeWhole(path, bytes).then(() => "done"), timeout]);
    if (outcome === "timeout") {
      log.warn(
        `cannot write the termination message to ${path}: no answer in ${WRITE_TIMEOUT_MS} ms`,
      );
    }
  } catch (err: unknown) {
    // Deno's "Read-only file system (os error 30): writefile '...'": the system's words only.
    const reason = errorLine(err).replace(/: [a-z]+ '.*'$/, "");
    log.warn(`cannot write the termination message to ${path}: ${reason}`);
  }
}
